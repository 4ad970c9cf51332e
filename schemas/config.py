"""OpenClaw-shaped configuration: ``tools.loopDetection`` plus per-agent blocks.

Resolution follows streams/detection/RULES.md §1: per-agent overlay (shallow, with
``detectors`` and ``postCompactionGuard`` merged key by key; an explicit
``null`` replaces), numeric validation (positive integers only, otherwise
the default), then clamping (critical > warning, global > critical).
Files may be JSON or JSON5 (parsed with ``pyjson5``).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import msgspec

from loopwarden.schemas.extensions import (
    DEFAULT_EXTENSIONS,
    OBSERVED_ORIGINS,
    Extensions,
    observed,
    overlay_extensions,
    resolve_extensions,
)
from loopwarden.schemas.jsvalues import js_double, js_trim

DEFAULT_HISTORY_SIZE = 30
DEFAULT_WARNING_THRESHOLD = 10
DEFAULT_CRITICAL_THRESHOLD = 20
DEFAULT_UNKNOWN_TOOL_THRESHOLD = 10
DEFAULT_GLOBAL_THRESHOLD = 30
DEFAULT_GUARD_WINDOW = 3

# Upper bounds of the numeric knobs (a larger value counts as the cap). OpenClaw has none; a run's
# state grows with historySize and windowSize, so one config record must not make it unbounded
# (``historySize: 1e9``). The thresholds only need to stay finite counts. Values within the caps
# resolve exactly as before; ``loopwarden config check`` notes a clamped value.
KNOB_CAPS: dict[str, int] = {
    "historySize": 1000,
    "warningThreshold": 1_000_000,
    "criticalThreshold": 1_000_000,
    "globalCircuitBreakerThreshold": 1_000_000,
    "unknownToolThreshold": 1_000_000,
    "windowSize": 1000,  # postCompactionGuard.windowSize
}

GLOBAL_KEY = "*"
_NESTED = ("detectors", "postCompactionGuard")


class ConfigError(ValueError):
    """The config file or document cannot be used at all."""


class ResolvedConfig(msgspec.Struct, frozen=True, kw_only=True):
    """The effective loop-detection settings for one agent (§1)."""

    enabled: bool = False  # truthy `enabled`: rolling detectors run
    record_calls: bool = True  # `enabled` is not exactly false (§9.5)
    guard_enabled: bool = True  # `enabled` is not exactly false (§10.1)
    history_size: int = DEFAULT_HISTORY_SIZE
    warning_threshold: int = DEFAULT_WARNING_THRESHOLD
    critical_threshold: int = DEFAULT_CRITICAL_THRESHOLD
    unknown_tool_threshold: int = DEFAULT_UNKNOWN_TOOL_THRESHOLD
    global_circuit_breaker_threshold: int = DEFAULT_GLOBAL_THRESHOLD
    generic_repeat: bool = True
    known_poll_no_progress: bool = True
    ping_pong: bool = True
    guard_window: int = DEFAULT_GUARD_WINDOW


DEFAULT_CONFIG = ResolvedConfig()


def _positive_int(value: Any, default: int, key: str | None = None) -> int:
    """Rule 1.4: a number that is an integer and > 0, else the default; at most ``KNOB_CAPS[key]``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return default
    if isinstance(value, int):
        value = js_double(value)  # JavaScript reads a 400-digit literal as Infinity: not an integer
    if isinstance(value, float) and not value.is_integer():
        return default
    if value <= 0:
        return default
    cap = KNOB_CAPS.get(key) if key is not None else None
    return min(int(value), cap) if cap is not None else int(value)


def _truthy(value: Any) -> bool:
    """JavaScript truthiness for JSON values."""
    if value is None or value is False:
        return False
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value != 0 and value == value
    if isinstance(value, str):
        return value != ""
    return True


def _switch(block: dict, key: str) -> bool:
    """Detector switches default to true when missing or null (§1.6)."""
    value = block.get(key)
    return True if value is None else _truthy(value)


