"""The fleet side in one process, over one ordered trace (``loopwarden replay --incidents``, tests).

The worker spreads the same pure functions over partitions (signatures and
sessions each on their own repartition topic); here one object holds all
signatures and sessions, and event time is the newest ``ts`` seen so far.
An incident opened here is on the board at once, so the fleet response
(``incidents.block``) applies from the next event of the trace on.
"""

from __future__ import annotations

import math

from loopwarden.detection.decision import EventDecision
from loopwarden.detection.incident_block import IncidentBoard
from loopwarden.detection.state import RunState
from loopwarden.fleet import crossrun, incidents
from loopwarden.fleet.joins import run_signals
from loopwarden.schemas.config import GLOBAL_KEY, FleetConfig
from loopwarden.schemas.events import Event
from loopwarden.schemas.fleet import FinishedRun, Incident, Signal
from loopwarden.schemas.verdicts import Verdict


class FleetSide:
    """Signature and session states with their event-time clock; what each signal publishes."""

    def __init__(self, config: FleetConfig) -> None:
        self.config = config
        self.signatures: dict[str, incidents.SignatureState] = {}
        self.sessions: dict[str, crossrun.SessionRuns] = {}
        self.watermark = -math.inf
        self._due = math.inf  # earliest event time at which a signature may change by time alone

    def receive(self, signal: Signal) -> list[Incident | Verdict]:
        out: list[Incident | Verdict] = list(self.advance(signal.ts))
        if isinstance(signal, FinishedRun):
            ext = self.config.extensions_of(signal)
            st, verdicts = crossrun.observe(
                self.sessions.get(signal.session_key), signal, ext.cross_run, ext.shadowed("cross_run_repeat")
            )
            self.sessions[signal.session_key] = st
            return out + verdicts
        cfg = self.config.extensions(GLOBAL_KEY).incidents
        st, records = incidents.apply_join(self.signatures.get(signal.signature), signal, cfg)
        self.signatures[signal.signature] = st
        self._due = min(self._due, st.last_seen + cfg.window if st.incident_id else st.recent[0].ts + cfg.window)
        return out + records

    def advance(self, now: float) -> list[Incident]:
        """Move event time forward to ``now`` (never back); the incidents that resolve."""
        if now <= self.watermark:
            return []
        self.watermark = now
        if now < self._due:
            return []
        cfg = self.config.extensions(GLOBAL_KEY).incidents
        out: list[Incident] = []
        due = math.inf
        for signature, st in list(self.signatures.items()):
            st, records = incidents.expire(st, now, cfg)
            out += records
            if st is None:
                del self.signatures[signature]
            else:
                due = min(due, st.last_seen + cfg.window if st.incident_id else st.recent[0].ts + cfg.window)
        self._due = due
        return out


class FleetTrace:
    """Run side and fleet side of one trace: the incident :attr:`board` each event is decided with
    (:func:`~loopwarden.detection.decision.decide_event`), and the fleet records after it."""

    def __init__(self, config: FleetConfig) -> None:
        self.config = config
        self.side = FleetSide(config)
        self.board = IncidentBoard()

    def after(self, state_in: RunState | None, event: Event, result: EventDecision) -> list[Incident | Verdict]:
        side = self.side
        out: list[Incident | Verdict] = list(side.advance(event.ts)) if event.ts is not None else []
        now = side.watermark if side.watermark > -math.inf else 0.0
        for signal in run_signals(state_in, event, result, self.config.extensions_of(event), now):
            out += side.receive(signal)
        for record in out:
            if isinstance(record, Incident):
                self.board.apply(record)
        return out
