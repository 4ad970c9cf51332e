"""Synthetic agent fleets: healthy runs plus one script per loop kind.

Shared by ``loopwarden simulate`` (live load), the benchmarks and tests, so
every consumer exercises the same realistic shapes: params with paths and
numbers, results with text content and ``details``, interleaved runs.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

LOOP_KINDS = ("generic_repeat", "known_poll", "ping_pong", "unknown_tool", "compaction_loop")
# The global circuit breaker fires only where no detector-specific critical comes first (its threshold
# is always above criticalThreshold): here a stuck known poll on an agent whose config turns
# knownPollNoProgress off. So that run needs its own agent; see fleet_events(breaker_agent=...).
GLOBAL_BREAKER = "global_breaker"

_WORDS = (
    "alpha beta gamma delta request response config workspace module build test passed failed "
    "error warning timeout retry cache index query result value object string number list map "
    "function class import export return async await promise stream table topic partition offset"
).split()


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words))


def _result(text: str, **details) -> dict:
    return {"content": [{"type": "text", "text": text}], "details": details}


# Prices per token of the simulated model (input, output), for usage.cost.
_PRICE = (3e-6, 15e-6)


def _usage(rng: random.Random, n: int) -> dict:
    """What the model spent producing call ``n`` of a run: the context grows as the run goes on."""
    inp = 1200 + 350 * n + rng.randrange(0, 400)
    out = rng.randrange(30, 400)
    return {"input_tokens": inp, "output_tokens": out, "cost": round(inp * _PRICE[0] + out * _PRICE[1], 6)}


class RunScript:
    """The events of one run, in order: (tool_call, tool_result) pairs and extras."""

    def __init__(
        self,
        agent: str,
        session: str,
        run: str,
        kind: str,
        rng: random.Random,
        length: int,
        usage: random.Random | None = None,
    ):
        self.base = {"agent_id": agent, "session_id": session, "run_id": run}
        self.kind = kind
        self.rng = rng
        self.usage = usage  # its own generator: with or without usage, the events are otherwise the same
        self.length = length
        self.n = 0

    def _pair(self, tool: str, params: dict, result: dict | None = None, error: str | None = None) -> list[dict]:
        self.n += 1
        call_id = f"{self.base['run_id']}-c{self.n}"
        call = {"type": "tool_call", **self.base, "tool_name": tool, "tool_call_id": call_id, "params": params}
        if self.usage is not None:
            call["usage"] = _usage(self.usage, self.n)
        done = {"type": "tool_result", **self.base, "tool_name": tool, "tool_call_id": call_id, "params": params}
        if error is not None:
            done["error"] = error
        else:
            done["result"] = result
        return [call, done]

    def _healthy(self, i: int) -> list[dict]:
        rng = self.rng
        choice = rng.randrange(4)
        if choice == 0:
            path = f"/workspace/src/{rng.choice(_WORDS)}/{rng.choice(_WORDS)}_{i}.py"
            return self._pair(
                "read", {"path": path, "offset": rng.randrange(0, 400), "limit": 200},
                _result(_text(rng, rng.randrange(40, 300)), path=path, lines=rng.randrange(10, 900)),
            )  # fmt: skip
        if choice == 1:
            cmd = f"pytest tests/test_{rng.choice(_WORDS)}.py -k {rng.choice(_WORDS)} -q"
            return self._pair(
                "exec", {"command": cmd, "timeout": 120},
                _result("", status="completed", exitCode=rng.choice((0, 0, 1)), durationMs=rng.randrange(50, 9000),
                        aggregated=_text(rng, rng.randrange(20, 120)), pid=rng.randrange(1000, 60000)),
            )  # fmt: skip
        if choice == 2:
            query = " ".join(rng.choice(_WORDS) for _ in range(3))
            return self._pair(
                "web_search", {"query": query, "count": 5},
                _result(_text(rng, rng.randrange(60, 200)), provider="search", tookMs=rng.randrange(90, 900)),
            )  # fmt: skip
        path = f"/workspace/src/{rng.choice(_WORDS)}_{i}.ts"
        return self._pair(
            "edit", {"path": path, "oldText": _text(rng, 8), "newText": _text(rng, 9)},
            _result("Successfully replaced text.", path=path, diff=_text(rng, 30)),
        )  # fmt: skip

    def _looping(self, i: int) -> list[dict]:
        kind = self.kind
        if kind == "generic_repeat":
            return self._pair(
                "read", {"path": "/workspace/data/events.ndjson", "offset": 0, "limit": 50},
                _result("no new events in /workspace/data/events.ndjson", path="/workspace/data/events.ndjson"),
            )  # fmt: skip
        if kind == "known_poll":
            return self._pair(
                "process", {"action": "poll", "sessionId": "proc-7"},
                _result("still running, no new output", status="running", exitCode=None, updatedAt=1000 + i),
            )  # fmt: skip
        if kind == "ping_pong":
            if i % 2 == 0:
                return self._pair("read", {"path": "/workspace/README.md"}, _result("# Project\nsee docs/"))
            return self._pair("list", {"path": "/workspace/docs"}, _result("docs/ is empty"))
        if kind == GLOBAL_BREAKER:
            return self._pair(
                "command_status", {"commandId": "deploy-42"}, _result("deploy-42: queued", state="queued")
            )
        if kind == "unknown_tool":
            return self._pair(
                "browser_navigate", {"url": "https://example.invalid/"}, error="Unknown tool: browser_navigate"
            )
        # compaction_loop: an overflow, a compaction retry, then the same call again and again.
        events: list[dict] = []
        if i == 3:
            events.append({"type": "compaction_retry", **self.base, "reason": "context_overflow"})
        events += self._pair(
            "exec", {"command": "cat build.log | tail -n 200"},
            _result("", status="completed", exitCode=1, aggregated="BUILD FAILED: missing module foo"),
        )  # fmt: skip
        return events

    def events(self) -> Iterator[dict]:
        for i in range(self.length):
            loop_now = self.kind != "healthy" and i >= 2
            yield from (self._looping(i) if loop_now else self._healthy(i))
        yield {"type": "run_end", **self.base}


def fleet_events(
    *,
    agents: int = 50,
    runs_per_agent: int = 4,
    loop_share: float = 0.3,
    run_length: int = 40,
    seed: int = 7,
    breaker_agent: str | None = None,
    usage: bool = False,
) -> Iterator[dict]:
    """Interleave the runs of a fleet: per-run order kept, runs mixed at random.

    ``breaker_agent`` adds one stuck-poll run of that agent (configure it with
    ``knownPollNoProgress: false``): the global circuit breaker's scenario.
    ``usage``: tool calls carry ``usage`` (tokens and cost), drawn from a
    generator of their own, so the same seed gives the same events otherwise.
    """
    rng = random.Random(seed)
    scripts = []
    for a in range(agents):
        agent = f"agent-{a:04d}"
        session = f"agent:{agent}:main"
        for r in range(runs_per_agent):
            kind = rng.choice(LOOP_KINDS) if rng.random() < loop_share else "healthy"
            run = f"{agent}-run{r}"
            scripts.append(
                RunScript(
                    agent,
                    session,
                    run,
                    kind,
                    random.Random(rng.random()),
                    run_length,
                    random.Random(f"{seed}:{run}") if usage else None,
                )
            )
    if breaker_agent is not None:
        run = f"{breaker_agent}-run0"
        scripts.append(
            RunScript(
                breaker_agent,
                f"agent:{breaker_agent}:main",
                run,
                GLOBAL_BREAKER,
                random.Random(seed),
                run_length,
                random.Random(f"{seed}:{run}") if usage else None,
            )
        )
    live = [s.events() for s in scripts]
    while live:
        i = rng.randrange(len(live))
        try:
            yield next(live[i])
        except StopIteration:
            live[i] = live[-1]
            live.pop()


def outage_events(
    *,
    agents: int = 12,
    runs_per_agent: int = 2,
    run_length: int = 8,
    tool: str = "web_search",
    error: str = "503 Service Unavailable: search backend unreachable",
    seed: int = 11,
    prefix: str = "outage",
) -> Iterator[dict]:
    """Many agents hit one failing tool at once (a fleet incident): varied arguments, the same error."""
    rng = random.Random(seed)
    scripts = []
    for a in range(agents):
        agent = f"{prefix}-agent-{a:03d}"
        for r in range(runs_per_agent):
            run = RunScript(agent, f"agent:{agent}:main", f"{agent}-run{r}", "healthy", random.Random(rng.random()), 0)
            events: list[dict] = []
            for i in range(run_length):
                events += run._pair(tool, {"query": f"{_text(rng, 3)} {i}", "count": 5}, error=error)
            events.append({"type": "run_end", **run.base})
            scripts.append(iter(events))
    while scripts:
        i = rng.randrange(len(scripts))
        try:
            yield next(scripts[i])
        except StopIteration:
            scripts[i] = scripts[-1]
            scripts.pop()


def heartbeat_events(*, sessions: int = 3, runs: int = 4, prefix: str = "heartbeat") -> Iterator[dict]:
    """Scheduled runs of a session redoing the same useless work, run after run (``cross_run_repeat``)."""
    for s in range(sessions):
        agent = f"{prefix}-agent-{s:03d}"
        session = f"agent:{agent}:cron"
        for r in range(runs):
            run = RunScript(agent, session, f"{agent}-beat{r}", "healthy", random.Random(s), 0)
            yield from run._pair("read", {"path": "/workspace/HEARTBEAT.md"}, _result("- check the inbox"))
            yield from run._pair("message", {"action": "read", "channel": "inbox"}, _result("no new messages"))
            yield from run._pair("memory_search", {"query": "pending tasks"}, _result("nothing pending"))
            yield {"type": "run_end", **run.base}
