"""``loopwarden config check``: what a config really means, and what in it was ignored.

OpenClaw never rejects a config: an invalid number silently becomes the
default, a critical threshold not above the warning one is silently raised,
a misspelled key is silently ignored. That is right for the runtime and
wrong for a person rolling a config out. This module explains the
resolution of :mod:`loopwarden.schemas.config` without changing it: per block the
effective settings, one :class:`Note` per value that was replaced (and why),
and warnings for unknown keys (with a "did you mean" from :mod:`difflib`)
and for ``loopwarden`` extension problems (:func:`resolve_extensions`).

Everything is a pure function of the parsed document; ``replay``, the
worker and the live config feed log the same warnings this returns.
"""

from __future__ import annotations

import difflib
import math
from pathlib import Path
from typing import Any

import msgspec

from loopwarden.schemas.config import (
    DEFAULT_CRITICAL_THRESHOLD,
    DEFAULT_GLOBAL_THRESHOLD,
    DEFAULT_GUARD_WINDOW,
    DEFAULT_HISTORY_SIZE,
    DEFAULT_UNKNOWN_TOOL_THRESHOLD,
    DEFAULT_WARNING_THRESHOLD,
    KNOB_CAPS,
    ConfigError,
    FleetConfig,
    ResolvedConfig,
    _positive_int,
    _truthy,
    overlay,
    read_config_document,
    resolve_block,
)
from loopwarden.schemas.extensions import LATEST_FIXED, PROFILE_LATEST, Extensions, resolve_extensions

LOOP_DETECTION_KEYS = (
    "enabled",
    "historySize",
    "warningThreshold",
    "criticalThreshold",
    "unknownToolThreshold",
    "globalCircuitBreakerThreshold",
    "detectors",
    "postCompactionGuard",
)
DETECTOR_KEYS = ("genericRepeat", "knownPollNoProgress", "pingPong")
GUARD_KEYS = ("windowSize",)
# The extension block's key sets, straight from its Structs (camelCase on the wire).
EXTENSION_SECTIONS = {
    f.encode_name: f.type
    for f in msgspec.structs.fields(Extensions)
    if isinstance(f.type, type) and issubclass(f.type, msgspec.Struct)
}
EXTENSION_KEYS = tuple(f.encode_name for f in msgspec.structs.fields(Extensions))

_NUMERIC = (  # (key, ResolvedConfig field, default); the order of §1.4
    ("historySize", "history_size", DEFAULT_HISTORY_SIZE),
    ("warningThreshold", "warning_threshold", DEFAULT_WARNING_THRESHOLD),
    ("criticalThreshold", "critical_threshold", DEFAULT_CRITICAL_THRESHOLD),
    ("unknownToolThreshold", "unknown_tool_threshold", DEFAULT_UNKNOWN_TOOL_THRESHOLD),
    ("globalCircuitBreakerThreshold", "global_circuit_breaker_threshold", DEFAULT_GLOBAL_THRESHOLD),
)
_SWITCHES = (
    ("genericRepeat", "generic_repeat"),
    ("knownPollNoProgress", "known_poll_no_progress"),
    ("pingPong", "ping_pong"),
)
BUCKET = 10  # warnings are published when a count reaches 10, 20, 30 ... (fixed, not a setting)


class Note(msgspec.Struct, frozen=True, kw_only=True):
    """One value of a block that is not what the file says (or that is easy to misread)."""

    key: str  # "criticalThreshold", "detectors.pingPong", "postCompactionGuard.windowSize"
    value: Any  # the effective value
    text: str  # why, in words
    source: str | None = None  # for an agent: "agent" or "global" (where the given value came from)


class BlockReport(msgspec.Struct, frozen=True, kw_only=True):
    """The effective settings of the global block or of one agent."""

    scope: str  # "global" or "agent"
    agent_id: str | None = None  # normalized, as events are matched
    effective: ResolvedConfig
    notes: list[Note] = []
    extensions: Extensions | None = None  # only when a `loopwarden` block is present


class ConfigReport(msgspec.Struct, frozen=True, kw_only=True):
    source: str | None = None
    blocks: list[BlockReport] = []
    warnings: list[str] = []
    errors: list[str] = []

    @property
    def ok(self) -> bool:
        return not self.errors


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
        text = msgspec.json.encode(value).decode()
        return text if len(text) <= 40 else text[:37] + "..."
    return repr(value)


def suggest(key: str, known: tuple[str, ...] | list[str]) -> str:
    """`` (did you mean X?)`` for a near miss (case-insensitive), else empty."""
    lower = {k.lower(): k for k in known}
    if key.lower() in lower:
        return f" (did you mean {lower[key.lower()]}?)"
    match = difflib.get_close_matches(key.lower(), list(lower), n=1, cutoff=0.7)
    return f" (did you mean {lower[match[0]]}?)" if match else ""


