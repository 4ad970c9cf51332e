"""``loopwarden mcp [--config FILE] -- CMD ARGS`` (or ``--url URL``): the MCP proxy (streams/mcpgate/MCP.md)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket
import sys
from typing import Any

from loopwarden import tcp_port
from loopwarden.mcpgate.install import add_proxy_options


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
    add_proxy_options(p, config_help="the fleet's loop-detection config (JSON/JSON5), as the workers read it")
    p.add_argument("--http", metavar="HOST:PORT", help="serve streamable HTTP here instead of stdio")
    p.add_argument("--path", default="/mcp", help="the HTTP endpoint's path (default /mcp)")
    p.add_argument("--max-payload-bytes", type=int, help="larger arguments/results are published as a digest (65536)")
    p.add_argument("--max-pending", type=int, help="gated calls in flight; more go through ungated (100000)")
    p.add_argument("--max-runs", type=int, help="runs (sessions) the proxy keeps handles of (10000)")
    p.add_argument("--max-frame-bytes", type=int, help="larger JSON-RPC frames go through undecided (16 MiB)")
    p.add_argument(
        "--max-sessions", type=int, help="HTTP host sessions at once; a new one ends the least recently used (100)"
    )
    p.add_argument("--log-level", default="warning", help="log level of the proxy's own log, on stderr")
    p.add_argument(
        "server",
        nargs=argparse.REMAINDER,
        help="-- CMD ARGS: the wrapped server's command; or 'install HOST ...' to write a host's MCP entry "
        "(loopwarden mcp install --help)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.server[:1] == ["install"]:
        from loopwarden.mcpgate.install import main as install_main

        return install_main(args.server[1:])
    from loopwarden.mcpgate.gate import ToolGate
    from loopwarden.mcpgate.proxy import serve_http, serve_stdio
    from loopwarden.mcpgate.settings import GateSettings
    from loopwarden.runner.client import LoopClient
    from loopwarden.runner.settings import broker_named
    from loopwarden.schemas.config_check import load_checked

    # stdout is the MCP wire: the proxy's own log goes to stderr only
    logging.basicConfig(
        stream=sys.stderr, level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    command = args.server[1:] if args.server[:1] == ["--"] else args.server
    if bool(command) == bool(args.url):
        say("give the server's command after '--' or its --url (one of them)")
        return 2
    limits = ("agent_id", "max_payload_bytes", "max_pending", "max_runs", "max_frame_bytes", "max_sessions")
    try:
        settings = GateSettings.from_env(**{name: getattr(args, name) for name in limits}).check()
        host, port = _address(args.http) if args.http else ("", 0)
    except Exception as exc:  # noqa: BLE001 - a settings error is reported, not a traceback
        say(str(exc))
        return 2
    fleet = None
    if args.config:
        lines: list[str] = []
        fleet = load_checked(args.config, lines.append)
        if fleet is None:  # the config's errors (in one line when there is one), and the flag to change
            say(f"{'; '.join(lines)}; give a readable JSON/JSON5 config with --config FILE")
            return 2
        for line in lines:  # its warnings and notices
            say(line)
    if args.url and not _reachable(args.url):
        return 2
    listener = None
    if args.http:
        listener = _listen(host, port)
        if listener is None:
            return 2

    async def main() -> None:
        options: dict = {"config": fleet} if fleet is not None else {}
        if args.bootstrap:
            options["bootstrap"] = args.bootstrap
        client = LoopClient(**options)
        standalone = not broker_named(args.bootstrap)
        if not standalone:  # a standalone client is never started: no producer, no consumers, no broker contact
            await client.start()
        try:
            gate = ToolGate(client, settings)
            stop_on_signals(gate, client)
            if listener is not None:
                await serve_http(command, args.url, gate, listener, args.path)
            else:
                await serve_stdio(command, args.url, gate)
        finally:
            await client.close()

    try:
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            runner.run(main())
    except OSError as exc:  # the server's command cannot be started, or its URL not reached
        what = f"the command after '--' ({' '.join(command)})" if command else f"--url {args.url}"
        say(f"cannot start or reach the wrapped server: {exc.strerror or exc}; check {what}")
        return 2
    return 0


def _loop_factory() -> Any:
    """uvloop's event loop when it is installed (the ``mcp`` extra has it on Linux and macOS): each
    frame crosses the loop twice per hop, and uvloop takes about a fifth off that; else asyncio's own."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def say(text: str) -> None:
    print(f"loopwarden mcp: {text}", file=sys.stderr)


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    try:
        return host.strip("[]") or "127.0.0.1", tcp_port(port)
    except (ValueError, argparse.ArgumentTypeError):
        raise ValueError(f"--http {text}: give HOST:PORT (a port 0-65535), e.g. 127.0.0.1:8765") from None


def _reachable(url: str) -> bool:
    """The wrapped server's address accepts a connection (checked once at start: a wrong --url is one line)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("not an http(s) URL")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        socket.create_connection((parts.hostname, port), timeout=5).close()
    except (OSError, ValueError) as exc:
        say(f"cannot reach --url {url} ({getattr(exc, 'strerror', None) or exc}); check the server's address")
        return False
    return True


def _listen(host: str, port: int) -> socket.socket | None:
    """The HTTP listening socket, bound before anything starts (a busy port is one line, not a traceback)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        say(f"cannot listen on {host}:{port} ({exc.strerror}); choose another address with --http HOST:PORT")
        return None
    return sock


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
