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

from loopwarden.schemas.bounds import MAX_DEPTH, too_deep
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
    "historySize": 10_000,
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


BUCKET = 10  # warnings are published when a count reaches 10, 20, 30 ... (fixed, not a setting)


class Note(msgspec.Struct, frozen=True, kw_only=True):
    """One value of a block that is not what the file says (or that is easy to misread)."""

    key: str  # "criticalThreshold", "detectors.pingPong", "postCompactionGuard.windowSize"
    value: Any  # the effective value
    text: str  # why, in words
    source: str | None = None  # for an agent: "agent" or "global" (where the given value came from)


def show(value: Any) -> str:
    """A JSON value as the config's author wrote it (``'thirty'``, ``null``, ``true``, ``Infinity``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return repr(int(value)) if value.is_integer() and abs(value) < 2**53 else repr(value)
    if isinstance(value, (dict, list)):
        try:
            text = msgspec.json.encode(value).decode()
        except UnicodeEncodeError:  # a lone surrogate (JSON allows one): shown escaped
            text = json.dumps(value)[:41]
        return text if len(text) <= 40 else text[:37] + "..."
    return repr(value)


_NUMERIC = (  # (key, default); the order of §1.4
    ("historySize", DEFAULT_HISTORY_SIZE),
    ("warningThreshold", DEFAULT_WARNING_THRESHOLD),
    ("criticalThreshold", DEFAULT_CRITICAL_THRESHOLD),
    ("unknownToolThreshold", DEFAULT_UNKNOWN_TOOL_THRESHOLD),
    ("globalCircuitBreakerThreshold", DEFAULT_GLOBAL_THRESHOLD),
)
_SWITCHES = ("genericRepeat", "knownPollNoProgress", "pingPong")
_UNSET = msgspec.UNSET


def resolve_block(block: Any, notes: list[Note] | None = None, agent_block: Any = None) -> ResolvedConfig:
    """Rules 1.3-1.7 on an (already overlaid) ``loopDetection`` block: the one resolver.

    With a ``notes`` list it also records a :class:`Note` per value that is not what the block
    says, and why (``loopwarden config check``); ``agent_block`` (the agent's own block before
    overlay) only labels each note with where its value came from. The engine's settings
    (:meth:`FleetConfig.resolve`) call it without notes.
    """
    if not isinstance(block, dict):
        if notes is None:
            return DEFAULT_CONFIG
        block = {}
    agent = agent_block if isinstance(agent_block, dict) else None

    def note(key: str, value: Any, text: str, name: str | None = None, nested: str | None = None) -> None:
        if notes is None:
            return
        source = None
        if agent_block is not None:
            name = name or key
            inner = agent if nested is None else (agent.get(nested) if agent is not None else None)
            source = "agent" if isinstance(inner, dict) and name in inner else "global"
        notes.append(Note(key=key, value=value, text=text, source=source))

    numbers: list[int] = []
    for key, default in _NUMERIC:
        raw = block.get(key, _UNSET)
        value = default if raw is _UNSET else _positive_int(raw, default, key)
        numbers.append(value)
        if notes is not None and raw is not _UNSET and not (value == raw and not isinstance(raw, bool)):
            if _positive_int(raw, default) != value:  # above its cap
                note(key, value, f"{key} {show(raw)} is above the cap {value}: {value}")
            else:
                why = "null" if raw is None else f"{show(raw)} is not a positive integer"
                note(key, value, f"{key} {why}: default {default}")
    history, warning, critical, unknown, global_ = numbers
    if critical <= warning:
        note(
            "criticalThreshold",
            warning + 1,
            f"criticalThreshold {critical} ≤ warningThreshold {warning}: raised to {warning + 1}",
        )
        critical = warning + 1
    if global_ <= critical:
        note(
            "globalCircuitBreakerThreshold",
            critical + 1,
            f"globalCircuitBreakerThreshold {global_} ≤ criticalThreshold {critical}: raised to {critical + 1}",
        )
        global_ = critical + 1

    enabled = block.get("enabled", _UNSET)
    on = enabled is not _UNSET and _truthy(enabled)
    if notes is not None:
        if enabled is _UNSET or enabled is None:
            note(
                "enabled",
                False,
                f"enabled {'not set' if enabled is _UNSET else 'null'}: the rolling detectors"
                " are off (calls are still recorded and the post-compaction guard is on)",
            )
        elif not isinstance(enabled, bool):
            extra = (
                ""
                if on
                else " (calls are still recorded and the post-compaction guard is on:"
                " only exactly false turns those off)"
            )
            note("enabled", on, f"enabled {show(enabled)} is not a boolean: counts as {show(on)}{extra}")
        if on and warning < BUCKET:
            note(
                "warningThreshold",
                warning,
                f"warningThreshold {warning} < {BUCKET}: warnings are published only when a count "
                f"reaches {BUCKET}, {2 * BUCKET}, ..., so counts below {BUCKET} warn nobody",
            )

    detectors = block.get("detectors")
    if detectors is not None and not isinstance(detectors, dict):
        note("detectors", True, f"detectors {show(detectors)} is not an object: every detector on")
    detectors = detectors if isinstance(detectors, dict) else {}
    switches: list[bool] = []
    for key in _SWITCHES:
        raw = detectors.get(key, _UNSET)
        value = True if raw is _UNSET or raw is None else _truthy(raw)
        switches.append(value)
        if raw is None or (raw is not _UNSET and not isinstance(raw, bool)):
            why = "null: default true" if raw is None else f"{show(raw)} is not a boolean: counts as {show(value)}"
            note(f"detectors.{key}", value, f"detectors.{key} {why}", key, "detectors")

    guard = block.get("postCompactionGuard")
    if guard is not None and not isinstance(guard, dict):
        note(
            "postCompactionGuard",
            DEFAULT_GUARD_WINDOW,
            f"postCompactionGuard {show(guard)} is not an object: windowSize {DEFAULT_GUARD_WINDOW}",
        )
    guard = guard if isinstance(guard, dict) else {}
    raw = guard.get("windowSize", _UNSET)
    window = DEFAULT_GUARD_WINDOW if raw is _UNSET else _positive_int(raw, DEFAULT_GUARD_WINDOW, "windowSize")
    if raw is not _UNSET and _positive_int(raw, DEFAULT_GUARD_WINDOW) != window:  # above its cap
        note(
            "postCompactionGuard.windowSize",
            window,
            f"postCompactionGuard.windowSize {show(raw)} is above the cap {window}: {window}",
            "windowSize",
            "postCompactionGuard",
        )
    elif raw is not _UNSET and not (window == raw and not isinstance(raw, bool)):
        why = "null" if raw is None else f"{show(raw)} is not a positive integer"
        note(
            "postCompactionGuard.windowSize",
            window,
            f"postCompactionGuard.windowSize {why}: default {DEFAULT_GUARD_WINDOW}",
            "windowSize",
            "postCompactionGuard",
        )
    return ResolvedConfig(
        enabled=on,
        record_calls=enabled is not False,
        guard_enabled=enabled is not False,
        history_size=history,
        warning_threshold=warning,
        critical_threshold=critical,
        unknown_tool_threshold=unknown,
        global_circuit_breaker_threshold=global_,
        generic_repeat=switches[0],
        known_poll_no_progress=switches[1],
        ping_pong=switches[2],
        guard_window=window,
    )


DEFAULT_AGENT_ID = "main"


def normalize_agent_id(agent_id: str | None) -> str:
    """OpenClaw's agent id normalization: trimmed, lowercased; missing or blank is ``main`` (§1.1)."""
    return js_trim(agent_id or "").lower() or DEFAULT_AGENT_ID


