"""Building wire events for one run, and the run key of a verdict.

Every event gets ``ts`` (seconds since the epoch, for latency only) and a
fresh ``event_id`` (uuid4: the worker drops a repeated one within a run, so
a producer retry never counts a call twice). Payloads may be Python values
or ready :class:`msgspec.Raw` JSON.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import msgspec
from msgspec import UNSET, Raw

from schemas.events import CompactionRetry, RunEnd, ToolCall, ToolResult, key_for, payload
from schemas.verdicts import Verdict


class RunRef(msgspec.Struct, frozen=True, kw_only=True):
    """Who a run is: what every event of it carries, and its Kafka key."""

    agent_id: str
    session_id: str | None = None
    run_id: str | None = None

    @property
    def key(self) -> str:
        """The run key the worker uses (:func:`schemas.events.key_for`, the one definition)."""
        return key_for(self.agent_id, self.session_id, self.run_id)


def verdict_key(verdict: Verdict, record_key: bytes | None = None) -> str:
    """The run key a verdict belongs to: the record key (the worker writes the run key), else its fields."""
    if record_key is not None:
        return record_key.decode("utf-8", "replace")
    return RunRef(agent_id=verdict.agent_id, session_id=verdict.session_id, run_id=verdict.run_id).key


def _raw(value: Any) -> Raw:
    return value if isinstance(value, Raw) else payload(value)


def _stamp() -> dict[str, Any]:
    return {"ts": time.time(), "event_id": uuid.uuid4().hex}


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def tool_call(run: RunRef, tool_name: str, params: Any = None, *, tool_call_id: str | None = None,
              await_decision: bool = False) -> ToolCall:
    """A ``tool_call``; a missing ``tool_call_id`` gets a fresh one (gate mode correlates on it)."""
    return ToolCall(agent_id=run.agent_id, session_id=run.session_id, run_id=run.run_id,
                    tool_name=tool_name, tool_call_id=tool_call_id or new_call_id(),
                    params=UNSET if params is None else _raw(params), await_decision=await_decision,
                    **_stamp())


def tool_result(run: RunRef, tool_name: str, params: Any = None, *, tool_call_id: str | None = None,
                result: Any = UNSET, error: Any = UNSET) -> ToolResult:
    """A ``tool_result``: pass ``result`` for an outcome, ``error`` when the tool threw."""
    return ToolResult(agent_id=run.agent_id, session_id=run.session_id, run_id=run.run_id,
                      tool_name=tool_name, tool_call_id=tool_call_id,
                      params=UNSET if params is None else _raw(params),
                      result=UNSET if result is UNSET else _raw(result),
                      error=UNSET if error is UNSET else _raw(error), **_stamp())


def result_for(call: ToolCall, *, result: Any = UNSET, error: Any = UNSET) -> ToolResult:
    """The ``tool_result`` of a published call: same run, tool, id and params."""
    return ToolResult(agent_id=call.agent_id, session_id=call.session_id, run_id=call.run_id,
                      tool_name=call.tool_name, tool_call_id=call.tool_call_id, params=call.params,
                      result=UNSET if result is UNSET else _raw(result),
                      error=UNSET if error is UNSET else _raw(error), **_stamp())


def compaction_retry(run: RunRef, reason: str | None = None) -> CompactionRetry:
    return CompactionRetry(agent_id=run.agent_id, session_id=run.session_id, run_id=run.run_id,
                           reason=reason, **_stamp())


def run_end(run: RunRef) -> RunEnd:
    return RunEnd(agent_id=run.agent_id, session_id=run.session_id, run_id=run.run_id, **_stamp())
