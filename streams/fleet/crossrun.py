"""Per session: ``cross_run_repeat``, finished runs that repeat the same work.

Each finished run arrives as a :class:`FinishedRun` with its fingerprint (the
multiset of its window's ``(tool, argsHash, resultHash)`` records). When the
last ``runs`` finished runs of a session share one non-empty fingerprint, the
session's newest finished run gets a ``warn`` verdict. Only fingerprints are
kept here: nothing flows back into a run's own detectors, so the runs of a
session stay isolated from each other.
"""

from __future__ import annotations

import msgspec

from loopwarden.detection import messages
from loopwarden.schemas.extensions import CrossRun
from loopwarden.schemas.fleet import FinishedRun
from loopwarden.schemas.verdicts import Verdict

MAX_RUNS_KEPT = 64
MAX_WARNED = 64


class Ended(msgspec.Struct, array_like=True, frozen=True, order=True):
    """One finished run of a session, ordered by end time."""

    ts: float
    run_key: str
    fingerprint: str
    agent_id: str
    run_id: str | None = None


class SessionRuns(msgspec.Struct, array_like=True):
    """The newest finished runs of one session, in end-time order, and those warned (a table value)."""

    runs: list[Ended] = msgspec.field(default_factory=list)
    warned: list[str] = msgspec.field(default_factory=list)  # run keys
    seen: float = 0.0  # wall time of the last finished run received (0: a value from before this field)


def idle(st: SessionRuns, now: float, ttl: float) -> bool:
    """Whether a session has had no finished run for ``ttl`` seconds (its state can be dropped).

    Values written before ``seen`` existed fall back to their newest run's end time."""
    last = st.seen or max((r.ts for r in st.runs), default=0.0)
    return now - last >= ttl


def observe(
    st: SessionRuns | None, run: FinishedRun, cfg: CrossRun, shadow: bool = False
) -> tuple[SessionRuns, list[Verdict]]:
    """Add one finished run; a ``warn`` for each run that is the newest of ``cfg.runs`` equal ones.

    ``shadow`` (``cross_run_repeat`` in the agent's ``loopwarden.shadow``): the warnings are marked
    so, for the shadow topic instead of the runner's control topic.

    Runs of a session end on different partitions, so they may arrive out of
    order: they are kept in end-time order, and a run is warned when it and
    the ``runs - 1`` runs that ended before it share one non-empty fingerprint,
    whatever order they arrived in (the same verdicts as a replay of the trace).
    """
    st = st if st is not None else SessionRuns()
    runs = st.runs
    if any(r.run_key == run.run_key for r in runs):
        return st, []  # a redelivery: already counted (and warned, if it was due)
    need = max(2, cfg.runs)
    entry = Ended(run.ts, run.run_key, run.fingerprint, run.agent_id, run.run_id)
    runs.append(entry)
    runs.sort()
    del runs[: -max(MAX_RUNS_KEPT, need)]
    if entry not in runs:
        return st, []  # older than every run kept
    at = runs.index(entry)
    verdicts = []
    for end in range(max(at, need - 1), min(len(runs), at + need)):
        newest = runs[end]
        fp = newest.fingerprint
        if not fp or newest.run_key in st.warned or any(r.fingerprint != fp for r in runs[end - need + 1 : end]):
            continue
        st.warned.append(newest.run_key)
        del st.warned[:-MAX_WARNED]
        verdicts.append(
            Verdict(
                verdict_id=f"cross_run_repeat:{run.session_key}:{newest.run_key}",
                action="warn",
                agent_id=newest.agent_id,
                run_id=newest.run_id,
                session_id=run.session_id,
                level="warning",
                detector="cross_run_repeat",
                count=need,
                warning_key=f"cross_run_repeat:{fp}",
                message=messages.cross_run_repeat(need),
                event_ts=newest.ts,
                ts=newest.ts,
                shadow=shadow,
                origin=run.origin,
            )
        )
    return st, verdicts


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(SessionRuns)


def encode_state(st: SessionRuns) -> bytes:
    return _encoder.encode(st)


def decode_state(raw: bytes) -> SessionRuns:
    return _decoder.decode(raw)
