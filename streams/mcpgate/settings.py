"""The proxy's own settings (the runner client's are ``ClientSettings``, read as usual).

Bounds, and why:

- ``max_payload_bytes`` (65,536, as ``loopwarden spans``): a call's arguments and
  its result are published, and hashed by the rules, as they are up to this
  size and as a digest beyond it; the same large payload gives the same
  digest, so a loop of large identical calls still repeats. (The decision
  service refuses a body over 1 MiB instead; a proxy must not refuse a call,
  and a digest keeps every event far below the worker's ``max_event_bytes``.)
- ``max_pending`` (100,000, the decision service's): calls in flight through
  the proxy that are gated; beyond it a call goes straight to the server,
  ungated and counted, rather than queueing behind loopwarden;
- ``max_frame_bytes`` (16 MiB): the largest JSON-RPC frame the proxy reads to decide;
  a larger one (a huge result or argument) goes through as it came, undecided and
  counted, so no frame makes the proxy hold more than this;
- ``max_sessions`` (100): host sessions served at once over HTTP, each with its own
  connection to the wrapped server (a process, for a command); a new one beyond it ends the
  least recently used (hosts that leave without ending theirs never lock others out);
- ``max_runs`` (10,000, the decision service's and the client's
  ``max_local_runs``): runs (MCP sessions) whose handles the proxy keeps; the
  least recently used is forgotten.

Every field is also ``LOOPWARDEN_MCP_<FIELD>``; flags win.
"""

from __future__ import annotations

from typing import Any

import msgspec

from loopwarden.kafka.connection import settings_from_env

ENV_PREFIX = "LOOPWARDEN_MCP_"


class GateSettings(msgspec.Struct, kw_only=True):
    agent_id: str | None = None  # None: the client's name from initialize (clientInfo.name)
    default_agent: str = "mcp"  # when the client names itself nowhere
    max_payload_bytes: int = 65_536
    max_pending: int = 100_000
    max_runs: int = 10_000
    max_frame_bytes: int = 16 * 1024 * 1024
    max_sessions: int = 100

    def check(self) -> GateSettings:
        bounds = (self.max_payload_bytes, self.max_pending, self.max_runs, self.max_frame_bytes, self.max_sessions)
        if min(bounds) < 1:
            names = "--max-payload-bytes, --max-pending, --max-runs, --max-frame-bytes and --max-sessions"
            raise ValueError(f"{names} must be at least 1")
        return self

    @classmethod
    def from_env(cls, environ: dict | None = None, **overrides: Any) -> GateSettings:
        return settings_from_env(cls, ENV_PREFIX, environ, overrides)