def _near(key: str, name: str) -> bool:
    """``key`` looks like a misspelling of ``name`` (but is not ``name``)."""
    return key != name and (
        key.lower() == name.lower() or difflib.SequenceMatcher(None, key.lower(), name.lower()).ratio() >= 0.8
    )


def _unknown(block: Any, known: tuple[str, ...], where: str) -> list[str]:
    if not isinstance(block, dict):
        return []
    return [f"{where}.{k}: unknown key, ignored{suggest(k, known)}" for k in block if k not in known]


def block_warnings(block: Any, where: str) -> list[str]:
    """Warnings for one ``loopDetection`` block as written: its shape and unknown keys."""
    if block is None:
        return []
    if not isinstance(block, dict):
        return [f"{where} must be an object, not {show(block)}: ignored (defaults apply)"]
    out = _unknown(block, LOOP_DETECTION_KEYS, where)
    for key, known in (("detectors", DETECTOR_KEYS), ("postCompactionGuard", GUARD_KEYS)):
        out += _unknown(block.get(key), known, f"{where}.{key}")
    return out


def extension_warnings(block: Any, prefix: str = "") -> list[str]:
    """:func:`resolve_extensions`' problems for one ``loopwarden`` block, with suggestions for unknown keys."""
    if block is None:
        return []
    hints: dict[str, str] = {}
    if isinstance(block, dict):
        hints = {f"loopwarden.{k}": suggest(k, EXTENSION_KEYS) for k in block if k not in EXTENSION_KEYS}
        for section, struct in EXTENSION_SECTIONS.items():
            value = block.get(section)
            if isinstance(value, dict):
                fields = tuple(f.encode_name for f in msgspec.structs.fields(struct))
                hints[f"loopwarden.{section}"] = "".join(suggest(k, fields) for k in value if k not in fields)
    return [f"{prefix}{p}{hints.get(p.split(':', 1)[0], '')}" for p in resolve_extensions(block)[1]]


def tools_warnings(tools: Any, where: str) -> list[str]:
    """Only near misses of ``loopDetection`` (``tools`` holds many other OpenClaw settings)."""
    if not isinstance(tools, dict):
        return []
    return [
        f"{where}.{k}: unknown key, ignored (did you mean loopDetection?)" for k in tools if _near(k, "loopDetection")
    ]


def record_warnings(block: Any, ext: Any, key: str) -> list[str]:
    """Warnings for one live config record (its ``loopDetection`` block and ``loopwarden`` block)."""
    where = f"record {key!r}: loopDetection"
    return block_warnings(block, where) + cap_warnings(block, where) + extension_warnings(ext, f"record {key!r}: ")


def cap_warnings(block: Any, where: str) -> list[str]:
    """A line per number above its cap (``KNOB_CAPS``), as the resolved config clamps it."""
    if not isinstance(block, dict):
        return []
    guard = block.get("postCompactionGuard")
    found = [(k, block.get(k)) for k in KNOB_CAPS if k != "windowSize"]
    found.append(("postCompactionGuard.windowSize", guard.get("windowSize") if isinstance(guard, dict) else None))
    out = []
    for key, raw in found:
        cap = KNOB_CAPS[key.rsplit(".", 1)[-1]]
        if _positive_int(raw, 0) > cap:
            out.append(f"{where}.{key} {show(raw)} is above the cap {cap}: {cap}")
    return out


