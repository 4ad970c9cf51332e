"""``loopwarden keys``: make an Ed25519 key pair, sign a record by hand (config records).

``generate`` writes ``NAME.key`` (PKCS#8 PEM, mode 0600, whatever was there
before) and ``NAME.pub`` (PEM), each as a new file that takes the name
atomically, never through a symlink, and only with ``--force`` over an
existing one; it prints the key id and the base64 public key (what
``--config-keys``, ``LOOPWARDEN_RUNNER_VERDICT_KEYS`` and the like take).
``sign`` prints the ``lw-sig`` header value of one record, for tools that
publish config records, e.g. ``kcat -H "lw-sig=$(loopwarden keys sign ...)"``.
"""

from __future__ import annotations

import argparse
import base64
import os
import secrets
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "keys",
        help="Ed25519 keys for signed verdicts, incidents and config records",
        description="Make and use the keys of signed records (deploy/SECURITY.md, 'Signing').",
    )
    sub = p.add_subparsers(dest="keys_command", required=True, metavar="SUBCOMMAND")
    gen = sub.add_parser("generate", help="write NAME.key (private, 0600) and NAME.pub; print the key id")
    gen.add_argument("name", metavar="NAME", help="path prefix of the two files")
    gen.add_argument("--force", action="store_true", help="overwrite existing files")
    gen.set_defaults(func=generate_main)
    sign = sub.add_parser(
        "sign",
        help="print the lw-sig header value of one record",
        description="Sign TOPIC, KEY and the value read from FILE (- = standard input) with the private key "
        "in LOOPWARDEN_SIGNING_KEY or --key-file; prints the header value. Without --key the record key is "
        "absent; --tombstone signs a null value.",
    )
    sign.add_argument("--key-file", help="private key file (PEM or base64 seed)")
    sign.add_argument("--topic", required=True)
    sign.add_argument("--key", help="the record key (e.g. an agent id, or * for the global block)")
    sign.add_argument("--tombstone", action="store_true", help="sign a null value (a deletion)")
    sign.add_argument("file", nargs="?", default="-", metavar="FILE", help="the exact value bytes")
    sign.set_defaults(func=sign_main)


def write_file(path: str, data: bytes, mode: int, force: bool) -> None:
    """Write ``path`` as a new file of ``mode``, atomically; never through a symlink.

    The bytes go to a fresh file beside it (``O_EXCL | O_NOFOLLOW``, created with ``mode``, so a
    private key is never readable by others, not even for a moment), which then takes the name:
    ``os.replace`` with ``force`` (a symlink there is replaced, not followed), else ``os.link``,
    which fails when the name exists. Raises FileExistsError without ``force``.
    """
    folder = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(folder, f".{os.path.basename(path)}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), mode)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)  # whatever the umask left
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if force:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)


def generate_main(args: argparse.Namespace) -> int:
    from loopwarden.kafka.signing import generate, public_keys, raw_public

    key_path, pub_path = args.name + ".key", args.name + ".pub"
    if not args.force:
        existing = [p for p in (key_path, pub_path) if os.path.lexists(p)]
        if existing:
            print(f"{' and '.join(existing)} exist(s) (--force overwrites)", file=sys.stderr)
            return 1
    private, public, kid = generate()
    try:
        write_file(key_path, private, 0o600, args.force)
        write_file(pub_path, public, 0o644, args.force)
    except FileExistsError as exc:  # made meanwhile by someone else: theirs stays
        print(f"{exc.filename or exc} exists (--force overwrites it)", file=sys.stderr)
        return 1
    raw = base64.b64encode(raw_public(public_keys(public)[0])).decode()
    print(f"key id {kid}\nprivate key {key_path}\npublic key {pub_path}\npublic key (base64) {raw}")
    return 0


def sign_main(args: argparse.Namespace) -> int:
    from loopwarden.kafka.signing import KeyMaterialError, signer_from

    try:
        signer = signer_from(os.environ.get("LOOPWARDEN_SIGNING_KEY"), args.key_file, [args.topic])
    except (KeyMaterialError, OSError) as exc:
        detail = f"{exc.filename}: {exc.strerror}" if isinstance(exc, OSError) and exc.strerror else exc
        print(f"loopwarden keys sign: cannot read the private key (--key-file): {detail}", file=sys.stderr)
        return 2
    if signer is None:
        print("loopwarden keys sign: no private key: set LOOPWARDEN_SIGNING_KEY or --key-file", file=sys.stderr)
        return 2
    if args.tombstone:
        value = None
    elif args.file == "-":
        value = sys.stdin.buffer.read()
    else:
        with open(args.file, "rb") as f:
            value = f.read()
    key = args.key.encode() if args.key is not None else None
    print(signer.header(args.topic, key, value).decode())
    return 0
