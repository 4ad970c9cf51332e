"""The ``loopwarden`` block: everything beyond OpenClaw, off by default.

It sits beside ``tools.loopDetection`` in the same config document, at the
top level (``loopwarden: {...}``, the fleet's defaults) and per agent
(``agents.list[].loopwarden``). OpenClaw never reads it, so a config without
it gives OpenClaw's verdicts exactly; every field's default is "off".

Per-agent overlay is section by section: an agent's ``incidents`` block is
laid key by key over the global one, like ``detectors`` in ``loopDetection``.
A section that does not validate falls back to its defaults and the problem
is reported by :func:`resolve_extensions` (``loopwarden config check`` shows
it); one bad section never disables the rest.

``profile: "openclaw-latest"`` swaps OpenClaw's docs revision for the newest
OpenClaw release's detector (RULES.md §14): fixed thresholds, ``argument_churn``,
escalating blocked retries, bounded recovery on the runner's side. An agent's
``profile: null`` opts it out. ``writeChurn: true`` adds, under the profile, the
write-mutation kind of ``argument_churn`` that upstream has and the release
does not.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

DETECTOR_NAMES = (
    "generic_repeat",
    "known_poll_no_progress",
    "ping_pong",
    "unknown_tool_repeat",
    "global_circuit_breaker",
    "compaction_loop_persisted",
    "fleet_incident",
    "cross_run_repeat",
    "argument_churn",
)


class Incidents(msgspec.Struct, frozen=True, kw_only=True, rename="camel", forbid_unknown_fields=True):
    """Failure-signature incidents across runs (many runs failing the same way at once)."""

    enabled: bool = False
    min_streak: int = 3  # records of a run with the same tool and outcome hash
    min_runs: int = 5  # distinct runs joined within `window`
    min_agents: int = 2  # of at least this many agents
    window: float = 600.0  # seconds
    block: bool = False  # fleet response: block matching calls while an incident is open
    block_after: int = 3  # matching outcomes in a run before the block
    samples: bool = False  # publish 256 characters of the outcome text in incidents (raw tool output: may hold secrets)


class CrossRun(msgspec.Struct, frozen=True, kw_only=True, rename="camel", forbid_unknown_fields=True):
    """``cross_run_repeat``: a session's finished runs repeating the same work."""

    enabled: bool = False
    runs: int = 3
    session_ttl: float = 604_800.0  # seconds a session with no finished run is kept (its fingerprints forgotten)


FingerprintMode = Literal["normalized", "exact"]


class Fleet(msgspec.Struct, frozen=True, kw_only=True, rename="camel", forbid_unknown_fields=True):
    """How the fleet side (incidents, ``cross_run_repeat``) tells two outcomes are one failure.

    ``normalized``: by the failure fingerprint (``loopwarden.fleet.fingerprint``: paths, ids,
    timestamps, durations, pids, ephemeral ports and counters taken out), so agents in their own
    workspaces share an incident; ``exact``: by OpenClaw's outcome hash, as before the fingerprint.
    Per-run rules always use the exact hash."""

    fingerprint: FingerprintMode = "normalized"


class Escalation(msgspec.Struct, frozen=True, kw_only=True, rename="camel", forbid_unknown_fields=True):
    """Abort a run that ignores its verdicts (0 = off)."""

    after_violations: int = 0  # abort after this many verdict violations in a run
    after_blocks: int = 0  # abort after this many blocks in a run (OpenClaw's "bounded recovery" is 2)


PROFILE_LATEST = "openclaw-latest"
LATEST_RELEASE = "openclaw@2026.9.6"  # the OpenClaw release the profile follows (RULES.md §14)
PROFILES = (PROFILE_LATEST,)
# What the openclaw-latest profile uses instead of these loopDetection knobs, whatever they
# say (its detector reads only `enabled`); every `detectors.*` switch is on.
LATEST_FIXED = {
    "historySize": 30,
    "warningThreshold": 10,
    "criticalThreshold": 20,
    "unknownToolThreshold": 10,
    "globalCircuitBreakerThreshold": 30,
    "postCompactionGuard.windowSize": 3,
}


