"""``loopwarden bench adapters``: the latency each framework adapter adds to one gated tool call.

Two ways of deciding, each measured (``--decisions local,worker``):
``local``, the client deciding the per-run rules in-process with the
worker's config (the default of a runner that has it), and ``worker``, the
gate round trip. Then ``correction``: how long a worker's correction takes
to reach a runner that decided laxer than the worker (a runner that lost
its history, here one whose config has detection off): from the blocked
call's event ``ts`` to the verdict's delivery to the run (same host clock).

On the embedded broker with one ``loopwarden worker`` (a fresh pair per
framework), each tool call is made twice, on a fixed open-loop schedule
(10 and 100 calls/s by default): once bare (the tool's own handler, as the
framework would call it without loopwarden) and once through the adapter's
hook, exactly as the framework calls it (LangChain's ``awrap_tool_call``;
the OpenAI Agents SDK's tool input guardrail, the tool, its output guardrail;
PydanticAI's ``wrap_tool_execute``). The adapter's time includes the gate
round trip (``tool_call`` with ``await_decision`` -> worker -> ``allow``)
and publishing the result. Reported per framework and rate: p50/p99 of the
added time (adapter minus bare, per call), and of the adapter's own time.
The ``client`` row is the same call through :class:`~loopwarden.runner.LoopClient`
by hand (``check`` + ``tool_result``): what the adapters add on top of it is
their own overhead. No model runs: its time is the same with or without
loopwarden. A framework that is not installed is reported as skipped.

With local decisions a first level makes the calls one at a time, timed
in CPU time (what the adapter and the decision cost, without the open
loop's queueing on a shared event loop or a loaded host's scheduling).

Runs are healthy (distinct params, so every decision is ``allow``), 40
calls each, 16 in rotation; the hook objects are the frameworks' own types where
the adapter reads them (tool call requests, tool contexts, tool call parts).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any

from loopwarden import extra_hint
from loopwarden.bench.latency import CONFIG, _stack_parts
from loopwarden.bench.stats import percentile

RUN_LENGTH = 40
RUNS = 16
FRAMEWORKS = ("client", "langchain", "openai_agents", "pydantic_ai")
MODES = ("local", "worker")
SEQUENTIAL = 1000  # calls of the sequential level (local decisions)
LAX = {"tools": {"loopDetection": {"enabled": False}}}  # a runner that decides nothing the worker would

# One tool call of a framework: (bare, through the adapter, end the run); each returns when done.
Call = Callable[[int, str], Awaitable[Any]]


def _args(n: int) -> dict:
    return {"path": f"src/file_{n}.py", "offset": n % 7}


def _text(n: int) -> str:
    return f"body {n}"


class _Harness:
    """One framework's two ways of making call ``n`` of run ``run_id``, and how a run ends."""

    def __init__(self, bare: Call, gated: Call, end: Callable[[str], Awaitable[Any]]) -> None:
        self.bare, self.gated, self.end = bare, gated, end


def _client_harness(client: Any) -> _Harness:
    async def tool(n: int) -> dict:
        return {"content": [{"type": "text", "text": _text(n)}]}

    runs: dict[str, Any] = {}

    def run(run_id: str) -> Any:
        if run_id not in runs:
            runs[run_id] = client.run("bench-client", run_id=run_id)
        return runs[run_id]

    async def bare(n: int, run_id: str) -> Any:
        return await tool(n)

    async def gated(n: int, run_id: str) -> Any:
        r = run(run_id)
        decision = await r.check("read", _args(n), tool_call_id=f"{run_id}-{n}")
        result = await tool(n)
        await r.tool_result(decision, result=result)
        return result

    async def end(run_id: str) -> None:
        r = runs.pop(run_id, None)
        if r is not None:
            await r.end()

    return _Harness(bare, gated, end)


def _langchain_harness(client: Any) -> _Harness:
    from langchain.agents.middleware import ToolCallRequest
    from langchain_core.messages import ToolMessage

    from loopwarden.runner.integrations.langchain import LoopwardenMiddleware

    middleware = LoopwardenMiddleware(client, agent_id="bench-langchain")

    def request(n: int, run_id: str) -> Any:
        runtime = SimpleNamespace(execution_info=SimpleNamespace(thread_id="bench-thread", run_id=run_id), config={})
        return ToolCallRequest(
            tool_call={"name": "read", "args": _args(n), "id": f"{run_id}-{n}", "type": "tool_call"},
            tool=None,
            state={},
            runtime=runtime,
        )

    async def handler(req: Any) -> Any:
        call = req.tool_call
        return ToolMessage(content=_text(call["args"]["offset"]), tool_call_id=call["id"], name=call["name"])

    async def bare(n: int, run_id: str) -> Any:
        return await handler(request(n, run_id))

    async def gated(n: int, run_id: str) -> Any:
        return await middleware.awrap_tool_call(request(n, run_id), handler)

    async def end(run_id: str) -> None:
        await middleware.gate.end(middleware.ref(request(0, run_id).runtime))

    return _Harness(bare, gated, end)