def explain_block(block: Any, agent_block: Any = None) -> tuple[ResolvedConfig, list[Note]]:
    """The effective settings of an (overlaid) block and a note per value replaced.

    ``agent_block`` (the agent's own block before overlay) only labels each
    note with where its value came from. Equal to :func:`resolve_block` by
    construction of the same rules, and checked against it in the tests.
    """
    if not isinstance(block, dict):
        block = {}
    notes: list[Note] = []
    agent = agent_block if isinstance(agent_block, dict) else None

    def origin(key: str, nested: str | None = None) -> str | None:
        if agent_block is None:
            return None
        if nested is None:
            return "agent" if agent is not None and key in agent else "global"
        inner = agent.get(nested) if agent is not None else None
        return "agent" if isinstance(inner, dict) and key in inner else "global"

    def note(key: str, value: Any, text: str, source: str | None) -> None:
        notes.append(Note(key=key, value=value, text=text, source=source))

    values: dict[str, Any] = {}
    for key, field, default in _NUMERIC:
        raw = block.get(key, msgspec.UNSET)
        value = default if raw is msgspec.UNSET else _positive_int(raw, default, key)
        values[field] = value
        if raw is not msgspec.UNSET and not (value == raw and not isinstance(raw, bool)):
            if _positive_int(raw, default) != value:  # above its cap
                note(key, value, f"{key} {show(raw)} is above the cap {value}: {value}", origin(key))
            else:
                why = "null" if raw is None else f"{show(raw)} is not a positive integer"
                note(key, value, f"{key} {why}: default {default}", origin(key))
    warning, critical = values["warning_threshold"], values["critical_threshold"]
    if critical <= warning:
        values["critical_threshold"] = warning + 1
        note(
            "criticalThreshold",
            warning + 1,
            f"criticalThreshold {critical} ≤ warningThreshold {warning}: raised to {warning + 1}",
            origin("criticalThreshold"),
        )
    critical, global_ = values["critical_threshold"], values["global_circuit_breaker_threshold"]
    if global_ <= critical:
        values["global_circuit_breaker_threshold"] = critical + 1
        note(
            "globalCircuitBreakerThreshold",
            critical + 1,
            f"globalCircuitBreakerThreshold {global_} ≤ criticalThreshold {critical}: raised to {critical + 1}",
            origin("globalCircuitBreakerThreshold"),
        )

    enabled = block.get("enabled", msgspec.UNSET)
    on = enabled is not msgspec.UNSET and _truthy(enabled)
    if enabled is msgspec.UNSET or enabled is None:
        note(
            "enabled",
            False,
            f"enabled {'not set' if enabled is msgspec.UNSET else 'null'}: the rolling detectors"
            " are off (calls are still recorded and the post-compaction guard is on)",
            origin("enabled"),
        )
    elif not isinstance(enabled, bool):
        extra = (
            ""
            if on
            else " (calls are still recorded and the post-compaction guard is on: only exactly false turns those off)"
        )
        note("enabled", on, f"enabled {show(enabled)} is not a boolean: counts as {show(on)}{extra}", origin("enabled"))
    if on and values["warning_threshold"] < BUCKET:
        note(
            "warningThreshold",
            values["warning_threshold"],
            f"warningThreshold {values['warning_threshold']} < {BUCKET}: warnings are published only when a count "
            f"reaches {BUCKET}, {2 * BUCKET}, ..., so counts below {BUCKET} warn nobody",
            origin("warningThreshold"),
        )

    detectors = block.get("detectors")
    if detectors is not None and not isinstance(detectors, dict):
        note("detectors", True, f"detectors {show(detectors)} is not an object: every detector on", origin("detectors"))
    detectors = detectors if isinstance(detectors, dict) else {}
    for key, field in _SWITCHES:
        raw = detectors.get(key, msgspec.UNSET)
        values[field] = True if raw is msgspec.UNSET or raw is None else _truthy(raw)
        if raw is None or (raw is not msgspec.UNSET and not isinstance(raw, bool)):
            why = (
                "null: default true"
                if raw is None
                else f"{show(raw)} is not a boolean: counts as {show(values[field])}"
            )
            note(f"detectors.{key}", values[field], f"detectors.{key} {why}", origin(key, "detectors"))

    guard = block.get("postCompactionGuard")
    if guard is not None and not isinstance(guard, dict):
        note(
            "postCompactionGuard",
            DEFAULT_GUARD_WINDOW,
            f"postCompactionGuard {show(guard)} is not an object: windowSize {DEFAULT_GUARD_WINDOW}",
            origin("postCompactionGuard"),
        )
    guard = guard if isinstance(guard, dict) else {}
    raw = guard.get("windowSize", msgspec.UNSET)
    window = DEFAULT_GUARD_WINDOW if raw is msgspec.UNSET else _positive_int(raw, DEFAULT_GUARD_WINDOW, "windowSize")
    values["guard_window"] = window
    if raw is not msgspec.UNSET and _positive_int(raw, DEFAULT_GUARD_WINDOW) != window:  # above its cap
        note(
            "postCompactionGuard.windowSize",
            window,
            f"postCompactionGuard.windowSize {show(raw)} is above the cap {window}: {window}",
            origin("windowSize", "postCompactionGuard"),
        )
    elif raw is not msgspec.UNSET and not (window == raw and not isinstance(raw, bool)):
        why = "null" if raw is None else f"{show(raw)} is not a positive integer"
        note(
            "postCompactionGuard.windowSize",
            values["guard_window"],
            f"postCompactionGuard.windowSize {why}: default {DEFAULT_GUARD_WINDOW}",
            origin("windowSize", "postCompactionGuard"),
        )
    effective = ResolvedConfig(
        enabled=on, record_calls=enabled is not False, guard_enabled=enabled is not False, **values
    )
    return effective, notes