def overlay(global_block: dict | None, agent_block: dict | None) -> dict | None:
    """Rule 1.2: lay the agent's keys over the global block."""
    if agent_block is None:
        return global_block
    if global_block is None:
        return agent_block
    merged = dict(global_block)
    merged.update(agent_block)
    for key in _NESTED:
        g, a = global_block.get(key), agent_block.get(key)
        if isinstance(g, dict) or isinstance(a, dict):
            nested = dict(g) if isinstance(g, dict) else {}
            if isinstance(a, dict):
                nested.update(a)
            merged[key] = nested
    return merged


def resolve_block(block: dict | None) -> ResolvedConfig:
    """Rules 1.3-1.7 on an (already overlaid) ``loopDetection`` block."""
    if not isinstance(block, dict):
        return DEFAULT_CONFIG
    enabled = block.get("enabled")
    warning = _positive_int(block.get("warningThreshold"), DEFAULT_WARNING_THRESHOLD, "warningThreshold")
    critical = _positive_int(block.get("criticalThreshold"), DEFAULT_CRITICAL_THRESHOLD, "criticalThreshold")
    global_ = _positive_int(
        block.get("globalCircuitBreakerThreshold"), DEFAULT_GLOBAL_THRESHOLD, "globalCircuitBreakerThreshold"
    )
    if critical <= warning:
        critical = warning + 1
    if global_ <= critical:
        global_ = critical + 1
    detectors = block.get("detectors")
    detectors = detectors if isinstance(detectors, dict) else {}
    guard = block.get("postCompactionGuard")
    guard = guard if isinstance(guard, dict) else {}
    return ResolvedConfig(
        enabled=_truthy(enabled),
        record_calls=enabled is not False,
        guard_enabled=enabled is not False,
        history_size=_positive_int(block.get("historySize"), DEFAULT_HISTORY_SIZE, "historySize"),
        warning_threshold=warning,
        critical_threshold=critical,
        unknown_tool_threshold=_positive_int(
            block.get("unknownToolThreshold"), DEFAULT_UNKNOWN_TOOL_THRESHOLD, "unknownToolThreshold"
        ),
        global_circuit_breaker_threshold=global_,
        generic_repeat=_switch(detectors, "genericRepeat"),
        known_poll_no_progress=_switch(detectors, "knownPollNoProgress"),
        ping_pong=_switch(detectors, "pingPong"),
        guard_window=_positive_int(guard.get("windowSize"), DEFAULT_GUARD_WINDOW, "windowSize"),
    )


DEFAULT_AGENT_ID = "main"


def normalize_agent_id(agent_id: str | None) -> str:
    """OpenClaw's agent id normalization: trimmed, lowercased; missing or blank is ``main`` (§1.1)."""
    return js_trim(agent_id or "").lower() or DEFAULT_AGENT_ID


_OBSERVED_DEFAULT = observed(DEFAULT_EXTENSIONS)


