"""The local decision service's HTTP/JSON bodies (``loopwarden sidecar``, streams/sidecar/SIDECAR.md).

Requests and answers under ``/v1/``, for runners and hooks in any language
that ask over loopback instead of embedding the engine. Free-form payloads
(``params``, ``result``, ``error``) stay :class:`msgspec.Raw` JSON, handed on
to the event as they came. Identifiers have the same caps as on the wire
(:data:`~loopwarden.schemas.events.MAX_ID_CHARS`); unknown fields are ignored,
so a client written against a later version still works. The JSON Schema
``schemas/sidecar.schema.json`` is generated from these Structs.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import UNSET, Raw, UnsetType

from loopwarden.schemas.events import MAX_ID_CHARS, MAX_TOOL_NAME_CHARS

API_VERSION = "v1"
MAX_DETAIL_CHARS = 1024

_Id = Annotated[str, msgspec.Meta(max_length=MAX_ID_CHARS)]
_ToolName = Annotated[str, msgspec.Meta(max_length=MAX_TOOL_NAME_CHARS)]
_Detail = Annotated[str, msgspec.Meta(max_length=MAX_DETAIL_CHARS)]
Action = Literal["allow", "warn", "block", "abort"]


class _RunRequest(msgspec.Struct, kw_only=True):
    """Who the request is about. ``run_id`` null: the session's current run (see ``RunStartRequest``)."""

    agent_id: _Id
    session_id: _Id | None = None
    run_id: _Id | None = None


class CheckRequest(_RunRequest, kw_only=True):
    """``POST /v1/check``: may this tool call run? ``tool_call_id`` null: the service assigns one."""

    tool_name: _ToolName
    params: Raw | UnsetType = UNSET  # any JSON; missing means {}
    tool_call_id: _Id | None = None


