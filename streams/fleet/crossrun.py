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

from schemas.extensions import CrossRun
from schemas.verdicts import Verdict
from schemas.fleet import FinishedRun

MAX_RUNS_KEPT = 64


class SessionRuns(msgspec.Struct, array_like=True):
    """The newest finished runs of one session: (run key, fingerprint), oldest first (a table value)."""

    runs: list[tuple[str, str]] = msgspec.field(default_factory=list)


def observe(st: SessionRuns | None, run: FinishedRun, cfg: CrossRun) -> tuple[SessionRuns, Verdict | None]:
    """Add one finished run; the ``warn`` verdict when the last ``cfg.runs`` repeat one fingerprint."""
    st = st if st is not None else SessionRuns()
    if any(key == run.run_key for key, _ in st.runs):
        return st, None  # a redelivery: already counted (and warned, if it was due)
    st.runs.append((run.run_key, run.fingerprint))
    need = max(2, cfg.runs)
    st.runs = st.runs[-min(MAX_RUNS_KEPT, need):]
    last = st.runs[-need:]
    if len(last) < need or not run.fingerprint or any(fp != run.fingerprint for _, fp in last):
        return st, None
    message = (f"WARNING: this session's last {need} runs repeated the same {run.records} tool calls with the "
               f"same results; a scheduled task may be redoing work that has no effect.")
    return st, Verdict(verdict_id=f"cross_run_repeat:{run.session_key}:{run.run_key}", action="warn",
                       agent_id=run.agent_id, run_id=run.run_id, session_id=run.session_id, level="warning",
                       detector="cross_run_repeat", count=need, message=message,
                       warning_key=f"cross_run_repeat:{run.fingerprint}", event_ts=run.ts, ts=run.ts)


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(SessionRuns)


def encode_state(st: SessionRuns) -> bytes:
    return _encoder.encode(st)


def decode_state(raw: bytes) -> SessionRuns:
    return _decoder.decode(raw)