class Extensions(msgspec.Struct, frozen=True, kw_only=True, rename="camel", forbid_unknown_fields=True):
    """The resolved ``loopwarden`` settings of one agent."""

    shadow: bool | tuple[str, ...] = False  # true: every detector; a list: those detectors only
    # "openclaw-latest": OpenClaw's newest detector revision instead of the docs revision
    # (loopwarden.detection.latest); None (or null per agent): the docs revision.
    profile: str | None = None
    # Under the profile only: upstream's write-mutation churn (RULES.md L5.3), not in the release.
    write_churn: bool = False
    incidents: Incidents = Incidents()
    cross_run: CrossRun = CrossRun()
    escalation: Escalation = Escalation()
    fleet: Fleet = Fleet()

    def shadowed(self, detector: str) -> bool:
        """Whether a detection of ``detector`` is recorded but not enforced."""
        shadow = self.shadow
        return shadow if isinstance(shadow, bool) else detector in shadow


DEFAULT_EXTENSIONS = Extensions()

OBSERVED_ORIGINS = frozenset({"otel"})
"""Event origins (``origin`` of an event) whose runs loopwarden only watches: every detection of
theirs is shadowed, whatever ``loopwarden.shadow`` says. A run seen through its OpenTelemetry spans
(``loopwarden spans``) has already made its calls, and no runner listens for its verdicts."""


def observed(ext: Extensions) -> Extensions:
    """``ext`` with every detector shadowed: the settings of a run seen only from outside."""
    return ext if ext.shadow is True else msgspec.structs.replace(ext, shadow=True)


_SECTIONS = {"incidents": Incidents, "crossRun": CrossRun, "escalation": Escalation, "fleet": Fleet}


def overlay_extensions(global_block: Any, agent_block: Any) -> dict:
    """The agent's block over the global one, each section merged key by key."""
    g = global_block if isinstance(global_block, dict) else {}
    a = agent_block if isinstance(agent_block, dict) else {}
    merged = {**g, **a}
    for key in _SECTIONS:
        gs, as_ = g.get(key), a.get(key)
        if isinstance(gs, dict) or isinstance(as_, dict):
            merged[key] = {**(gs if isinstance(gs, dict) else {}), **(as_ if isinstance(as_, dict) else {})}
    return merged


def resolve_extensions(block: Any) -> tuple[Extensions, list[str]]:
    """Validate an (overlaid) ``loopwarden`` block: the settings, and one problem text per bad part."""
    if block is None:
        return DEFAULT_EXTENSIONS, []
    if not isinstance(block, dict):
        return DEFAULT_EXTENSIONS, [f"loopwarden must be an object, not {type(block).__name__}: ignored"]
    problems: list[str] = []
    fields: dict[str, Any] = {}
    for key, value in block.items():
        if key in _SECTIONS:
            try:
                fields[key] = msgspec.convert(value if value is not None else {}, _SECTIONS[key])
            except msgspec.ValidationError as exc:
                problems.append(f"loopwarden.{key}: {exc}: section uses its defaults")
        elif key == "profile":
            if value is None or value in PROFILES:
                fields["profile"] = value
            else:
                problems.append(f"loopwarden.profile must be one of {', '.join(PROFILES)} or null: {value!r} ignored")
        elif key == "writeChurn":
            if isinstance(value, bool):
                fields["writeChurn"] = value
            else:
                problems.append(f"loopwarden.writeChurn must be true or false: {value!r} ignored")
        elif key == "shadow":
            if isinstance(value, bool):
                fields["shadow"] = value
            elif isinstance(value, list) and all(v in DETECTOR_NAMES for v in value):
                fields["shadow"] = tuple(value)
            else:
                problems.append(
                    f"loopwarden.shadow must be true/false or a list of {', '.join(DETECTOR_NAMES)}: {value!r} ignored"
                )
        else:
            problems.append(f"loopwarden.{key}: unknown key ignored")
    return msgspec.convert(fields, Extensions), problems
