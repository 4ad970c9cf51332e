"""The worker's keys, from its settings: what it signs, whose signatures it accepts, its hash secret.

See :mod:`loopwarden.kafka.signing` for the signature format and
``deploy/SECURITY.md`` for what signing covers.
"""

from __future__ import annotations

from loopwarden.kafka.signing import Signer, Verifier, material, signer_from, verifier_from
from loopwarden.worker.settings import Settings


def signer(s: Settings) -> Signer | None:
    """Signs what runners and workers act on: verdicts (control and shadow topics) and incidents."""
    return signer_from(s.signing_key, s.signing_key_file, (s.control_topic, s.shadow_topic, s.incidents_topic))


def config_verifier(s: Settings) -> Verifier | None:
    """Operators' keys for config records; None: every record is applied, as without signing."""
    return verifier_from(s.config_keys, s.config_keys_file)


def incident_verifier(s: Settings, own: Signer | None) -> Verifier | None:
    """Workers' keys for incident records: this worker's own key and any listed (rotation)."""
    return verifier_from(s.incident_keys, s.incident_keys_file, [own.public_key()] if own is not None else [])


def hash_secret(s: Settings) -> bytes | None:
    """The HMAC secret of published warning keys (None: published as computed, OpenClaw's form)."""
    raw = material(s.hash_key, s.hash_key_file)
    return raw.strip() or None if raw is not None else None