def _openai_agents_harness(client: Any) -> _Harness:
    from agents import Agent, RunConfig
    from agents.tool_context import ToolContext
    from agents.tool_guardrails import ToolInputGuardrailData, ToolOutputGuardrailData

    from loopwarden.runner.integrations.openai_agents import LoopwardenGuardrails

    guard = LoopwardenGuardrails(client, "bench-openai-agents")
    agent = Agent(name="bench")
    configs: dict[str, Any] = {}

    def context(n: int, run_id: str) -> Any:
        config = configs.get(run_id) or configs.setdefault(
            run_id, RunConfig(group_id="bench-group", trace_id=f"trace_{run_id}")
        )
        return ToolContext(
            context=None,
            tool_name="read",
            tool_call_id=f"{run_id}-{n}",
            tool_arguments=json.dumps(_args(n)),
            run_config=config,
        )

    async def tool(ctx: Any) -> str:
        return _text(json.loads(ctx.tool_arguments)["offset"])

    async def bare(n: int, run_id: str) -> Any:
        return await tool(context(n, run_id))

    async def gated(n: int, run_id: str) -> Any:
        ctx = context(n, run_id)
        before = await guard.input_guardrail.guardrail_function(ToolInputGuardrailData(context=ctx, agent=agent))
        if before.behavior["type"] != "allow":
            return before
        output = await tool(ctx)
        return await guard.output_guardrail.guardrail_function(
            ToolOutputGuardrailData(context=ctx, agent=agent, output=output)
        )

    async def end(run_id: str) -> None:
        await guard.end(guard.ref(context(0, run_id), agent))
        configs.pop(run_id, None)

    return _Harness(bare, gated, end)


def _pydantic_ai_harness(client: Any) -> _Harness:
    from pydantic_ai.messages import ToolCallPart

    from loopwarden.runner.integrations.pydantic_ai import LoopwardenCapability

    capability = LoopwardenCapability(client, "bench-pydantic-ai")

    def ctx(run_id: str) -> Any:
        return SimpleNamespace(agent=None, conversation_id="bench-conversation", run_id=run_id, cancel=lambda: None)

    async def handler(args: dict) -> str:
        return _text(args["offset"])

    async def bare(n: int, run_id: str) -> Any:
        return await handler(ToolCallPart("read", _args(n), f"{run_id}-{n}").args_as_dict())

    async def gated(n: int, run_id: str) -> Any:
        call = ToolCallPart("read", _args(n), f"{run_id}-{n}")
        return await capability.wrap_tool_execute(
            ctx(run_id), call=call, tool_def=None, args=call.args_as_dict(), handler=handler
        )

    async def end(run_id: str) -> None:
        await capability.gate.end(capability.ref(ctx(run_id)))

    return _Harness(bare, gated, end)


HARNESSES = {
    "client": _client_harness,
    "langchain": _langchain_harness,
    "openai_agents": _openai_agents_harness,
    "pydantic_ai": _pydantic_ai_harness,
}


def _missing(framework: str) -> str | None:
    """Why ``framework``'s adapter cannot run here (its extra is not installed), or None."""
    modules = {
        "langchain": "loopwarden.runner.integrations.langchain",
        "openai_agents": "loopwarden.runner.integrations.openai_agents",
        "pydantic_ai": "loopwarden.runner.integrations.pydantic_ai",
    }
    if framework not in modules:
        return None
    try:
        __import__(modules[framework])
    except ImportError as exc:
        return f"not installed ({exc.name or exc}); {extra_hint(framework.replace('_', '-'))}"
    return None


class _Rotation:
    """Call numbers and run ids: RUNS runs in rotation, each ended after RUN_LENGTH calls."""

    def __init__(self, harness: _Harness) -> None:
        self.harness = harness
        self.n = itertools.count()
        self.runs = [self._new() for _ in range(RUNS)]
        self.used = [0] * RUNS
        self.ending: list[asyncio.Future] = []

    @staticmethod
    def _new() -> str:
        return f"bench-{uuid.uuid4().hex[:12]}"

    def next(self) -> tuple[int, str]:
        n = next(self.n)
        slot = n % RUNS
        run_id = self.runs[slot]
        self.used[slot] += 1
        if self.used[slot] >= RUN_LENGTH:
            self.runs[slot], self.used[slot] = self._new(), 0
            self.ending.append(asyncio.ensure_future(self.harness.end(run_id)))
        return n, run_id