def check_document(doc: Any, source: str | None = None) -> ConfigReport:
    """Check a parsed OpenClaw-shaped config document (see the module docstring)."""
    if doc is None:
        return ConfigReport(source=source, warnings=["the config is empty: defaults apply"])
    if not isinstance(doc, dict):
        return ConfigReport(source=source, errors=[f"the config must be an object, not {show(doc)}"])
    fleet = FleetConfig.from_document(doc)
    warnings: list[str] = []
    warnings += [
        f"{k}: unknown top-level key, ignored (did you mean loopwarden?)" for k in doc if _near(k, "loopwarden")
    ]
    warnings += [
        f"{k}: unknown top-level key, ignored (did you mean tools.loopDetection?)"
        for k in doc
        if _near(k, "loopDetection")
    ]
    tools = doc.get("tools")
    warnings += tools_warnings(tools, "tools")
    global_block = tools.get("loopDetection") if isinstance(tools, dict) else None
    warnings += block_warnings(global_block, "tools.loopDetection")
    warnings += extension_warnings(doc.get("loopwarden"))
    any_ext = doc.get("loopwarden") is not None

    agents = doc.get("agents")
    entries = agents.get("list") if isinstance(agents, dict) else None
    if agents is not None and not isinstance(agents, dict):
        warnings.append(f"agents must be an object, not {show(agents)}: ignored")
    elif entries is not None and not isinstance(entries, list):
        warnings.append(f"agents.list must be an array, not {show(entries)}: ignored")
    for i, entry in enumerate(entries if isinstance(entries, list) else ()):
        where = f"agents.list[{i}]"
        if not isinstance(entry, dict):
            warnings.append(f"{where} must be an object, not {show(entry)}: ignored")
            continue
        if isinstance(entry.get("id"), str):
            where += f" ({entry['id']})"
        warnings += [
            f"{where}.{k}: unknown key, ignored (did you mean loopwarden?)" for k in entry if _near(k, "loopwarden")
        ]
        etools = entry.get("tools")
        warnings += tools_warnings(etools, f"{where}.tools")
        warnings += block_warnings(
            etools.get("loopDetection") if isinstance(etools, dict) else None, f"{where}.tools.loopDetection"
        )
        warnings += extension_warnings(entry.get("loopwarden"), f"{where}: ")
        any_ext = any_ext or entry.get("loopwarden") is not None

    def ext_of(agent: str | None) -> Extensions | None:
        if not any_ext:
            return None
        return fleet.extensions(agent) if agent is not None else resolve_extensions(fleet.global_ext)[0]

    effective, notes = explain_block(fleet.global_block)
    ext = ext_of(None)
    effective, notes = with_profile(fleet.global_block, effective, notes, ext)
    blocks = [BlockReport(scope="global", effective=effective, notes=notes, extensions=ext)]
    for agent, own in fleet.agent_blocks.items():
        block = overlay(fleet.global_block, own)
        effective, notes = explain_block(block, own)
        ext = ext_of(agent)
        effective, notes = with_profile(block, effective, notes, ext)
        blocks.append(BlockReport(scope="agent", agent_id=agent, effective=effective, notes=notes, extensions=ext))
    return ConfigReport(source=source, blocks=blocks, warnings=warnings)


def with_profile(
    block: Any, effective: ResolvedConfig, notes: list[Note], ext: Extensions | None
) -> tuple[ResolvedConfig, list[Note]]:
    """Under ``loopwarden.profile: openclaw-latest`` the engine uses fixed values: the effective settings
    show them, and a note names each knob of the block that the profile ignores."""
    if ext is None or ext.profile != PROFILE_LATEST:
        return effective, notes
    block = block if isinstance(block, dict) else {}
    guard = block.get("postCompactionGuard")
    given = {k for k in block if k in LATEST_FIXED or k == "detectors"}
    if isinstance(guard, dict) and "windowSize" in guard:
        given.add("postCompactionGuard.windowSize")
    kept = [n for n in notes if n.key.split(".")[0] not in given and n.key not in given]
    for key in (*LATEST_FIXED, "detectors"):
        if key in given:
            value = LATEST_FIXED.get(key, "every detector on")
            kept.append(Note(key=key, value=value, text=f"{key} is ignored by profile {PROFILE_LATEST}: {value}"))
    fixed = msgspec.structs.replace(
        effective,
        history_size=LATEST_FIXED["historySize"],
        warning_threshold=LATEST_FIXED["warningThreshold"],
        critical_threshold=LATEST_FIXED["criticalThreshold"],
        unknown_tool_threshold=LATEST_FIXED["unknownToolThreshold"],
        global_circuit_breaker_threshold=LATEST_FIXED["globalCircuitBreakerThreshold"],
        generic_repeat=True,
        known_poll_no_progress=True,
        ping_pong=True,
        guard_window=LATEST_FIXED["postCompactionGuard.windowSize"],
    )
    return fixed, kept


