"""``loopwarden mcp [--config FILE] -- CMD ARGS`` (or ``--url URL``): the MCP proxy (streams/mcpgate/MCP.md)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys


def register(sub) -> None:
    p = sub.add_parser(
        "mcp",
        help="an MCP proxy: wrap an MCP server and decide every tools/call with loopwarden's rules",
        description="Wrap an MCP server (a command over stdio after '--', or --url for streamable HTTP) and serve "
        "its tools, resources and prompts unchanged over stdio (what hosts launch) or --http. Every tools/call is "
        "decided in-process with the fleet's config (--config), as a runner decides; a block or abort comes back "
        "as a tool error carrying the verdict's text, a warning is appended to the result. Events go to the "
        "broker (--bootstrap or LOOPWARDEN_RUNNER_BOOTSTRAP) whenever it is up. Proxy settings are also "
        "LOOPWARDEN_MCP_<NAME> variables, the client's LOOPWARDEN_RUNNER_<NAME>.",
    )
    p.add_argument("--config", help="the fleet's loop-detection config (JSON/JSON5), as the workers read it")
    p.add_argument("--bootstrap", help="Kafka bootstrap servers (default LOOPWARDEN_RUNNER_BOOTSTRAP, 127.0.0.1:19092)")
    p.add_argument("--url", help="the wrapped server's streamable-HTTP endpoint (instead of a command)")
    p.add_argument("--agent-id", help="the agent id of every run (default: the host's clientInfo.name)")
    p.add_argument("--http", metavar="HOST:PORT", help="serve streamable HTTP here instead of stdio")
    p.add_argument("--path", default="/mcp", help="the HTTP endpoint's path (default /mcp)")
    p.add_argument("--max-payload-bytes", type=int, help="larger arguments/results are published as a digest (65536)")
    p.add_argument("--max-pending", type=int, help="gated calls in flight; more go through ungated (100000)")
    p.add_argument("--max-runs", type=int, help="runs (sessions) the proxy keeps handles of (10000)")
    p.add_argument("--log-level", default="warning", help="log level of the proxy's own log, on stderr")
    p.add_argument("server", nargs=argparse.REMAINDER, help="-- CMD ARGS: the wrapped server's command")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from loopwarden.mcpgate.gate import ToolGate
    from loopwarden.mcpgate.proxy import serve_http, serve_stdio, upstream_client
    from loopwarden.mcpgate.settings import GateSettings
    from loopwarden.runner.client import LoopClient

    # stdout is the MCP wire: the proxy's own log goes to stderr only
    logging.basicConfig(
        stream=sys.stderr, level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    command = args.server[1:] if args.server[:1] == ["--"] else args.server
    if bool(command) == bool(args.url):
        print("loopwarden mcp: give the server's command after '--' or its --url (one of them)", file=sys.stderr)
        return 2
    limits = ("agent_id", "max_payload_bytes", "max_pending", "max_runs")
    try:
        settings = GateSettings.from_env(**{name: getattr(args, name) for name in limits}).check()
        host, port = _address(args.http) if args.http else ("", 0)
    except Exception as exc:  # noqa: BLE001 - a settings error is reported, not a traceback
        print(f"loopwarden mcp: {exc}", file=sys.stderr)
        return 2

    async def main() -> None:
        options = {"config": args.config} if args.config else {}
        if args.bootstrap:
            options["bootstrap"] = args.bootstrap
        async with LoopClient(**options) as client:
            gate = ToolGate(client, settings)
            stop_on_signals(gate, client)
            upstream = upstream_client(command, args.url)
            if args.http:
                await serve_http(upstream, gate, host, port, args.path)
            else:
                await serve_stdio(upstream, gate)

    asyncio.run(main())
    return 0


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host or "127.0.0.1", int(port)


STOP_SECONDS = 2.0  # what a signalled proxy spends ending its runs and flushing events before it exits


def stop_on_signals(gate, client) -> None:
    """SIGINT/SIGTERM (how hosts stop their servers): end the runs, flush the events (bounded), exit.

    The SDK reads stdin in a thread that a cancellation cannot interrupt, so the proxy exits by
    itself once its own work is done; the wrapped server sees its stdin close and exits too.
    """
    loop = asyncio.get_running_loop()
    stopping: list[bool] = []

    async def shutdown() -> None:
        try:
            async with asyncio.timeout(STOP_SECONDS):
                await gate.close()
                await client.close()
        except BaseException:  # noqa: BLE001 - exiting either way
            pass
        finally:
            logging.shutdown()
            os._exit(0)

    def stop() -> None:
        if not stopping:
            stopping.append(True)
            loop.create_task(shutdown())

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop)
