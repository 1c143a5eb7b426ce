"""Kafka client settings: Airflow connection → librdkafka → Java client, and the private config file."""

from __future__ import annotations

import json
import os
import stat

import pytest

from kafkalake.core.errors import KafkaConfigError
from kafkalake.kafka.client_config import (
    config_file,
    java_client_config,
    librdkafka_config,
    read_config_file,
    redacted,
)

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"

# ---------------------------------------------------------------------------------------------
# librdkafka_config


def test_bootstrap_servers_from_extra_wins_over_host_and_port():
    config = librdkafka_config("kafka_default", "ignored", 1234, {"bootstrap.servers": "b1:9092,b2:9092"})
    assert config == {"bootstrap.servers": "b1:9092,b2:9092"}


def test_host_and_port_stand_in_for_bootstrap_servers():
    config = librdkafka_config("kafka_default", "broker", 9092, {"security.protocol": "PLAINTEXT"})
    assert config == {"bootstrap.servers": "broker:9092", "security.protocol": "PLAINTEXT"}


def test_host_without_port():
    assert librdkafka_config("k", "broker:29092", None, {}) == {"bootstrap.servers": "broker:29092"}


def test_extra_values_become_strings():
    config = librdkafka_config("k", "broker", 9092, {"socket.timeout.ms": 1000, "enable.idempotence": True})
    assert config["socket.timeout.ms"] == "1000"
    assert all(isinstance(v, str) for v in config.values())


@pytest.mark.parametrize("host", [None, ""])
def test_no_broker_at_all_raises_naming_the_connection(host):
    with pytest.raises(KafkaConfigError) as excinfo:
        librdkafka_config("kafka_prod", host, 9092, {"security.protocol": "SSL"})
    assert "'kafka_prod'" in str(excinfo.value)
    assert "bootstrap.servers" in str(excinfo.value)


def test_extra_is_not_modified():
    extra = {"security.protocol": "PLAINTEXT"}
    librdkafka_config("k", "broker", 9092, extra)
    assert extra == {"security.protocol": "PLAINTEXT"}


# ---------------------------------------------------------------------------------------------
# java_client_config


def test_plain_settings_pass_through():
    config = {"bootstrap.servers": "b:9092", "security.protocol": "PLAINTEXT", "client.id": "x"}
    assert java_client_config(config) == config


def test_sasl_plain_becomes_a_jaas_config():
    java = java_client_config(
        {
            "bootstrap.servers": "b:9093",
            "security.protocol": "SASL_SSL",
            "sasl.mechanisms": "PLAIN",
            "sasl.username": "alice",
            "sasl.password": "s3cret",
        }
    )
    assert java == {
        "bootstrap.servers": "b:9093",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": f'{PLAIN_MODULE} required username="alice" password="s3cret";',
    }


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "SCRAM-SHA-256"])
def test_sasl_scram_uses_the_scram_login_module(mechanism):
    java = java_client_config(
        {
            "bootstrap.servers": "b:9093",
            "sasl.mechanism": mechanism,
            "sasl.username": "u",
            "sasl.password": "p",
        }
    )
    assert java["sasl.mechanism"] == mechanism
    assert java["sasl.jaas.config"] == f'{SCRAM_MODULE} required username="u" password="p";'


def test_username_without_mechanism_defaults_to_plain():
    java = java_client_config({"bootstrap.servers": "b", "sasl.username": "u", "sasl.password": "p"})
    assert java["sasl.jaas.config"].startswith(PLAIN_MODULE + " required ")
    assert "sasl.mechanism" not in java


def test_quotes_and_backslashes_are_escaped_in_the_jaas_config():
    java = java_client_config(
        {
            "bootstrap.servers": "b",
            "sasl.mechanisms": "PLAIN",
            "sasl.username": 'a"b',
            "sasl.password": 'p\\"q',
        }
    )
    assert java["sasl.jaas.config"] == f'{PLAIN_MODULE} required username="a\\"b" password="p\\\\\\"q";'


def test_given_jaas_config_is_kept_as_is():
    jaas = 'org.example.MyLoginModule required token="t";'
    java = java_client_config(
        {
            "bootstrap.servers": "b",
            "sasl.mechanism": "OAUTHBEARER",
            "sasl.username": "u",
            "sasl.jaas.config": jaas,
        }
    )
    assert java["sasl.jaas.config"] == jaas
    assert "sasl.username" not in java