async def _one(
    harness: _Harness,
    n: int,
    run_id: str,
    samples: list[tuple[float, float]] | None,
    perf: Callable[[], float] = time.perf_counter,
) -> None:
    t0 = perf()
    await harness.bare(n, run_id)
    t1 = perf()
    await harness.gated(n, run_id)
    t2 = perf()
    if samples is not None:
        samples.append((t1 - t0, t2 - t1))


async def _open_loop(rotation: _Rotation, rate: float, seconds: float) -> list[tuple[float, float]]:
    """Start a call every 1/rate s whatever the latency (queueing shows in the tail)."""
    samples: list[tuple[float, float]] = []
    tasks = []
    interval = 1.0 / rate
    t0 = time.monotonic()
    for i in range(max(1, int(rate * seconds))):
        delay = t0 + i * interval - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        n, run_id = rotation.next()
        tasks.append(asyncio.ensure_future(_one(rotation.harness, n, run_id, samples)))
    await asyncio.gather(*tasks)
    return samples


async def _sequential(rotation: _Rotation, n: int) -> list[tuple[float, float]]:
    """``n`` calls one after another, timed in this thread's CPU time: a local decision never yields
    to the event loop, so that is exactly what the adapter and the decision cost, without the pauses
    a loaded host's scheduler adds to wall-clock time. The outbox runs between chunks of calls."""
    samples: list[tuple[float, float]] = []
    for i in range(n):
        call, run_id = rotation.next()
        await _one(rotation.harness, call, run_id, samples, time.thread_time)
        if i % 50 == 49:
            await asyncio.sleep(0.01)
    return samples


def _summary(samples: list[tuple[float, float]], rate: float, fail_open: int, mode: str = "worker") -> dict:
    ms = lambda xs: sorted(x * 1000 for x in xs)  # noqa: E731
    bare, gated = ms(s[0] for s in samples), ms(s[1] for s in samples)
    added = ms(s[1] - s[0] for s in samples)
    r = lambda x: round(x, 3)  # noqa: E731
    return {
        "decisions": mode,
        "rate_per_s": rate,
        "calls": len(samples),
        "added_p50_ms": r(percentile(added, 0.5)),
        "added_p99_ms": r(percentile(added, 0.99)),
        "adapter_p50_ms": r(percentile(gated, 0.5)),
        "adapter_p99_ms": r(percentile(gated, 0.99)),
        "bare_p50_ms": r(percentile(bare, 0.5)),
        "bare_p99_ms": r(percentile(bare, 0.99)),
        "fail_open": fail_open,
    }


def _options(mode: str) -> dict:
    return {"config": CONFIG} if mode == "local" else {"decisions": "worker"}


async def _corrections(clients: Any, runs: int, pace: float) -> dict:
    """Event -> correction: a runner deciding with detection off loops; the worker blocks the 20th
    identical call; the time from that call's ``ts`` to the block's delivery to the run."""
    client = await clients("bench-corrections", config=LAX)
    seconds: list[float] = []
    for _ in range(runs):
        got = asyncio.get_running_loop().create_future()

        def on_verdict(verdict: Any, got: asyncio.Future = got) -> None:
            if verdict.action == "block" and verdict.event_ts is not None and not got.done():
                got.set_result(time.time() - verdict.event_ts)

        run = client.run("bench-corrections", run_id=f"bench-{uuid.uuid4().hex[:12]}", on_verdict=on_verdict)
        for _ in range(25):
            if got.done():
                break
            d = await run.check("read", {"path": "same.md"})
            await run.tool_result(d, result={"text": "same"})
            await asyncio.sleep(pace)
        try:
            seconds.append(await asyncio.wait_for(got, 10.0))
        except TimeoutError:
            pass
        await run.end()
    ms = sorted(x * 1000 for x in seconds)
    return {
        "runs": runs,
        "corrected": len(ms),
        "p50_ms": round(percentile(ms, 0.5), 3) if ms else None,
        "p99_ms": round(percentile(ms, 0.99), 3) if ms else None,
        "client_corrections": client.stats.corrections,
    }


