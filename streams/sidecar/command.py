"""``loopwarden sidecar``: the local decision service (streams/sidecar/SIDECAR.md).

A long-lived process that any agent runner or hook, in any language, asks over
a Unix socket only its user can reach (or loopback TCP when told): it is a
:class:`~loopwarden.runner.LoopClient` deciding locally with the fleet's
config, served as HTTP/JSON under ``/v1/``. It talks to a broker only when
given one (``--bootstrap`` or ``LOOPWARDEN_RUNNER_BOOTSTRAP``).
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import logging
import signal
import sys
from typing import Any

from loopwarden import tcp_port

log = logging.getLogger("loopwarden.sidecar")


def register(subparsers: argparse._SubParsersAction) -> None:
    from loopwarden.hooks.service import default_socket

    p = subparsers.add_parser(
        "sidecar",
        help="the local decision service: runners and hooks in any language ask over a Unix socket or loopback HTTP",
        description="Serve local loop decisions over HTTP/JSON (/v1/) on a Unix socket only this user can reach "
        f"(default {default_socket()}) and, with --port, on TCP. Client settings also come from "
        "LOOPWARDEN_RUNNER_* environment variables.",
    )
    p.add_argument("--config", help="the fleet's config file (JSON/JSON5): checks are decided here with it")
    p.add_argument(
        "--socket",
        help=f"the Unix socket (default {default_socket()}, in a folder made mode 0700; the socket 0600)",
    )
    p.add_argument("--no-socket", action="store_true", help="no Unix socket (TCP only: needs --port)")
    p.add_argument(
        "--allow-uid",
        type=int,
        action="append",
        default=[],
        help="also serve this uid on the Unix socket (repeatable; the service's own uid and root always)",
    )
    p.add_argument("--port", type=tcp_port, help="also serve TCP on this port (0: any free; default: no TCP)")
    p.add_argument("--host", help="the TCP address (default 127.0.0.1 with --port; beyond loopback needs --token-file)")
    p.add_argument("--no-tcp", action="store_true", help="no TCP listener (the default; kept for old command lines)")
    p.add_argument("--token-file", help="require 'Authorization: Bearer <token>' with the token in this file")
    p.add_argument(
        "--bootstrap",
        help="Kafka bootstrap servers to publish events to and take verdicts and config from (else "
        "LOOPWARDEN_RUNNER_BOOTSTRAP; with neither, no broker is contacted: a standalone service)",
    )
    # the defaults are LoopClient's (streams/runner/RUNNER.md, "Settings"): importing it here would cost every command
    p.add_argument("--events-topic", help="the events topic (default: LoopClient's, agent.events)")
    p.add_argument("--control-topic", help="the verdicts topic (default: LoopClient's, agent.loop-control)")
    p.add_argument("--config-topic", help="the live config topic (default: LoopClient's, agent.loop-config)")
    p.add_argument(
        "--decisions",
        choices=["auto", "local", "worker"],
        help="who decides: local (the config), worker (a round trip), auto: local when there is a config",
    )
    p.add_argument("--max-sessions", type=int, default=10_000, help="sessions remembered (LRU, live ones last)")
    p.add_argument("--max-runs", type=int, default=10_000, help="runs driven at once (LRU, live ones last)")
    p.add_argument("--max-pending", type=int, default=100_000, help="checks awaiting their result (LRU)")
    p.add_argument("--max-pending-bytes", type=int, default=32 << 20, help="bytes of the checks awaiting their result")
    p.add_argument("--max-body", type=int, default=1 << 20, help="bytes of one request body (413 beyond)")
    p.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR (default INFO)")
    p.set_defaults(func=run)


def client_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The runner-client settings given as flags (the rest from LOOPWARDEN_RUNNER_* and defaults)."""
    names = ("bootstrap", "events_topic", "control_topic", "config_topic", "decisions", "config")
    return {name: getattr(args, name) for name in names if getattr(args, name) is not None}


def run(args: argparse.Namespace) -> int:
    from loopwarden.hooks.service import default_socket
    from loopwarden.sidecar.app import is_loopback, read_token

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.no_tcp and args.port is not None:
        print("loopwarden sidecar: --no-tcp and --port contradict each other", file=sys.stderr)
        return 2
    if args.host is not None and args.port is None:
        print("loopwarden sidecar: --host needs --port (TCP is off by default)", file=sys.stderr)
        return 2
    host = None if args.port is None else (args.host or "127.0.0.1")
    if args.no_socket and args.socket:
        print("loopwarden sidecar: --no-socket and --socket contradict each other", file=sys.stderr)
        return 2
    args.socket = None if args.no_socket else (args.socket or default_socket())
    if host is None and args.socket is None:
        print("loopwarden sidecar: --no-socket needs --port (nothing to listen on)", file=sys.stderr)
        return 2
    token = None
    if args.token_file:
        try:
            token = read_token(args.token_file)
        except (OSError, ValueError) as exc:
            print(f"loopwarden sidecar: {exc}", file=sys.stderr)
            return 2
    if host is not None and not is_loopback(host) and token is None:
        print(
            f"loopwarden sidecar: refusing to listen on {host}, beyond loopback, without --token-file",
            file=sys.stderr,
        )
        return 2
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        return runner.run(serve(args, host, token))


def _loop_factory() -> Any:
    """uvloop's event loop when it is installed (the ``sidecar`` extra has it on Linux and macOS):
    it takes about a fifth off each request's time in the loop; else asyncio's own."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


async def serve(args: argparse.Namespace, host: str | None, token: bytes | None) -> int:
    from loopwarden.hooks.service import default_socket
    from loopwarden.runner import LoopClient
    from loopwarden.runner.settings import broker_named
    from loopwarden.sidecar.app import make_app, start_listeners
    from loopwarden.sidecar.service import Limits, Service

    limits = Limits(
        max_sessions=args.max_sessions,
        max_runs=args.max_runs,
        max_pending=args.max_pending,
        max_pending_bytes=args.max_pending_bytes,
        max_body=args.max_body,
    )
    client = LoopClient(**client_overrides(args))
    standalone = not broker_named(args.bootstrap)
    if not client.local:
        log.warning("no --config: every check is a round trip to the worker (and allowed when it is away)")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    if not standalone:  # a standalone client is never started: no producer, no consumers, no broker contact
        await client.start()
    try:
        service = Service(client, limits)
        try:
            server, urls = await start_listeners(
                service,
                make_app(service, token),
                host,
                args.port or 0,
                args.socket,
                frozenset(args.allow_uid),
                private=args.socket == default_socket(),
            )
        except OSError as exc:
            hint = ""
            if "too long" in str(exc):
                hint = " (a socket's path is at most 107 bytes: --socket SHORTER, and the same URL to the clients)"
            elif exc.errno in (errno.EADDRINUSE, errno.EADDRNOTAVAIL):  # the TCP port: say which flag moves it
                hint = "; choose another port or address (--port, --host)"
            print(f"loopwarden sidecar: {exc}{hint}", file=sys.stderr)
            return 2
        try:
            mode = "local" if client.local else "worker"
            broker = "none" if standalone else client.settings.bootstrap
            print(
                f"loopwarden sidecar: listening on {' '.join(urls)} (decisions: {mode}; broker: {broker})", flush=True
            )
            await stop.wait()
        finally:
            await server.close()
    finally:
        await client.close()
    return 0
