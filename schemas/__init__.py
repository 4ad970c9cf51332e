"""The wire contract: events, verdicts, dead letters and the OpenClaw-shaped config."""

from loopwarden.schemas.events import (
    CompactionRetry,
    Event,
    EventDecodeError,
    RunEnd,
    RunnerDecision,
    ToolCall,
    ToolResult,
    Usage,
    decode_event,
    encode_event,
    key_for,
    run_key,
    run_scope,
    session_key,
    state_key,
)
from loopwarden.schemas.verdicts import DeadLetter, Detection, Verdict

__all__ = [
    "CompactionRetry",
    "DeadLetter",
    "Detection",
    "Event",
    "EventDecodeError",
    "RunEnd",
    "RunnerDecision",
    "ToolCall",
    "ToolResult",
    "Usage",
    "Verdict",
    "decode_event",
    "encode_event",
    "key_for",
    "run_key",
    "run_scope",
    "session_key",
    "state_key",
]
