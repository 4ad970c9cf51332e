"""``loopwarden bench TARGET``: one sub-command per benchmark module.

Each module in :data:`TARGETS` has ``add_arguments(parser)`` and ``run(args)``
and imports the broker, the worker or aiokafka only inside ``run``.
"""

from __future__ import annotations

import argparse
import importlib

TARGETS = {
    "engine": ("loopwarden.bench.engine", "decode + step() on one core, against the hashing floor"),
    "worker": ("loopwarden.bench.worker", "one worker on the embedded broker: backlog drain and event->verdict"),
    "latency": ("loopwarden.bench.latency", "gate-mode decision round trip of runner clients"),
    "sidecar": ("loopwarden.bench.sidecar", "the time a check takes over loopback HTTP, beside an in-process client"),
    "adapters": ("loopwarden.bench.adapters", "the latency each framework adapter adds per gated tool call"),
    "tune": ("loopwarden.bench.tune", "loopwarden tune: a sweep of 20 settings over a 100k-event trace"),
    "broker": (
        "loopwarden.bench.broker",
        "the embedded broker's CPU for idle consumers, and a hop's latency, per fetch wait",
    ),
    "spans": ("loopwarden.bench.spans", "loopwarden spans: OTLP records translated into events, against parsing alone"),
    "mcp": ("loopwarden.bench.mcp", "the time loopwarden mcp adds per tools/call, against a direct call"),
    "config": ("loopwarden.bench.config", "per-agent config records applied per second at fleet scale (100k)"),
    "screening": ("loopwarden.bench.screening", "µs per KB of hostile records through the worker's screen"),
    "signing": ("loopwarden.bench.signing", "what signed records and keyed warning keys cost per record"),
    "state": ("loopwarden.bench.state", "a run's stored value: bytes, decoded memory, encode/decode µs per run"),
    "recovery": (
        "loopwarden.bench.recovery",
        "the release's batch admission (openclaw-latest) per call, against check() under the default rules",
    ),
    "fingerprint": (
        "loopwarden.bench.fingerprint",
        "the fleet's failure fingerprint: µs per outcome, and per event normalized against exact",
    ),
    "failover": (
        "loopwarden.bench.failover",
        "two workers: time to ready after a kill, a restart and a wiped restart, by state size and standbys",
    ),
    "soak": ("loopwarden.bench.soak", "memory against concurrent runs, and after their expiry (two waves)"),
    "hook": ("loopwarden.bench.hook", "one `loopwarden hook` run as a coding agent starts it, service up and down"),
    "all": ("loopwarden.bench.all", "engine, worker and gate round trip in one run, with their ratios and the targets"),
}


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "bench",
        help="benchmarks (engine, worker, latency, sidecar, adapters, broker, tune, spans, mcp, config, screening, "
        "signing, state, recovery, fingerprint, failover, soak, hook, all)",
        description="Measure speed on this machine; every figure printed with its ratios.",
    )
    targets = p.add_subparsers(dest="target", required=True, metavar="TARGET")
    for name, (module, text) in TARGETS.items():
        mod = importlib.import_module(module)
        sp = targets.add_parser(name, help=text, description=(mod.__doc__ or text).strip().splitlines()[0])
        mod.add_arguments(sp)
        sp.set_defaults(func=mod.run)
