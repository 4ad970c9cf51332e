"""The embedded broker never outlives the process that started it (no orphans after a crash)."""

import os
import signal
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.integration

STARTER = """
import sys, time
from loopwarden.devtools.broker import EmbeddedBroker
broker = EmbeddedBroker().start()
print(broker.process.pid, flush=True)
time.sleep(120)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie is dead too
        return stat.read().split()[2] != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal is Linux only")
def test_broker_dies_when_its_parent_is_killed():
    parent = subprocess.Popen([sys.executable, "-c", STARTER], stdout=subprocess.PIPE, text=True)
    try:
        broker_pid = int(parent.stdout.readline())
        assert _alive(broker_pid)
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + 10
        while _alive(broker_pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(broker_pid), "tansu outlived the process that started it"
    finally:
        if parent.poll() is None:
            parent.kill()
