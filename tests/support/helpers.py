"""Small builders for the unit tests: events decoded from JSON text, a one-run driver
around ``step()``, hand-written hashes (SHA-256 of canonical strings written out by
hand from streams/detection/RULES.md §2), and the message templates of §8.1/§10.4 copied verbatim."""

from __future__ import annotations

import hashlib
import itertools
import json
from typing import Any

import msgspec

from loopwarden.detection import step
from loopwarden.schemas.config import resolve_block
from loopwarden.schemas.events import decode_event
from loopwarden.schemas.jsvalues import js_float

MISSING = object()

_js_decoder = msgspec.json.Decoder(float_hook=js_float)


def js_loads(text: str | bytes) -> Any:
    """JSON text -> Python value with the project's JavaScript number hook.

    Python's json reads the lone surrogate escapes that msgspec refuses (and
    JSON.parse accepts), so payloads that carry them decode too.
    """
    try:
        return _js_decoder.decode(text)
    except msgspec.DecodeError:
        return json.loads(text, parse_float=js_float)


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def sig(tool: str, canonical_params: str) -> str:
    """argsHash from a hand-written canonical form (§3.1)."""
    return f"{tool}:{sha(canonical_params)}"


def text_hash(text: str, details: str = "{}") -> str:
    """§4.9 hash for a plain-object result with ``details`` and content text (JSON-escaped by hand)."""
    return sha('{"details":' + details + ',"text":' + json.dumps(text, ensure_ascii=False) + "}")


def text_result(text: str, **details: Any) -> dict:
    out: dict[str, Any] = {"content": [{"type": "text", "text": text}]}
    if details:
        out["details"] = details
    return out


def event(type_: str, **fields: Any):
    body = {"type": type_}
    body.update({k: v for k, v in fields.items() if v is not MISSING})
    return decode_event(json.dumps(body, ensure_ascii=False))


# --- message templates, verbatim from streams/detection/RULES.md §8.1 and §10.4 ---


def msg_unknown(name: str, n: int) -> str:
    return (
        f"CRITICAL: attempted unavailable tool {name} {n} times. Stop retrying that missing tool and answer without it."
    )


def msg_global(tool: str, n: int) -> str:
    return f"CRITICAL: {tool} has repeated identical no-progress outcomes {n} times. Session execution blocked by global circuit breaker to prevent runaway loops."


def msg_poll_critical(tool: str, n: int) -> str:
    return f"CRITICAL: Called {tool} with identical arguments and no progress {n} times. This appears to be a stuck polling loop. Session execution blocked to prevent resource waste."


def msg_poll_warning(tool: str, n: int) -> str:
    return f"WARNING: You have called {tool} {n} times with identical arguments and no progress. Stop polling and either (1) increase wait time between checks, or (2) report the task as failed if the process is stuck."


def msg_pp_critical(n: int) -> str:
    return f"CRITICAL: You are alternating between repeated tool-call patterns ({n} consecutive calls) with no progress. This appears to be a stuck ping-pong loop. Session execution blocked to prevent resource waste."


def msg_pp_warning(n: int) -> str:
    return f"WARNING: You are alternating between repeated tool-call patterns ({n} consecutive calls). This looks like a ping-pong loop; stop retrying and report the task as failed."


def msg_generic_critical(tool: str, n: int) -> str:
    return f"CRITICAL: Called {tool} with identical arguments and identical outcomes {n} times. Session execution blocked to prevent runaway loops."


def msg_generic_warning(tool: str, n: int) -> str:
    return f"WARNING: You have called {tool} {n} times with identical arguments. If this is not making progress, stop retrying and report the task as failed."


def msg_compaction(tool: str, n: int, window: int) -> str:
    return f"CRITICAL: tool {tool} repeated {n} times with identical arguments and identical results within {window} attempts after auto-compaction. The compaction did not break the loop. Aborting to prevent runaway resource use."


# --- the openclaw-latest profile's templates that differ (RULES.md, its part), verbatim ---


def msg_generic_critical_latest(tool: str, n: int) -> str:
    return f"CRITICAL: Called {tool} with identical outcomes {n} times. Session execution blocked to prevent runaway loops."


def msg_global_latest(tool: str, n: int) -> str:
    return f"CRITICAL: {tool} repeated identical no-progress outcomes {n} times. Session execution blocked by global circuit breaker to prevent runaway loops."


def msg_churn(tool: str, v: int, n: int) -> str:
    return f"WARNING: {tool} has cycled through {v} repeated argument patterns with the same stable outcome {n} times. Continued churn is treated as stalled run activity, but this tool call remains allowed."


