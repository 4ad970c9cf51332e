"""The wire contract: events, verdicts, dead letters and the OpenClaw-shaped config."""

from schemas.events import (
    CompactionRetry,
    Event,
    EventDecodeError,
    RunEnd,
    ToolCall,
    ToolResult,
    decode_event,
    encode_event,
    run_key,
    session_key,
)
from schemas.verdicts import DeadLetter, Detection, Verdict

__all__ = [
    "CompactionRetry",
    "DeadLetter",
    "Detection",
    "Event",
    "EventDecodeError",
    "RunEnd",
    "ToolCall",
    "ToolResult",
    "Verdict",
    "decode_event",
    "encode_event",
    "run_key",
    "session_key",
]
