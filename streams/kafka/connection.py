"""How every Kafka client of loopwarden connects: bootstrap list, TLS and SASL.

One place for the worker, admin, config feed, end-offset probe and runners.

Settings objects carry the same eight fields (``security_protocol``,
``ssl_cafile``, ``ssl_certfile``, ``ssl_keyfile``, ``sasl_mechanism``,
``sasl_username``, ``sasl_password``, ``sasl_password_file``); this module turns them into aiokafka
keyword arguments, or into Faust credentials for the worker's app, so all
clients of one process authenticate the same way.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import msgspec

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def settings_from_env(cls: type, prefix: str, environ: Mapping[str, str] | None, overrides: dict[str, Any]) -> Any:
    """A settings Struct from ``overrides`` (not None) > ``<prefix><FIELD>`` variables > its defaults.

    An override that is not a field is a TypeError naming it (a misspelt keyword must not be dropped
    silently: ``config_key=`` instead of ``config_keys=`` would turn signature checks off)."""
    environ = os.environ if environ is None else environ
    fields = msgspec.structs.fields(cls)
    unknown = sorted(set(overrides) - {f.name for f in fields})
    if unknown:
        raise TypeError(f"unknown setting(s) of {cls.__name__}: {', '.join(unknown)}")
    raw: dict[str, Any] = {}
    for field in fields:
        key = prefix + field.name.upper()
        if overrides.get(field.name) is not None:
            raw[field.name] = overrides[field.name]
        elif key in environ:
            raw[field.name] = environ[key]
    return msgspec.convert(raw, cls, strict=False)


class SecuritySettings(msgspec.Struct, kw_only=True):
    """The TLS/SASL fields shared by the worker's and the runner's settings."""

    security_protocol: str = "PLAINTEXT"
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    sasl_mechanism: str = "PLAIN"
    sasl_username: str | None = None
    sasl_password: str | None = None
    sasl_password_file: str | None = None  # a mounted Secret: keeps the password off the command line


def password(s: Any) -> str | None:
    """The SASL password: ``sasl_password`` when set, else the file's content without its final newline.

    Read at each connection setup, so a rotated Secret is picked up by the next client made.
    """
    if s.sasl_password is not None:
        return s.sasl_password
    path = getattr(s, "sasl_password_file", None)
    if not path:
        return None
    with open(path, encoding="utf-8") as f:
        return f.read().rstrip("\r\n")


def servers(bootstrap: str | list[str]) -> list[str]:
    """``host:port`` list from ``"a:9092,kafka://b:9092"`` (a ``kafka://`` scheme is accepted and dropped)."""
    items = bootstrap.split(",") if isinstance(bootstrap, str) else bootstrap
    return [b.strip().split("://", 1)[-1] for b in items if b.strip()]


class SecurityError(ValueError):
    """The security settings contradict each other."""


def protocol(s: Any) -> str:
    proto = (s.security_protocol or "PLAINTEXT").upper()
    if proto not in PROTOCOLS:
        raise SecurityError(f"security_protocol must be one of {', '.join(PROTOCOLS)}, not {proto!r}")
    if proto.startswith("SASL"):
        if (s.sasl_mechanism or "").upper() not in MECHANISMS:
            raise SecurityError(f"sasl_mechanism must be one of {', '.join(MECHANISMS)}")
        if not s.sasl_username or (s.sasl_password is None and not getattr(s, "sasl_password_file", None)):
            raise SecurityError(f"{proto} needs sasl_username and sasl_password (or sasl_password_file)")
    if bool(s.ssl_certfile) != bool(s.ssl_keyfile):
        raise SecurityError("ssl_certfile and ssl_keyfile go together (mutual TLS)")
    return proto


def ssl_context(s: Any):
    """A client SSL context: the given CA bundle (else the system's), optional client cert."""
    from aiokafka.helpers import create_ssl_context

    return create_ssl_context(
        cafile=s.ssl_cafile or None, certfile=s.ssl_certfile or None, keyfile=s.ssl_keyfile or None
    )


def kafka_auth(s: Any) -> dict[str, Any]:
    """aiokafka client keyword arguments for these settings (empty for PLAINTEXT)."""
    proto = protocol(s)
    if proto == "PLAINTEXT":
        return {}
    kwargs: dict[str, Any] = {"security_protocol": proto}
    if proto in ("SSL", "SASL_SSL"):
        kwargs["ssl_context"] = ssl_context(s)
    if proto.startswith("SASL"):
        kwargs.update(
            sasl_mechanism=s.sasl_mechanism.upper(),
            sasl_plain_username=s.sasl_username,
            sasl_plain_password=password(s),
        )
    return kwargs


async def start_client(client: Any) -> None:
    """``client.start()`` of an aiokafka producer or consumer, stopped again when it fails: a broker out
    of reach then ends in the caller's one error, not also in aiokafka's "Unclosed ..." at exit."""
    try:
        await client.start()
    except BaseException:
        try:
            await client.stop()
        except Exception:  # noqa: BLE001, S110 - the start's error is the one to report
            pass
        raise