class FleetConfig:
    """The global block and per-agent blocks; resolves and caches per agent.

    Immutable: live overrides (config topic) return a new instance via
    :meth:`with_override`, so a worker can swap it atomically.
    """

    __slots__ = (
        "global_block",
        "agent_blocks",
        "global_ext",
        "agent_ext",
        "_cache",
        "_ext_cache",
        "_observed_cache",
        "_fleet_wide",
        "_no_block_config",
    )

    def __init__(
        self,
        global_block: dict | None = None,
        agent_blocks: dict[str, dict | None] | None = None,
        global_ext: dict | None = None,
        agent_ext: dict[str, dict | None] | None = None,
    ):
        self.global_block = global_block if isinstance(global_block, dict) else None
        self.agent_blocks = {normalize_agent_id(k): v for k, v in (agent_blocks or {}).items()}
        # The `loopwarden` extension blocks (loopwarden.schemas.extensions), kept apart from OpenClaw's.
        self.global_ext = global_ext if isinstance(global_ext, dict) else None
        self.agent_ext = {normalize_agent_id(k): v for k, v in (agent_ext or {}).items() if isinstance(v, dict)}
        self._cache: dict[str, ResolvedConfig] = {}
        self._ext_cache: dict[str, Extensions] = {}
        self._observed_cache: dict[str, Extensions] = {}
        self._fleet_wide: bool | None = None
        # What every agent without a block of its own resolves to: one shared object, so the
        # per-event read of a config stays in cache however many agents the fleet has.
        self._no_block_config = resolve_block(self.global_block)

    @classmethod
    def from_document(cls, doc: Any) -> FleetConfig:
        """Build from an OpenClaw config document (``tools`` / ``agents.list``)."""
        if doc is None:
            return cls()
        if not isinstance(doc, dict):
            raise ConfigError("config must be an object")
        tools = doc.get("tools")
        global_block = tools.get("loopDetection") if isinstance(tools, dict) else None
        agents: dict[str, dict | None] = {}
        ext: dict[str, dict | None] = {}
        agent_section = doc.get("agents")
        entries = agent_section.get("list") if isinstance(agent_section, dict) else None
        for entry in entries if isinstance(entries, list) else ():
            if not isinstance(entry, dict) or not isinstance(entry.get("id"), (str, type(None))):
                continue  # an entry without an id (or a null one) is the agent `main`
            key = normalize_agent_id(entry.get("id"))
            if key in agents:  # first matching list entry wins, as in a find()
                continue
            etools = entry.get("tools")
            block = etools.get("loopDetection") if isinstance(etools, dict) else None
            agents[key] = block if isinstance(block, dict) else None
            ext[key] = entry.get("loopwarden")
        return cls(global_block if isinstance(global_block, dict) else None, agents, doc.get("loopwarden"), ext)

    def resolve(self, agent_id: str) -> ResolvedConfig:
        if not self.agent_blocks:
            return self._no_block_config  # no per-agent blocks: nothing to look up
        cached = self._cache.get(agent_id)
        if cached is None:
            agent_block = self.agent_blocks.get(normalize_agent_id(agent_id))
            cached = (
                self._no_block_config if agent_block is None else resolve_block(overlay(self.global_block, agent_block))
            )
            self._cache[agent_id] = cached
        return cached

    def extensions(self, agent_id: str) -> Extensions:
        """The agent's resolved ``loopwarden`` block (all off without one)."""
        cached = self._ext_cache.get(agent_id)
        if cached is None:
            if self.global_ext is None and not self.agent_ext:
                cached = DEFAULT_EXTENSIONS
            else:
                agent = self.agent_ext.get(normalize_agent_id(agent_id))
                cached = resolve_extensions(overlay_extensions(self.global_ext, agent))[0]
            self._ext_cache[agent_id] = cached
        return cached

    def extensions_of(self, event: Any) -> Extensions:
        """The extensions that apply to ``event`` (or a fleet signal: anything with ``agent_id`` and
        ``origin``): the agent's, every detector shadowed for an origin in ``OBSERVED_ORIGINS``."""
        agent_id = event.agent_id
        ext = self.extensions(agent_id)
        if getattr(event, "origin", None) not in OBSERVED_ORIGINS:
            return ext
        if ext is DEFAULT_EXTENSIONS:
            return _OBSERVED_DEFAULT  # no block of its own: one shared value, nothing cached per agent
        cached = self._observed_cache.get(agent_id)
        if cached is None:
            cached = self._observed_cache[agent_id] = observed(ext)
        return cached

    def fleet_wide(self) -> bool:
        """Whether any agent has a fleet-wide extension on (``incidents`` or ``crossRun``); when none
        has, the worker skips the fleet hooks per event altogether."""
        if self._fleet_wide is None:
            if self.global_ext is None and not self.agent_ext:
                self._fleet_wide = False
            else:
                blocks = [None, *self.agent_ext.values()]  # None: an agent without a block of its own
                resolved = (resolve_extensions(overlay_extensions(self.global_ext, b))[0] for b in blocks)
                self._fleet_wide = any(e.incidents.enabled or e.cross_run.enabled for e in resolved)
        return self._fleet_wide

    def problems(self) -> list[str]:
        """What in the ``loopwarden`` blocks was ignored, and why."""
        out = list(resolve_extensions(self.global_ext)[1]) if self.global_ext is not None else []
        for agent, block in self.agent_ext.items():
            out += [f"agent {agent}: {p}" for p in resolve_extensions(block)[1]]
        return out

    def with_override(self, key: str, block: Any, ext: Any = None) -> FleetConfig:
        """Apply one config-topic record: key ``*`` is the global block; ``None`` deletes.

        ``ext`` is the record's ``loopwarden`` block; a record without one
        leaves that agent's (or the global) extension settings as they were.
        """
        block = block if isinstance(block, dict) else None
        ext = ext if isinstance(ext, dict) else None
        if key == GLOBAL_KEY:
            return FleetConfig(block, self.agent_blocks, ext if ext is not None else self.global_ext, self.agent_ext)
        agents = dict(self.agent_blocks)
        agent_ext = dict(self.agent_ext)
        name = normalize_agent_id(key)
        if block is None:
            agents.pop(name, None)
        else:
            agents[name] = block
        if ext is not None:
            agent_ext[name] = ext
        return FleetConfig(self.global_block, agents, self.global_ext, agent_ext)