def msg_write_churn(tool: str, v: int) -> str:
    return f"WARNING: {tool} has changed the same target with {v} distinct argument variants and no intervening verification. Continued rewriting is treated as stalled run activity, but this tool call remains allowed. Read or verify the current result before rewriting it again."


# --- configs ---

ON = {"enabled": True}
# warning 2 / critical 3 / global 4: small enough to reason about by hand.
LOW = {"enabled": True, "warningThreshold": 2, "criticalThreshold": 3, "globalCircuitBreakerThreshold": 4}


def cfg(block: dict | None):
    return resolve_block(block)


class Run:
    """Drives one run's state through ``step()`` with events decoded from JSON."""

    def __init__(
        self,
        block: dict | None = ON,
        *,
        run_id: str | None = "run-1",
        agent_id: str = "agent-1",
        session_id: str | None = None,
    ):
        self.config = cfg(block)
        self.state = None
        self.run_id = run_id
        self.agent_id = agent_id
        self.session_id = session_id
        self._ids = itertools.count(1)

    def _base(self) -> dict:
        base: dict[str, Any] = {"agent_id": self.agent_id}
        if self.run_id is not None:
            base["run_id"] = self.run_id
        if self.session_id is not None:
            base["session_id"] = self.session_id
        return base

    def feed(self, ev, block: Any = MISSING):
        config = self.config if block is MISSING else cfg(block)
        res = step(self.state, ev, config)
        self.state = res.state
        return list(res.detections)

    def new_id(self) -> str:
        return f"c{next(self._ids)}"

    def call(self, tool: str | None, params: Any = MISSING, *, id: Any = MISSING, block: Any = MISSING, **extra):
        """A tool_call; returns the detections. ``id=None`` sends no tool_call_id."""
        fields = self._base()
        if tool is not None:
            fields["tool_name"] = tool
        if params is not MISSING:
            fields["params"] = params
        call_id = self.new_id() if id is MISSING else id
        if call_id is not None:
            fields["tool_call_id"] = call_id
        fields.update(extra)
        self.last_id = call_id
        return self.feed(event("tool_call", **fields), block)

    def result(
        self,
        tool: str | None,
        params: Any = MISSING,
        *,
        result: Any = MISSING,
        error: Any = MISSING,
        id: Any = None,
        block: Any = MISSING,
        **extra,
    ):
        fields = self._base()
        if tool is not None:
            fields["tool_name"] = tool
        if params is not MISSING:
            fields["params"] = params
        if id is not None:
            fields["tool_call_id"] = id
        if result is not MISSING:
            fields["result"] = result
        if error is not MISSING:
            fields["error"] = error
        fields.update(extra)
        return self.feed(event("tool_result", **fields), block)

    def pair(self, tool: str, params: Any = None, *, result: Any = MISSING, error: Any = MISSING, block: Any = MISSING):
        """A call and its result (same id); returns the call's detections plus the result's."""
        params = {} if params is None else params
        call_id = self.new_id()
        dets = self.call(tool, params, id=call_id, block=block)
        if dets and dets[0].level == "critical" and dets[0].detector != "compaction_loop_persisted":
            return dets  # blocked: the runner never executes it
        return dets + self.result(tool, params, result=result, error=error, id=call_id, block=block)

    def arm(self, block: Any = MISSING):
        return self.feed(event("compaction_retry", **self._base()), block)

    def end(self):
        return self.feed(event("run_end", **self._base()))


class Rec(msgspec.Struct):
    """A consumed record as the worker's batch path sees it (batch-path tests)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


class MemRunTable:
    """The run table's interface (``owned_items``, ``get``, ``write``) in memory, for the expiry sweep.

    ``data`` maps ``(partition, key)`` to stored bytes; ``owned_items`` is a snapshot, as RocksDB's scan is.
    """

    scannable = True  # lists its runs, as the RocksDB store does

    def __init__(self, data: dict[tuple[int, bytes], bytes]) -> None:
        self.data = dict(data)

    def owned_items(self, partitions):
        return [(p, k, v) for (p, k), v in list(self.data.items()) if p in partitions]

    def owned_listings(self, partitions):
        for partition in sorted(partitions):  # each partition read when reached, as the RocksDB table does
            yield partition, [(k, v) for (p, k), v in list(self.data.items()) if p == partition]

    def get(self, p, k):
        return self.data.get((p, k))

    async def write(self, items):
        for p, k, v in items:
            if v is None:
                self.data.pop((p, k), None)
            else:
                self.data[(p, k)] = v