def test_username_with_an_unmappable_mechanism_is_rejected():
    with pytest.raises(KafkaConfigError) as excinfo:
        java_client_config({"bootstrap.servers": "b", "sasl.mechanisms": "GSSAPI", "sasl.username": "u"})
    assert "'GSSAPI'" in str(excinfo.value)
    assert "sasl.jaas.config" in str(excinfo.value)


def test_ca_location_becomes_a_pem_truststore():
    java = java_client_config(
        {"bootstrap.servers": "b", "security.protocol": "SSL", "ssl.ca.location": "/etc/kafka/ca.pem"}
    )
    assert java["ssl.truststore.type"] == "PEM"
    assert java["ssl.truststore.location"] == "/etc/kafka/ca.pem"
    assert "ssl.ca.location" not in java


def test_librdkafka_only_keys_are_dropped():
    java = java_client_config(
        {
            "bootstrap.servers": "b",
            "sasl.mechanisms": "PLAIN",
            "sasl.username": "u",
            "sasl.password": "p",
            "ssl.ca.location": "/ca.pem",
            "log_level": "7",
            "enable.ssl.certificate.verification": "true",
        }
    )
    for key in ("sasl.username", "sasl.password", "sasl.mechanisms", "ssl.ca.location", "log_level"):
        assert key not in java
    assert "enable.ssl.certificate.verification" not in java
    assert "ssl.endpoint.identification.algorithm" not in java


@pytest.mark.parametrize("value", ["false", "False", "FALSE"])
def test_disabled_certificate_verification_turns_off_hostname_checks(value):
    java = java_client_config({"bootstrap.servers": "b", "enable.ssl.certificate.verification": value})
    assert java["ssl.endpoint.identification.algorithm"] == ""


@pytest.mark.parametrize("key", ["ssl.certificate.location", "ssl.key.location"])
def test_client_certificates_are_rejected_with_what_to_use_instead(key):
    with pytest.raises(KafkaConfigError) as excinfo:
        java_client_config({"bootstrap.servers": "b", key: "/client.pem"})
    message = str(excinfo.value)
    assert key in message
    assert "ssl.keystore.location" in message


def test_java_config_does_not_modify_its_input():
    config = {
        "bootstrap.servers": "b",
        "sasl.mechanisms": "PLAIN",
        "sasl.username": "u",
        "sasl.password": "p",
    }
    before = dict(config)
    java_client_config(config)
    assert config == before


# ---------------------------------------------------------------------------------------------
# redacted


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


# ---------------------------------------------------------------------------------------------
# config_file / read_config_file


def test_config_file_is_private_and_removed_after_the_block():
    settings = {"bootstrap.servers": "b:9093", "sasl.jaas.config": "secret"}
    with config_file(settings) as path:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
        assert path.parent.name.startswith("kafkalake-")
        assert read_config_file(path) == settings
        assert read_config_file(str(path)) == settings
    assert not path.exists()
    assert not path.parent.exists()


def test_config_file_is_removed_when_the_block_raises():
    with pytest.raises(RuntimeError), config_file({"bootstrap.servers": "b"}) as path:
        raise RuntimeError("spark-submit failed")
    assert not path.exists()
    assert not path.parent.exists()


def test_each_config_file_gets_its_own_folder():
    with config_file({"bootstrap.servers": "a"}) as first, config_file({"bootstrap.servers": "b"}) as second:
        assert first.parent != second.parent
        assert read_config_file(first) == {"bootstrap.servers": "a"}
        assert read_config_file(second) == {"bootstrap.servers": "b"}


def test_read_config_file_turns_values_into_strings(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"bootstrap.servers": "b", "request.timeout.ms": 30000}))
    assert read_config_file(path) == {"bootstrap.servers": "b", "request.timeout.ms": "30000"}


@pytest.mark.parametrize(
    "content", [{"security.protocol": "SSL"}, ["bootstrap.servers"], "bootstrap.servers"]
)
def test_read_config_file_requires_bootstrap_servers(tmp_path, content):
    path = tmp_path / "c.json"
    path.write_text(json.dumps(content))
    with pytest.raises(KafkaConfigError) as excinfo:
        read_config_file(path)
    assert str(path) in str(excinfo.value)
    assert "bootstrap.servers" in str(excinfo.value)