_OBSERVED_DEFAULT = observed(DEFAULT_EXTENSIONS)

MAX_AGENT_OVERRIDES = 100_000
"""Agents the config topic may give a block of their own; a record for one more is ignored and counted
(updates and deletes of agents already overridden always apply). The config file's agents do not count."""


def _wide(ext: Extensions) -> bool:
    return ext.incidents.enabled or ext.cross_run.enabled


class FleetConfig:
    """The global block and per-agent blocks; resolves and caches per agent.

    The config file's blocks are kept apart from the live overrides (config
    topic), so deleting an override restores the file's block. A live override
    (:meth:`set_override`) is applied in place and touches only its agent's
    entries: O(1) whatever the number of agents (a ``*`` record re-resolves
    the global block and empties the per-agent caches). Agents without a block
    of their own share one resolved object, and only agents with a block are
    cached, so the caches grow with the config, never with the agent ids seen.
    :meth:`with_override` is the copying form.
    """

    __slots__ = (
        "global_block",
        "agent_blocks",
        "global_ext",
        "agent_ext",
        "_file",
        "_live",
        "_cache",
        "_ext_cache",
        "_observed_cache",
        "_default_ext",
        "_wide_agents",
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
        # What a deleted override falls back to: the blocks this config was built with (the file's).
        self._file = (self.global_block, dict(self.agent_blocks), self.global_ext, dict(self.agent_ext))
        self._live: set[str] = set()  # agents with a live override (MAX_AGENT_OVERRIDES)
        self._reset_global()

    def _reset_global(self) -> None:
        self._cache: dict[str, ResolvedConfig] = {}  # normalized agent id -> config, agents with a block only
        self._ext_cache: dict[str, Extensions] = {}  # likewise for agents with a `loopwarden` block
        # likewise, observed (extensions_of); "" = the shared value of agents without a block of their own
        self._observed_cache: dict[str, Extensions] = {}
        self._default_ext: Extensions | None = None
        self._wide_agents: set[str] | None = None  # agents whose extensions are fleet-wide (lazy)
        # What every agent without a block of its own resolves to: one shared object, so the
        # per-event read of a config stays in cache however many agents the fleet has.
        self._no_block_config = resolve_block(self.global_block)

    def copy(self) -> FleetConfig:
        """A copy with the same file blocks and live overrides (O(agents))."""
        clone = FleetConfig.__new__(FleetConfig)
        clone.global_block, clone.global_ext = self.global_block, self.global_ext
        clone.agent_blocks, clone.agent_ext = dict(self.agent_blocks), dict(self.agent_ext)
        clone._file, clone._live = self._file, set(self._live)
        clone._reset_global()
        return clone

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
        name = normalize_agent_id(agent_id)
        cached = self._cache.get(name)
        if cached is None:
            agent_block = self.agent_blocks.get(name)
            if agent_block is None:
                return self._no_block_config
            cached = self._cache[name] = resolve_block(overlay(self.global_block, agent_block))
        return cached

    def extensions(self, agent_id: str) -> Extensions:
        """The agent's resolved ``loopwarden`` block (all off without one)."""
        if self.global_ext is None and not self.agent_ext:
            return DEFAULT_EXTENSIONS
        name = normalize_agent_id(agent_id) if self.agent_ext else None
        agent = self.agent_ext.get(name) if name is not None else None
        if agent is None:
            return self._no_block_extensions()
        cached = self._ext_cache.get(name)
        if cached is None:
            cached = self._ext_cache[name] = resolve_extensions(overlay_extensions(self.global_ext, agent))[0]
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
        name = normalize_agent_id(agent_id)
        key = name if name in self.agent_ext else ""  # cached per agent with a block, else one shared value
        cached = self._observed_cache.get(key)
        if cached is None:
            cached = self._observed_cache[key] = observed(ext)
        return cached

    def _no_block_extensions(self) -> Extensions:
        """What every agent without a ``loopwarden`` block of its own resolves to (one shared object)."""
        if self._default_ext is None:
            self._default_ext = resolve_extensions(overlay_extensions(self.global_ext, None))[0]
        return self._default_ext

    def fleet_wide(self) -> bool:
        """Whether any agent has a fleet-wide extension on (``incidents`` or ``crossRun``); when none
        has, the worker skips the fleet hooks per event altogether. Kept up to date per agent; after a
        ``*`` record it is worked out again, once, over the agents with a ``loopwarden`` block."""
        if self.global_ext is None and not self.agent_ext:
            return False
        if self._wide_agents is None:
            self._wide_agents = {name for name in self.agent_ext if _wide(self.extensions(name))}
        return bool(self._wide_agents) or _wide(self._no_block_extensions())

    def uses_profile(self) -> bool:
        """Whether any agent runs under a ``loopwarden.profile``."""
        blocks = [None, *self.agent_ext.values()]  # None: an agent without a block of its own
        return any(resolve_extensions(overlay_extensions(self.global_ext, b))[0].profile for b in blocks)

    def problems(self) -> list[str]:
        """What in the ``loopwarden`` blocks was ignored, and why."""
        out = list(resolve_extensions(self.global_ext)[1]) if self.global_ext is not None else []
        for agent, block in self.agent_ext.items():
            out += [f"agent {agent}: {p}" for p in resolve_extensions(block)[1]]
        return out

    def set_override(self, key: str, block: Any, ext: Any = None, delete: bool = False) -> bool:
        """Apply one config-topic record in place; False if it was ignored (``MAX_AGENT_OVERRIDES``).

        Key ``*`` is the global block. A record without a ``loopDetection`` block
        (``block`` None) gives that key the config file's block back; ``ext`` is
        the record's ``loopwarden`` block, and a record without one leaves that
        agent's (or the global) extension settings as they were. ``delete`` (a
        tombstone) gives back the file's blocks, both of them.
        """
        block = block if isinstance(block, dict) else None
        ext = ext if isinstance(ext, dict) else None
        file_global, file_agents, file_global_ext, file_agent_ext = self._file
        if key == GLOBAL_KEY:
            self.global_block = block if block is not None else file_global
            if delete:
                self.global_ext = file_global_ext
            elif ext is not None:
                self.global_ext = ext
            self._reset_global()
            return True
        name = normalize_agent_id(key)
        if delete:
            self._live.discard(name)
        elif name not in self._live:
            if len(self._live) >= MAX_AGENT_OVERRIDES:
                return False
            self._live.add(name)
        if block is not None:
            self.agent_blocks[name] = block
        elif name in file_agents:
            self.agent_blocks[name] = file_agents[name]
        else:
            self.agent_blocks.pop(name, None)
        if delete:
            ext = file_agent_ext.get(name)
            if ext is None:
                self.agent_ext.pop(name, None)
        if ext is not None:
            self.agent_ext[name] = ext
        self._cache.pop(name, None)
        self._ext_cache.pop(name, None)
        self._observed_cache.pop(name, None)
        if self._wide_agents is not None:
            self._wide_agents.discard(name)
            if name in self.agent_ext and _wide(self.extensions(name)):
                self._wide_agents.add(name)
        return True

    def with_override(self, key: str, block: Any, ext: Any = None, delete: bool = False) -> FleetConfig:
        """A copy with one config-topic record applied (:meth:`set_override`)."""
        clone = self.copy()
        clone.set_override(key, block, ext, delete)
        return clone


def parse_config_text(text: str, name: str | None = None) -> Any:
    """Parse JSON or JSON5 text (JSON is a subset of JSON5); errors name ``name`` and the line.

    Text nested deeper than :data:`~loopwarden.schemas.bounds.MAX_DEPTH` is refused before any
    parser sees it (a config record is hostile input; parsers recurse)."""
    import pyjson5

    depth = too_deep(text.encode("utf-8", "surrogatepass"))
    if depth is not None:
        raise ConfigError(f"{name or 'config'}: nested {depth} deep, more than {MAX_DEPTH}")
    try:
        return pyjson5.decode(text)
    except Exception as exc:  # pyjson5 raises several error classes
        error = exc
    # pyjson5 refuses numbers beyond the double range and lone surrogate escapes,
    # which JavaScript reads (as ±Infinity, §2.3; as the surrogate). Plain JSON
    # has them read by Python's json; JSON5 gets such numerals as Infinity.
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        pass
    try:
        return pyjson5.decode(_OVERFLOW_NUMERAL.sub(_infinity, text))
    except Exception:
        raise ConfigError(_parse_error(text, error, name)) from None


# Strings and comments are matched (and kept) so that only numerals are rewritten. Linear on any
# text (a config record is hostile input): atomic groups and possessive repeats never backtrack, and
# a string or comment left open matches up to the end instead of failing (a failing match would be
# retried from every later quote: quadratic on a run of escaped quotes, as on a run of digits).
_OVERFLOW_NUMERAL = re.compile(
    r'"(?>[^"\\]++|\\.)*+"?|\'(?>[^\'\\]++|\\.)*+\'?|//[^\n]*+|/\*(?>.*?\*/|.*+)'
    r"|(?<![\w$.])(?>[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)(?![\w$.])",
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
