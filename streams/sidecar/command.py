"""``loopwarden sidecar``: the local decision service (streams/sidecar/SIDECAR.md).

A long-lived process that any agent runner or hook, in any language, asks over
loopback: it is a :class:`~loopwarden.runner.LoopClient` deciding locally with
the fleet's config, served as HTTP/JSON under ``/v1/``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from typing import Any

DEFAULT_PORT = 7766

log = logging.getLogger("loopwarden.sidecar")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "sidecar",
        help="the local decision service: runners and hooks in any language ask over loopback HTTP",
        description="Serve local loop decisions over HTTP/JSON (/v1/) on loopback and, with --socket, a Unix "
        "socket. Client settings also come from LOOPWARDEN_RUNNER_* environment variables.",
    )
    p.add_argument("--config", help="the fleet's config file (JSON/JSON5): checks are decided here with it")
    p.add_argument(
        "--host", default="127.0.0.1", help="TCP address (default 127.0.0.1; beyond loopback needs --token-file)"
    )
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"TCP port (default {DEFAULT_PORT}; 0: any free)")
    p.add_argument("--no-tcp", action="store_true", help="serve only the Unix socket")
    p.add_argument("--socket", help="also serve on this Unix socket (created mode 0600)")
    p.add_argument("--token-file", help="require 'Authorization: Bearer <token>' with the token in this file")
    p.add_argument("--bootstrap", help="Kafka bootstrap servers (else LOOPWARDEN_RUNNER_BOOTSTRAP)")
    p.add_argument("--events-topic")
    p.add_argument("--control-topic")
    p.add_argument("--config-topic")
    p.add_argument("--decisions", choices=["auto", "local", "worker"])
    p.add_argument("--max-sessions", type=int, default=10_000, help="sessions remembered (LRU, live ones last)")
    p.add_argument("--max-runs", type=int, default=10_000, help="runs driven at once (LRU, live ones last)")
    p.add_argument("--max-pending", type=int, default=100_000, help="checks awaiting their result (LRU)")
    p.add_argument("--max-pending-bytes", type=int, default=32 << 20, help="bytes of the checks awaiting their result")
    p.add_argument("--max-body", type=int, default=1 << 20, help="bytes of one request body (413 beyond)")
    p.add_argument("--log-level", default="INFO")
    p.set_defaults(func=run)


def client_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The runner-client settings given as flags (the rest from LOOPWARDEN_RUNNER_* and defaults)."""
    names = ("bootstrap", "events_topic", "control_topic", "config_topic", "decisions", "config")
    return {name: getattr(args, name) for name in names if getattr(args, name) is not None}


def run(args: argparse.Namespace) -> int:
    from loopwarden.sidecar.app import is_loopback, read_token

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    host = None if args.no_tcp else args.host
    if args.no_tcp and not args.socket:
        print("loopwarden sidecar: --no-tcp needs --socket", file=sys.stderr)
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
    from loopwarden.runner import LoopClient
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
    if not client.local:
        log.warning("no --config: every check is a round trip to the worker (and allowed when it is away)")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await client.start()
    try:
        service = Service(client, limits)
        server, urls = await start_listeners(service, make_app(service, token), host, args.port, args.socket)
        try:
            mode = "local" if client.local else "worker"
            print(f"loopwarden sidecar: listening on {' '.join(urls)} (decisions: {mode})", flush=True)
            await stop.wait()
        finally:
            await server.close()
    finally:
        await client.close()
    return 0