def check_file(path: str | Path) -> tuple[FleetConfig | None, ConfigReport]:
    """Read, parse and check a config file: the fleet config (``None`` on errors) and the report."""
    try:
        doc = read_config_document(path)
    except ConfigError as exc:
        return None, ConfigReport(source=str(path), errors=[str(exc)])
    report = check_document(doc, str(path))
    if not report.ok:
        return None, report
    return FleetConfig.from_document(doc), report


# ------------------------------------------------------------------ text


def detection_off_notice(fleet: FleetConfig) -> str | None:
    """The one sentence every command says when the rolling detectors are off for agents by default.

    OpenClaw runs them only when ``enabled`` is truthy, and a missing ``enabled`` counts as
    false: a config (or none) without it detects nothing but the post-compaction guard. That
    default is kept, verdicts unchanged; ``replay``, ``tune``, the worker and ``up`` say it
    instead of staying silent. None when the global block turns them on.
    """
    if resolve_block(fleet.global_block).enabled:
        return None
    on = sorted(agent for agent in fleet.agent_blocks if fleet.resolve(agent).enabled)
    only = f" (on only for the listed agents {', '.join(on[:5])}{', ...' if len(on) > 5 else ''})" if on else ""
    return (
        f"loop detection is off{only}: tools.loopDetection.enabled is not true (OpenClaw's default), "
        "so repeated calls are neither warned nor blocked; only the post-compaction guard runs. "
        "Set tools.loopDetection.enabled: true in the config to turn the detectors on."
    )


def _onoff(value: bool) -> str:
    return "on" if value else "off"


def settings_lines(c: ResolvedConfig) -> list[str]:
    """The effective settings in OpenClaw's key names, three short lines."""
    state = (
        "on"
        if c.enabled
        else ("off (calls recorded, guard on)" if c.record_calls else "off (nothing recorded, guard off)")
    )
    return [
        f"enabled {state}  historySize {c.history_size}  unknownToolThreshold {c.unknown_tool_threshold}",
        f"warningThreshold {c.warning_threshold}  criticalThreshold {c.critical_threshold}  "
        f"globalCircuitBreakerThreshold {c.global_circuit_breaker_threshold}",
        f"detectors genericRepeat {_onoff(c.generic_repeat)}  knownPollNoProgress {_onoff(c.known_poll_no_progress)}"
        f"  pingPong {_onoff(c.ping_pong)}  postCompactionGuard.windowSize {c.guard_window}",
    ]


def extensions_summary(ext: Extensions) -> str:
    """The ``loopwarden`` settings that differ from the defaults (all off), as compact JSON."""
    default, changed = Extensions(), {}
    for f in msgspec.structs.fields(Extensions):
        value, base = getattr(ext, f.name), getattr(default, f.name)
        if value == base:
            continue
        if isinstance(value, msgspec.Struct):
            value = {
                g.encode_name: getattr(value, g.name)
                for g in msgspec.structs.fields(value)
                if getattr(value, g.name) != getattr(base, g.name)
            }
        changed[f.encode_name] = value
    return msgspec.json.encode(changed).decode() if changed else "all off (defaults)"


def format_report(report: ConfigReport) -> str:
    """The report as text for a terminal: errors, warnings, then each block."""
    lines = [f"config {report.source}" if report.source else "config"]
    lines += [f"error: {e}" for e in report.errors]
    lines += [f"warning: {w}" for w in report.warnings]
    for block in report.blocks:
        title = (
            "global (tools.loopDetection; agents not listed below)"
            if block.scope == "global"
            else f"agent {block.agent_id} (global block overlaid with its own)"
        )
        lines += ["", title]
        lines += [f"  {s}" for s in settings_lines(block.effective)]
        if block.extensions is not None:
            lines.append(f"  loopwarden {extensions_summary(block.extensions)}")
        for n in block.notes:
            lines.append(f"  note: {n.text}" + (" (from the global block)" if n.source == "global" else ""))
    errors, warnings = len(report.errors), len(report.warnings)
    lines += ["", f"{errors} error{'s' * (errors != 1)}, {warnings} warning{'s' * (warnings != 1)}"]
    return "\n".join(lines)
