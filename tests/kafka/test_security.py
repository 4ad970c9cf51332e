"""TLS/SASL settings reach every Kafka client the same way (loopwarden.kafka.connection)."""

import ssl

import pytest

from loopwarden.kafka.connection import SecurityError, kafka_auth
from loopwarden.runner.settings import ClientSettings
from loopwarden.worker.app import faust_credentials
from loopwarden.worker.settings import Settings, from_sources


def test_plaintext_adds_nothing():
    assert kafka_auth(Settings()) == {}
    assert faust_credentials(Settings()) is None


def test_sasl_plaintext_from_environment():
    env = {
        "LOOPWARDEN_SECURITY_PROTOCOL": "sasl_plaintext",
        "LOOPWARDEN_SASL_MECHANISM": "scram-sha-512",
        "LOOPWARDEN_SASL_USERNAME": "lw",
        "LOOPWARDEN_SASL_PASSWORD": "s3cret",
    }
    s = from_sources(None, env)
    assert kafka_auth(s) == {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "lw",
        "sasl_plain_password": "s3cret",
    }
    creds = faust_credentials(s)
    assert (creds.username, creds.password, creds.mechanism.value) == ("lw", "s3cret", "SCRAM-SHA-512")
    assert creds.protocol.value == "SASL_PLAINTEXT"


def test_sasl_ssl_builds_a_verifying_context():
    s = Settings(security_protocol="SASL_SSL", sasl_username="lw", sasl_password="x")
    kwargs = kafka_auth(s)
    assert kwargs["security_protocol"] == "SASL_SSL"
    assert isinstance(kwargs["ssl_context"], ssl.SSLContext)
    assert kwargs["ssl_context"].verify_mode == ssl.CERT_REQUIRED
    assert faust_credentials(s).protocol.value == "SASL_SSL"


def test_ssl_only_and_the_runner_uses_the_same_rules():
    s = ClientSettings(security_protocol="SSL")
    assert kafka_auth(s)["security_protocol"] == "SSL"
    assert "sasl_mechanism" not in kafka_auth(s)


@pytest.mark.parametrize(
    "fields, complaint",
    [
        ({"security_protocol": "TLS"}, "security_protocol"),
        ({"security_protocol": "SASL_SSL", "sasl_username": "u"}, "sasl_password"),
        (
            {
                "security_protocol": "SASL_PLAINTEXT",
                "sasl_mechanism": "GSSAPI",
                "sasl_username": "u",
                "sasl_password": "p",
            },
            "sasl_mechanism",
        ),
        ({"security_protocol": "SSL", "ssl_certfile": "/c.pem"}, "ssl_keyfile"),
    ],
)
def test_contradictions_are_refused_with_a_reason(fields, complaint):
    with pytest.raises(SecurityError, match=complaint):
        kafka_auth(Settings(**fields))