class CheckResponse(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The answer of a check. ``message`` is the text for the model, built from the verdict's fields.
    ``recovery`` is left out when there is none."""

    action: Action
    proceed: bool  # run the tool? (allow and warn)
    detector: str | None
    count: int | None
    message: str | None
    verdict_id: str | None  # what /v1/ack refers to
    source: str  # local, verdict, pending_block, aborted, worker_warning; fail open: timeout, error, offline, closed
    failed_open: bool
    run_id: str
    tool_call_id: str
    level: str | None  # warning / critical
    recovery: str | None = None  # under the profile's batch admission: "trigger" or "sibling" of a refused batch
    note: str | None = None  # a warning under the openclaw-latest profile: the release's system note for the result


MAX_BATCH = 128  # calls in one /v1/check_batch


class BatchCall(msgspec.Struct, kw_only=True):
    """One call of a batch: as in ``CheckRequest``."""

    tool_name: _ToolName
    params: Raw | UnsetType = UNSET
    tool_call_id: _Id | None = None


class CheckBatchRequest(_RunRequest, kw_only=True):
    """``POST /v1/check_batch``: one model message's tool calls, admitted together before any of them
    runs. Under the ``openclaw-latest`` profile this is the OpenClaw release's batch admission (earlier
    siblings count as vetoes; the run's first critical refuses the whole batch); otherwise each call
    is checked as ``/v1/check`` checks it, in order."""

    calls: Annotated[list[BatchCall], msgspec.Meta(min_length=1, max_length=MAX_BATCH)]


class CheckBatchResponse(msgspec.Struct, kw_only=True):
    """One answer per call, in the calls' order."""

    decisions: list[CheckResponse]


class ResultRequest(_RunRequest, kw_only=True):
    """``POST /v1/result``: the call's outcome. Without ``tool_call_id`` it pairs with the run's oldest
    pending check of the same ``tool_name`` and ``params``. ``blocked``: the host refused the call (the
    veto reached the model), so the block or abort is acknowledged as applied. ``pending_only``: an
    outcome read back later (a host's transcript), recorded only while its check awaits one, so an
    outcome already reported is never recorded twice."""

    tool_call_id: _Id | None = None
    tool_name: _ToolName | None = None
    params: Raw | UnsetType = UNSET
    result: Raw | UnsetType = UNSET
    error: Raw | UnsetType = UNSET
    blocked: bool = False
    pending_only: bool = False


class AckRequest(_RunRequest, kw_only=True):
    """``POST /v1/ack``: the runner acted on a verdict (a warning shown to the model) or could not."""

    verdict_id: _Id
    outcome: Literal["applied", "failed"] = "applied"
    detail: _Detail | None = None


class CompactionRequest(_RunRequest, kw_only=True):
    """``POST /v1/compaction``: the runner compacted the context and retries (arms the guard)."""

    reason: _Detail | None = None


class RunStartRequest(msgspec.Struct, kw_only=True):
    """``POST /v1/run_start``: a new run of the session (a new user prompt). ``run_id`` null: assigned."""

    agent_id: _Id
    session_id: _Id | None = None
    run_id: _Id | None = None


class RunEndRequest(_RunRequest, kw_only=True):
    """``POST /v1/run_end``: the run is over (acknowledges its abort, if any)."""


class RunStartResponse(msgspec.Struct, kw_only=True):
    run_id: str
    ended: str | None = None  # the session's previous run, ended by this start


class Warning(msgspec.Struct, kw_only=True):
    """A warning the call's check answered, for hosts that can hand the model context only with a
    result (Gemini CLI's AfterTool, Cursor's postToolUse): the text to show, and what to ack."""

    message: str
    verdict_id: str | None
    run_id: str


class Ok(msgspec.Struct, kw_only=True):
    ok: bool = True
    paired: bool | None = None  # /v1/result: the outcome found its check
    warning: Warning | None = None  # /v1/result: the paired check answered warn
    abort: Warning | None = None  # /v1/result: the run is aborted (hosts that can end a session after a call)


class Done(msgspec.Struct, kw_only=True):
    """``/v1/ack``, ``/v1/compaction``, ``/v1/run_end``: done, nothing else to say."""

    ok: bool = True


class Error(msgspec.Struct, kw_only=True):
    """400, 401, 403, 404, 405, 413: what was wrong, never the body's own text."""

    error: str


class Tables(msgspec.Struct, kw_only=True):
    """Current and maximum sizes of the service's bounded tables (least recently used dropped)."""

    sessions: int
    runs: int
    pending: int
    max_sessions: int
    max_runs: int
    max_pending: int
    max_body: int
    live_runs: int = 0  # runs with a warning, block or abort: the last to be evicted
    pending_bytes: int = 0
    max_pending_bytes: int = 0


class Health(msgspec.Struct, kw_only=True):
    """``GET /v1/health``."""

    status: Literal["ok"]
    broker: Literal["connected", "offline"]
    decisions: Literal["local", "worker"]
    listening: bool  # the verdict listener is on every control partition
    buffered: int  # events waiting for the broker
    tables: Tables
    version: str = API_VERSION


class ServiceStats(msgspec.Struct, kw_only=True):
    """The service's own counters (all monotonic)."""

    requests: int = 0
    bad_requests: int = 0
    unauthorized: int = 0
    forbidden: int = 0  # 403: a browser's request (Origin) or a foreign Host name (DNS rebinding)
    not_found: int = 0
    too_large: int = 0  # 413 (body) and 431 (request head)
    internal_errors: int = 0  # 500: a bug; the caller fails open
    connections_refused: int = 0  # 503: over a connection bound with every slot answering a request
    connections_evicted: int = 0  # closed to free a slot for a newcomer (idle, or not yet authenticated)
    peers_refused: int = 0  # 403 at connect: a Unix socket peer of another uid
    timeouts: int = 0  # connections closed idle, slow to send a request, or not authenticated in time (408)
    sessions_evicted: int = 0
    runs_evicted: int = 0
    pending_evicted: int = 0
    live_runs_evicted: int = 0  # runs with a warning, block or abort evicted (a flood past the live share)
    runs_kept: int = 0  # runs ended with a warning, block or abort: kept, their ids resumed still blocked
    results_unpaired: int = 0
    worker_warnings: int = 0  # worker warnings (cross-run, corrections) answered on a check


class Stats(msgspec.Struct, kw_only=True):
    """``GET /v1/stats``: the embedded runner client's counters, the service's, and the tables."""

    client: dict[str, int]
    service: ServiceStats
    tables: Tables


REQUESTS = (
    CheckRequest,
    CheckBatchRequest,
    ResultRequest,
    AckRequest,
    CompactionRequest,
    RunStartRequest,
    RunEndRequest,
)
RESPONSES = (CheckResponse, CheckBatchResponse, RunStartResponse, Ok, Done, Error, Health, Stats)
ENDPOINTS = {
    "POST /v1/check": ("CheckRequest", "CheckResponse"),
    "POST /v1/check_batch": ("CheckBatchRequest", "CheckBatchResponse"),
    "POST /v1/result": ("ResultRequest", "Ok"),
    "POST /v1/ack": ("AckRequest", "Done"),
    "POST /v1/compaction": ("CompactionRequest", "Done"),
    "POST /v1/run_start": ("RunStartRequest", "RunStartResponse"),
    "POST /v1/run_end": ("RunEndRequest", "Done"),
    "GET /v1/health": (None, "Health"),
    "GET /v1/stats": (None, "Stats"),
}
