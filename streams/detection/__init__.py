"""The pure detection engine: OpenClaw ``tools.loopDetection``, verdict for verdict.

No Faust, no Kafka, no I/O: the worker, ``loopwarden replay``, the runner
client and the unit tests all call :func:`step`; what an event decides beyond
the rules (enforcement, shadow, escalation, verdict numbering) is
:func:`loopwarden.detection.decision.decide_event`, which the worker, replay
and tune share. A "§N.M" in this package's
docstrings is a section of ``streams/detection/RULES.md``.
"""

from loopwarden.detection.engine import StepResult, step
from loopwarden.detection.state import RunState, decode_state, encode_state

__all__ = ["RunState", "StepResult", "decode_state", "encode_state", "step"]
