"""Kafka client secrets kept out of logs, XCom and exception messages."""

from __future__ import annotations

import json

import pytest

from kafkalake.kafka.client_config import java_client_config, librdkafka_config
from kafkalake.kafka.redaction import redacted, scrub, secret_values

CA = "-----BEGIN CERTIFICATE-----\nQ0EgY2VydGlmaWNhdGUgYm9keQ==\n-----END CERTIFICATE-----\n"
KEY_BODY = "cHJpdmF0ZSBrZXkgYm9keSB0aGF0IGlzIHNlY3JldCBhbmQgbG9uZw=="
KEY = f"-----BEGIN PRIVATE KEY-----\n{KEY_BODY}\n-----END PRIVATE KEY-----\n"


def test_redacted_hides_secrets_and_keeps_the_rest():
    java = java_client_config(
        {
            "bootstrap.servers": "b:9093",
            "sasl.mechanisms": "PLAIN",
            "sasl.username": "u",
            "sasl.password": "pw",
        }
    )
    java["ssl.truststore.password"] = "tpw"
    java["ssl.key.password"] = "kpw"
    safe = redacted(java)
    assert safe["sasl.jaas.config"] == "***"
    assert safe["ssl.truststore.password"] == "***"
    assert safe["ssl.key.password"] == "***"
    assert safe["bootstrap.servers"] == "b:9093"
    assert safe["sasl.mechanism"] == "PLAIN"
    assert "pw" not in json.dumps(safe)
    assert set(safe) == set(java)


def test_redacted_matches_key_names_case_insensitively():
    assert redacted({"SASL.PASSWORD": "pw", "sasl.username": "u"}) == {
        "SASL.PASSWORD": "***",
        "sasl.username": "u",
    }


def test_redacted_leaves_the_original_alone():
    config = {"sasl.password": "pw"}
    redacted(config)
    assert config == {"sasl.password": "pw"}


def test_redacted_hides_every_secret_form():
    config = {
        "bootstrap.servers": "b",
        "ssl.keystore.key": KEY,
        "ssl.key.pem": KEY,
        "sasl.oauthbearer.client.secret": "cs",
        "ssl.truststore.certificates": CA,
    }
    safe = redacted(config)
    assert KEY_BODY not in json.dumps(safe) and "cs" not in safe.values()
    assert safe["ssl.truststore.certificates"] == CA  # a CA is public


def test_scrub_removes_secrets_and_their_pem_lines_from_a_message():
    config = {"sasl.password": "hunter22", "ssl.key.pem": KEY, "bootstrap.servers": "b"}
    text = f"failed with hunter22 and line {KEY_BODY}"
    assert scrub(text, config) == "failed with *** and line ***"


@pytest.mark.parametrize(
    ("extra", "login", "password", "secret"),
    [
        (
            {
                "security_protocol": "SASL_SSL",
                "sasl_mechanism": "OAUTHBEARER",
                "oauth_token_endpoint": "https://idp.example.com/oauth2/token",
                "oauth_client_id": "kafkalake",
                "oauth_client_secret": "cs-0123",
                "oauth_scope": "kafka",
            },
            None,
            None,
            "cs-0123",
        ),
        ({"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512"}, "lander", "pw-012", "pw-012"),
    ],
)
def test_the_masked_values_are_the_secrets_not_the_login_or_scope(extra, login, password, secret):
    # Masked, "kafka" (the OAuth scope in docs/security.md) would become *** everywhere in the task log.
    config = librdkafka_config("kafka_default", "b", 9093, extra, login=login, password=password)
    java = java_client_config(config)
    masked = secret_values(java)
    assert secret in masked and java["sasl.jaas.config"] in masked
    assert not {"kafka", "kafkalake", "lander"} & set(masked)
