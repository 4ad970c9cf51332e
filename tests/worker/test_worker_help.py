"""``loopwarden worker --help``: --broker first, TLS/SASL last, booleans as --x/--no-x switches."""

from __future__ import annotations

import argparse
import re

import msgspec

from loopwarden.kafka.connection import SecuritySettings
from loopwarden.worker.settings import add_arguments, from_sources


def parser():
    p = argparse.ArgumentParser()
    add_arguments(p)
    return p


def test_flag_order_broker_first_security_last():
    flags = [a.option_strings[0] for a in parser()._actions if a.option_strings and a.dest != "help"]
    security = {"--" + f.name.replace("_", "-") for f in msgspec.structs.fields(SecuritySettings)}
    security.discard("--sasl-password")  # a secret: environment or file only, no flag
    assert flags[0] == "--broker"
    assert set(flags[-len(security) :]) == security


def test_booleans_are_switches_and_env_still_works():
    p = parser()
    text = p.format_help()
    assert "--fast-path, --no-fast-path" in text and "FAST_PATH" not in re.sub(r"LOOPWARDEN_FAST_PATH", "", text)
    assert "2.5k" not in text
    assert from_sources(p.parse_args(["--no-fast-path"]), environ={}).fast_path is False
    assert from_sources(p.parse_args(["--fast-path"]), environ={"LOOPWARDEN_FAST_PATH": "false"}).fast_path is True
    assert from_sources(p.parse_args([]), environ={"LOOPWARDEN_FAST_PATH": "0"}).fast_path is False
    assert from_sources(p.parse_args([]), environ={}).correct_end_offsets is True
