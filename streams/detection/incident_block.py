"""The run side's view of open incidents, and the block they imply (``incidents.block``).

It lives with the per-run rules because it is one: given the open incidents, it decides
from the run's own window alone. The fleet side that opens incidents (``loopwarden.fleet``)
sits above it.

The fleet side publishes every incident record on the incidents topic; each
worker reads that topic whole (every run partition must know every open
incident) into an :class:`IncidentBoard`. With ``block`` on for the run's
agent, a tool call whose tool has an open incident is blocked once the run's
window already holds ``blockAfter`` records of that incident's signature; the
message names the incident. A blocked call is not recorded and its result
is vetoed, as for OpenClaw's own blocks. With ``fleet_incident`` shadowed
(``loopwarden.shadow``) the block is reported with ``shadow`` set and the
call goes on as if no incident were open.
"""

from __future__ import annotations

from loopwarden.detection.engine import StepResult, step
from loopwarden.detection.state import History, RunState, expect_veto
from loopwarden.detection.tools import normalize_tool_name
from loopwarden.schemas.config import ResolvedConfig
from loopwarden.schemas.events import Event, ToolCall
from loopwarden.schemas.extensions import Extensions
from loopwarden.schemas.fleet import Incident
from loopwarden.schemas.verdicts import Detection


def matching(
    history: History,
    tool: str,
    outcome_hash: str | None,
    unknown: str | None,
    fingerprint: str | None = None,
    prints: dict[str, str] | None = None,
) -> int:
    """Records of the window that match one signature (the fleet response counts these).

    An incident of a normalized signature (no outcome hash, a ``fingerprint``) matches the records
    whose outcome's fingerprint, noted in the run's ``prints``, is that one."""
    if unknown is not None:
        return history.unknowns.count(unknown)
    if outcome_hash is None and fingerprint is not None:
        if not prints:
            return 0
        return sum(
            1
            for t, r, u in zip(history.tools, history.results, history.unknowns)
            if u is None and t == tool and r is not None and prints.get(r) == fingerprint
        )
    return sum(
        1
        for t, r, u in zip(history.tools, history.results, history.unknowns)
        if u is None and r == outcome_hash and t == tool
    )


class IncidentBoard:
    """Open incidents by tool name, fed with incident records in topic order."""

    __slots__ = ("by_tool",)

    def __init__(self) -> None:
        self.by_tool: dict[str, dict[str, Incident]] = {}

    def apply(self, record: Incident) -> None:
        tool = self.by_tool.setdefault(record.tool_name, {})
        if record.state == "resolved":
            tool.pop(record.incident_id, None)
            if not tool:
                del self.by_tool[record.tool_name]
        else:
            tool[record.incident_id] = record

    def open_incidents(self) -> list[Incident]:
        return [i for tool in self.by_tool.values() for i in tool.values()]

    def __bool__(self) -> bool:
        return bool(self.by_tool)


def fleet_block(state: RunState, event: ToolCall, board: IncidentBoard, ext: Extensions) -> Detection | None:
    """The block of a call that would feed an open incident, or None."""
    tool = normalize_tool_name(event.tool_name)
    incidents = board.by_tool.get(tool)
    if not incidents:
        return None
    need = max(1, ext.incidents.block_after)
    for inc in incidents.values():
        n = matching(state.history, tool, inc.outcome_hash, inc.unknown_tool, inc.fingerprint, state.prints)
        if n >= need:
            return Detection(
                level="critical",
                detector="fleet_incident",
                count=n,
                warning_key=f"fleet_incident:{inc.incident_id}",
                tool_name=tool,
                emitted=True,
                action="block",
                message=f"CRITICAL: fleet incident {inc.incident_id}: {inc.run_count} runs of {inc.agent_count} "
                f"agents get the same outcome from {tool}; this run has had it {n} times. "
                "Call blocked; try another approach.",
            )
    return None


def fleet_step(
    state: RunState | None, event: Event, config: ResolvedConfig, ext: Extensions, board: IncidentBoard | None
) -> StepResult:
    """``step()``, preceded by the fleet response when it is on and an incident is open."""
    if board and ext.incidents.block and isinstance(event, ToolCall) and state is not None:
        event_id = event.event_id
        if not (event_id and state.has_seen(event_id)):  # a repeat: step() reports it
            det = fleet_block(state, event, board, ext)
            if det is not None and ext.shadowed(det.detector):
                result = step(state, event, config, ext=ext)  # the run goes on as without the response
                det.shadow = True
                return result._replace(detections=(det, *result.detections))
            if det is not None:
                if event_id:
                    state.remember(event_id)
                expect_veto(state, event.tool_call_id)
                return StepResult(state, (det,))
    return step(state, event, config, ext=ext)
