"""A real ``loopwarden worker`` whose named Faust service is crashed after it is ready (tests only).

    python tests/support/drivers/crashing_worker.py SERVICE DELAY -- WORKER FLAGS...

SERVICE is ``fetcher``, ``consumer`` or ``producer``: DELAY seconds after the
app started, that service is crashed through mode's own ``Service.crash()``,
as a real fault inside it would. Everything else is the production command.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path


def main() -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
    service, delay = sys.argv[1], float(sys.argv[2])
    argv = sys.argv[sys.argv.index("--") + 1 :]

    import loopwarden.worker.app as app_module
    from loopwarden.cli import main as cli_main
    from loopwarden.internals.faust_table import fetcher_service

    real_create_app = app_module.create_app

    def create_app(settings, fleet=None):
        app, rt = real_create_app(settings, fleet)

        @app.task
        async def crash_later() -> None:
            await asyncio.sleep(delay)
            target = {
                "fetcher": lambda: fetcher_service(app),
                "consumer": lambda: app.consumer,
                "producer": lambda: app.producer,
            }[service]()
            await target.crash(RuntimeError(f"forced {service} crash"))

        return app, rt

    app_module.create_app = create_app
    return cli_main(["worker", *argv])


if __name__ == "__main__":
    sys.exit(main())