def parse_config_text(text: str, name: str | None = None) -> Any:
    """Parse JSON or JSON5 text (JSON is a subset of JSON5); errors name ``name`` and the line."""
    import pyjson5

    try:
        return pyjson5.decode(text)
    except Exception as exc:  # pyjson5 raises several error classes
        error = exc
    # pyjson5 refuses numbers beyond the double range and lone surrogate escapes,
    # which JavaScript reads (as ±Infinity, §2.3; as the surrogate). Plain JSON
    # has them read by Python's json; JSON5 gets such numerals as Infinity.
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        return pyjson5.decode(_OVERFLOW_NUMERAL.sub(_infinity, text))
    except Exception:
        raise ConfigError(_parse_error(text, error, name)) from None


# Strings and comments are matched (and kept) so that only numerals are rewritten.
_OVERFLOW_NUMERAL = re.compile(
    r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|//[^\n]*|/\*.*?\*/'
    r"|(?<![\w$.])[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?![\w$.])",
    re.DOTALL,
)


def _infinity(match: re.Match) -> str:
    token = match.group()
    if token[0] in "\"'/" or math.isfinite(float(token)):
        return token
    return "-Infinity" if token[0] == "-" else "Infinity"


def _parse_error(text: str, exc: Exception, name: str | None) -> str:
    """``FILE line N: not valid JSON/JSON5: reason`` from pyjson5's ``(message, partial, char)`` args."""
    import re

    message = str(exc.args[0]) if exc.args else str(exc)
    where = name or "config"
    found = re.search(r" near (\d+)", message)
    if found:  # pyjson5 gives a 1-based character position
        pos = max(int(found.group(1)) - 1, 0)
        where += f" line {text.count(chr(10), 0, pos) + 1}"
        message = message[: found.start()] + message[found.end() :]
    message = re.sub(r"b'([^']*)'", r"\1", message)  # "Stray b'comma'" -> "Stray comma"
    message = re.sub(r"U\+([0-9A-F]{4,6})", lambda m: repr(chr(int(m.group(1), 16))), message)
    return f"{where}: not valid JSON/JSON5: {message}"


def read_config_document(path: str | Path) -> Any:
    """The parsed document of a config file (ConfigError names the file, and the line when it is malformed)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read config {path}: {getattr(exc, 'strerror', None) or exc}") from None
    return parse_config_text(text, str(path))


def load_config(path: str | Path | None) -> FleetConfig:
    """Read an OpenClaw-shaped config file; ``None`` gives the defaults."""
    if path is None:
        return FleetConfig()
    return FleetConfig.from_document(read_config_document(path))
