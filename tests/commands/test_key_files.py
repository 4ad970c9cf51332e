"""``loopwarden keys generate``: the private key is 0600 whatever was there, nothing is written through a
symlink, and nothing is overwritten without --force."""

from __future__ import annotations

import argparse
import os
import stat

from loopwarden.keys_command import generate_main


def generate(name, force: bool = False) -> int:
    return generate_main(argparse.Namespace(name=str(name), force=force))


def mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_force_onto_a_readable_key_leaves_a_private_one(tmp_path):
    key = tmp_path / "op.key"
    key.write_text("old")
    key.chmod(0o644)
    assert generate(tmp_path / "op", force=True) == 0
    assert mode(key) == 0o600 and key.read_bytes().startswith(b"-----BEGIN PRIVATE KEY")
    assert mode(tmp_path / "op.pub") == 0o644


def test_an_existing_public_key_is_not_overwritten_without_force(tmp_path):
    pub = tmp_path / "op.pub"
    pub.write_text("theirs")
    assert generate(tmp_path / "op") == 1
    assert pub.read_text() == "theirs" and not (tmp_path / "op.key").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["op.pub"]  # no temp file left behind


def test_no_file_is_written_through_a_symlink(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("not yours")
    os.symlink(target, tmp_path / "op.pub")
    os.symlink(target, tmp_path / "op.key")
    assert generate(tmp_path / "op") == 1  # a dangling or live link is a file that exists
    assert generate(tmp_path / "op", force=True) == 0
    assert target.read_text() == "not yours"
    assert not (tmp_path / "op.pub").is_symlink() and not (tmp_path / "op.key").is_symlink()
    assert mode(tmp_path / "op.key") == 0o600
