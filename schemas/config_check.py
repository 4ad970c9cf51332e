"""``loopwarden config check``: what a config really means, and what in it was ignored.

OpenClaw never rejects a config: an invalid number silently becomes the
default, a critical threshold not above the warning one is silently raised,
a misspelled key is silently ignored. That is right for the runtime and
wrong for a person rolling a config out. This module explains the
resolution of :mod:`loopwarden.schemas.config` with the engine's own resolver
(``resolve_block`` asked to record its notes): per block the effective
settings, one :class:`Note` per value that was replaced (and why),
and warnings for unknown keys (with a "did you mean" from :mod:`difflib`)
and for ``loopwarden`` extension problems (:func:`resolve_extensions`).

Everything is a pure function of the parsed document; ``replay``, the
worker and the live config feed log the same warnings this returns.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from loopwarden.schemas.config import (
    KNOB_CAPS,
    ConfigError,
    FleetConfig,
    Note,
    ResolvedConfig,
    _positive_int,
    overlay,
    read_config_document,
    resolve_block,
    show,
)
from loopwarden.schemas.extensions import LATEST_FIXED, LATEST_RELEASE, PROFILE_LATEST, Extensions, resolve_extensions

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
    """The effective settings of an (overlaid) block and a note per value replaced: the engine's own
    :func:`~loopwarden.schemas.config.resolve_block`, asked to record its notes."""
    notes: list[Note] = []
    return resolve_block(block, notes, agent_block), notes


def reach_warnings(c: ResolvedConfig, where: str) -> list[str]:
    """Thresholds the window can never reach. A count covers records of the window, so it is at most
    ``historySize`` (RULES.md §7), ping-pong's at most ``historySize`` + 1: a threshold above that
    never fires, and OpenClaw says nothing about it."""
    h, out = c.history_size, []
    rolling = [
        name
        for name, on in (("genericRepeat", c.generic_repeat), ("knownPollNoProgress", c.known_poll_no_progress))
        if on
    ]
    for key, value, verb in (
        ("warningThreshold", c.warning_threshold, "warn"),
        ("criticalThreshold", c.critical_threshold, "block"),
    ):
        never = rolling if value > h else []
        never += ["pingPong"] if c.ping_pong and value > h + 1 else []
        if never:
            out.append(
                f"{where}: {key} {value} can never be reached with historySize {h}: "
                f"{' and '.join(never)} never {verb}; raise historySize to at least {value} or lower {key}"
            )
    for key, value in (
        ("globalCircuitBreakerThreshold", c.global_circuit_breaker_threshold),
        ("unknownToolThreshold", c.unknown_tool_threshold),
    ):
        if value > h:
            out.append(
                f"{where}: {key} {value} can never be reached with historySize {h}; "
                f"raise historySize to at least {value} or lower {key}"
            )
    return out


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
    warnings += reach_warnings(effective, "tools.loopDetection")
    for agent, own in fleet.agent_blocks.items():
        block = overlay(fleet.global_block, own)
        effective, notes = explain_block(block, own)
        ext = ext_of(agent)
        effective, notes = with_profile(block, effective, notes, ext)
        blocks.append(BlockReport(scope="agent", agent_id=agent, effective=effective, notes=notes, extensions=ext))
        warnings += reach_warnings(effective, f"agent {agent}")
    return ConfigReport(source=source, blocks=blocks, warnings=warnings)


def release_rejects(block: dict) -> list[Note]:
    """The keys of a ``tools.loopDetection`` block the OpenClaw release refuses: it accepts only a boolean
    ``enabled`` there (``openclaw config validate`` fails on anything else), and it records calls only when
    ``enabled`` is ``true``."""
    notes = []
    for key, value in block.items():
        if key == "enabled":
            if not isinstance(value, bool):
                notes.append(Note(key=key, value=value, text=f"enabled must be true or false for {LATEST_RELEASE}"))
            continue
        text = f"{key} is rejected by {LATEST_RELEASE} (it accepts only enabled under tools.loopDetection)"
        notes.append(Note(key=key, value=value, text=text))
    if block.get("enabled") is not True:
        text = f"{LATEST_RELEASE} detects and records calls only when enabled is true"
        notes.append(Note(key="enabled", value=block.get("enabled"), text=text))
    return notes


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
    kept.extend(release_rejects(block))
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


def load_checked(path: str | Path | None, say: Callable[[str], Any]) -> FleetConfig | None:
    """Read a config file the way every command and the runner do: its errors, warnings (unknown keys,
    thresholds out of reach) and the detection-off notice each handed to ``say``; ``None`` if unusable.
    ``None`` as the path: the defaults (and the notice)."""
    if path is None:
        config: FleetConfig | None = FleetConfig()
    else:
        config, report = check_file(path)
        for text in report.errors:
            say(text)
        for text in report.warnings:
            say(f"config warning: {text}")
    notice = detection_off_notice(config) if config is not None else None
    if notice:
        say(notice)
    return config


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
