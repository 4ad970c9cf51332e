"""Runner-side client of loopwarden (aiokafka only, no Faust).

``LoopClient`` publishes a run's events and gates its tool calls;
``blocked_tool_result`` builds the veto a runner returns to the model.
"""

from loopwarden.runner.client import LoopClient
from loopwarden.runner.results import blocked_tool_result, is_blocked_result
from loopwarden.runner.routing import VerdictStream
from loopwarden.runner.run import Run
from loopwarden.runner.settings import ClientSettings
from loopwarden.runner.state import ClientStats, Decision, RunState
from loopwarden.runner.wire import RunRef

__all__ = [
    "ClientSettings",
    "ClientStats",
    "Decision",
    "LoopClient",
    "Run",
    "RunRef",
    "RunState",
    "VerdictStream",
    "blocked_tool_result",
    "is_blocked_result",
]
