"""Ed25519 signatures on records: who wrote a verdict, an incident or a config record.

Anyone who may write a topic could otherwise steer the fleet (a forged
``block`` on the control topic, ``{"enabled": false}`` on the config
topic). A record is signed over its topic, its key and its exact value
bytes, so a signature cannot be moved to another topic or key; the
signature travels in the record header :data:`HEADER` as
``<key id>:<base64 signature>``, the value stays as it was (readers that
do not verify see no difference). A reader with keys configured drops, and
counts, every record that is unsigned, signed by an unknown key or does
not verify; a reader without keys accepts everything, as before.

Keys are Ed25519 (:mod:`cryptography`, PyCA's OpenSSL binding): private
keys as PKCS#8 PEM or base64 of the 32-byte seed, public keys as PEM or
base64 of the 32 raw bytes; the key id is the first 8 bytes of the raw
public key's SHA-256, in hex. What a signature does not give (replay of a
whole signed record on the same topic and key, confidentiality) is in
``deploy/SECURITY.md``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
import struct
from collections.abc import Iterable, Sequence

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

HEADER = "lw-sig"
DOMAIN = b"loopwarden-record-v1\x00"  # a signature made for something else never verifies here
MAX_HEADER_BYTES = 256  # a key id and a base64 signature take 105; anything longer is not ours
_PEM = re.compile(rb"-----BEGIN ([A-Z ]+)-----.+?-----END \1-----", re.S)

Headers = Sequence[tuple[str, bytes]] | None


class KeyMaterialError(ValueError):
    """A key setting or file that does not hold a usable Ed25519 key."""


def _field(data: bytes | None) -> bytes:
    return struct.pack(">i", -1) if data is None else struct.pack(">i", len(data)) + data


def signed_bytes(topic: str, key: bytes | None, value: bytes | None) -> bytes:
    """What is signed: domain, topic, key and value, each length-prefixed (absent = -1) so no two differ."""
    return DOMAIN + _field(topic.encode()) + _field(key) + _field(value)


def raw_public(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def key_id(key: Ed25519PublicKey) -> str:
    return hashlib.sha256(raw_public(key)).hexdigest()[:16]


def _b64(text: bytes) -> bytes:
    try:
        return base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise KeyMaterialError(f"not base64: {exc}") from None


def private_key(material: bytes) -> Ed25519PrivateKey:
    """A private key from PKCS#8 PEM or base64 of the 32-byte seed."""
    material = material.strip()
    if material.startswith(b"-----BEGIN"):
        try:
            key = serialization.load_pem_private_key(material, password=None)
        except (ValueError, TypeError) as exc:
            raise KeyMaterialError(f"unreadable private key: {exc}") from None
        if not isinstance(key, Ed25519PrivateKey):
            raise KeyMaterialError("the private key is not Ed25519")
        return key
    seed = _b64(material)
    if len(seed) != 32:
        raise KeyMaterialError("a raw Ed25519 private key is 32 bytes (base64)")
    return Ed25519PrivateKey.from_private_bytes(seed)


def public_keys(material: bytes) -> list[Ed25519PublicKey]:
    """Public keys from PEM blocks and/or lines of base64 (32 raw bytes each); ``#`` starts a comment."""
    keys: list[Ed25519PublicKey] = []
    for block in _PEM.finditer(material):
        try:
            key = serialization.load_pem_public_key(block.group(0))
        except (ValueError, TypeError) as exc:
            raise KeyMaterialError(f"unreadable public key: {exc}") from None
        if not isinstance(key, Ed25519PublicKey):
            raise KeyMaterialError("a public key is not Ed25519")
        keys.append(key)
    rest = _PEM.sub(b"", material)
    for line in re.split(rb"[\n,]", rest):
        line = line.split(b"#", 1)[0].strip()
        if not line:
            continue
        raw = _b64(line)
        if len(raw) != 32:
            raise KeyMaterialError("a raw Ed25519 public key is 32 bytes (base64)")
        keys.append(Ed25519PublicKey.from_public_bytes(raw))
    return keys


def material(value: str | None, path: str | None) -> bytes | None:
    """A key setting's bytes: the value itself, else the file it names (None when neither is set)."""
    if value:
        return value.encode()
    if path:
        with open(os.path.expanduser(path), "rb") as f:
            return f.read()
    return None


class Signer:
    """Signs records of the given topics (others pass unsigned: changelogs, repartition topics)."""

    def __init__(self, key: Ed25519PrivateKey, topics: Iterable[str]) -> None:
        self.key = key
        self.kid = key_id(key.public_key()).encode()
        self.topics = frozenset(topics)

    def public_key(self) -> Ed25519PublicKey:
        return self.key.public_key()

    def header(self, topic: str, key: bytes | None, value: bytes | None) -> bytes:
        signature = self.key.sign(signed_bytes(topic, key, value))
        return self.kid + b":" + base64.b64encode(signature)

    def headers(self, topic: str, key: bytes | None, value: bytes | None) -> list[tuple[str, bytes]] | None:
        """The record's headers: ``[(HEADER, ...)]`` for a signed topic (tombstones too), None otherwise."""
        if topic not in self.topics:
            return None
        return [(HEADER, self.header(topic, key, value))]


class Verifier:
    """Accepts a record only when one of its keys signed exactly this topic, key and value."""

    def __init__(self, keys: Iterable[Ed25519PublicKey]) -> None:
        self.keys = {key_id(k).encode(): k for k in keys}
        if not self.keys:
            raise KeyMaterialError("a verifier needs at least one public key")

    def verify(self, topic: str, key: bytes | None, value: bytes | None, headers: Headers) -> bool:
        """True when signed by a known key over exactly this topic, key and value (a tombstone's too)."""
        found = None
        for name, data in headers or ():
            if name == HEADER:
                if found is not None:
                    return False  # two signatures: ambiguous, refuse
                found = data
        if found is None or len(found) > MAX_HEADER_BYTES:
            return False
        kid, sep, sig = bytes(found).partition(b":")
        public = self.keys.get(kid)
        if public is None or not sep:
            return False
        try:
            public.verify(base64.b64decode(sig, validate=True), signed_bytes(topic, key, value))
        except (InvalidSignature, binascii.Error, ValueError):
            return False
        return True


def signer_from(value: str | None, path: str | None, topics: Iterable[str]) -> Signer | None:
    """The signer of a private-key setting pair (value or file), None when neither is set."""
    raw = material(value, path)
    return None if raw is None else Signer(private_key(raw), topics)


def verifier_from(value: str | None, path: str | None, extra: Iterable[Ed25519PublicKey] = ()) -> Verifier | None:
    """The verifier of a public-key setting pair plus ``extra`` keys, None when there is no key at all."""
    raw = material(value, path)
    keys = (public_keys(raw) if raw is not None else []) + list(extra)
    return Verifier(keys) if keys else None


def generate() -> tuple[bytes, bytes, str]:
    """A new key pair: (private PEM, public PEM, key id)."""
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return private, public, key_id(key.public_key())