async def bench(
    frameworks: list[str],
    rates: list[float],
    seconds: float,
    modes: list[str] | tuple[str, ...] = ("worker",),
    corrections: int = 0,
) -> dict:
    report: dict[str, Any] = {"seconds_per_rate": seconds, "frameworks": {}}
    for framework in frameworks:
        why = _missing(framework)
        if why is not None:
            report["frameworks"][framework] = {"skipped": why}
            print(f"{framework}: skipped, {why}", file=sys.stderr, flush=True)
            continue
        levels = []
        for mode in modes:
            async with _stack_parts() as (clients, _meter):
                client = await clients(f"bench-{framework}-{mode}", **_options(mode))
                harness = HARNESSES[framework](client)
                rotation = _Rotation(harness)
                for _ in range(20):  # warm-up: connections, metadata, the worker's first batches
                    n, run_id = rotation.next()
                    await _one(harness, n, run_id, None)
                if mode == "local":  # one call at a time: the time the adapter and decision cost, no queueing
                    levels.append(_summary(await _sequential(rotation, SEQUENTIAL), 0.0, 0, mode))
                    lv = levels[-1]
                    print(
                        f"{framework} local sequential: added p50 {lv['added_p50_ms']} ms, p99 {lv['added_p99_ms']} ms",
                        file=sys.stderr,
                        flush=True,
                    )
                for rate in rates:
                    before = client.stats.fail_open
                    samples = await _open_loop(rotation, rate, seconds)
                    level = _summary(samples, rate, client.stats.fail_open - before, mode)
                    levels.append(level)
                    print(
                        f"{framework} {mode} {rate:g}/s: added p50 {level['added_p50_ms']} ms, "
                        f"p99 {level['added_p99_ms']} ms",
                        file=sys.stderr,
                        flush=True,
                    )
                await asyncio.gather(*rotation.ending)
        report["frameworks"][framework] = {"levels": levels}
    if corrections:
        async with _stack_parts() as (clients, _meter):
            report["correction"] = await _corrections(clients, corrections, 0.005)
        c = report["correction"]
        print(f"correction: p50 {c['p50_ms']} ms, p99 {c['p99_ms']} ms", file=sys.stderr, flush=True)
    return report


def table(report: dict) -> str:
    rows = [
        "| framework | decisions | calls/s | calls | added p50 ms | added p99 ms | adapter p50/p99 ms "
        "| bare p50/p99 ms | fail-open |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for framework, entry in report["frameworks"].items():
        if "skipped" in entry:
            rows.append(f"| {framework} | skipped: {entry['skipped']} ||||||||")
            continue
        for lv in entry["levels"]:
            rate = format(lv["rate_per_s"], "g") if lv["rate_per_s"] else "one at a time (CPU time)"
            rows.append(
                f"| {framework} | {lv.get('decisions', 'worker')} | {rate} | "
                f"{lv['calls']} | "
                f"{lv['added_p50_ms']} | {lv['added_p99_ms']} | {lv['adapter_p50_ms']}/{lv['adapter_p99_ms']} | "
                f"{lv['bare_p50_ms']}/{lv['bare_p99_ms']} | {lv['fail_open']} |"
            )
    c = report.get("correction")
    if c:
        rows.append("")
        rows.append(
            f"event -> worker correction at the runner: p50 {c['p50_ms']} ms, p99 {c['p99_ms']} ms "
            f"({c['corrected']} of {c['runs']} runs corrected)"
        )
    return "\n".join(rows)


def add_arguments(p: Any) -> None:
    p.add_argument(
        "--frameworks",
        default=",".join(FRAMEWORKS),
        help=f"comma-separated, of {', '.join(FRAMEWORKS)} (client = LoopClient by hand)",
    )
    p.add_argument("--rates", default="10,100", help="tool calls per second, comma-separated")
    p.add_argument("--seconds", type=float, default=10.0, help="seconds per rate")
    p.add_argument(
        "--decisions",
        default=",".join(MODES),
        help="comma-separated, of local (in-process, the worker's config) and worker (gate round trip)",
    )
    p.add_argument("--corrections", type=int, default=10, help="runs measuring event -> worker correction (0: skip)")


def run(args: Any) -> int:
    frameworks = [f.strip() for f in str(args.frameworks).split(",") if f.strip()]
    unknown = sorted(set(frameworks) - set(FRAMEWORKS))
    if unknown:
        print(f"loopwarden bench adapters: unknown framework(s) {', '.join(unknown)}", file=sys.stderr)
        return 2
    rates = [float(x) for x in str(args.rates).split(",") if x.strip()]
    modes = [m.strip() for m in str(getattr(args, "decisions", "worker")).split(",") if m.strip()]
    if set(modes) - set(MODES):
        print(f"loopwarden bench adapters: unknown decisions {', '.join(set(modes) - set(MODES))}", file=sys.stderr)
        return 2
    report = asyncio.run(bench(frameworks, rates, args.seconds, modes, getattr(args, "corrections", 0)))
    print(json.dumps(report, indent=2))
    print(table(report))
    return 0
