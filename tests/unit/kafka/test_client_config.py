"""Kafka client settings: Airflow connection → librdkafka → Java client."""

from __future__ import annotations

import pytest

from kafkalake.core.errors import KafkaConfigError
from kafkalake.kafka.client_config import (
    java_client_config,
    librdkafka_config,
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


def test_line_breaks_in_a_secret_are_escaped_in_the_jaas_config():
    # Kafka's parser (StreamTokenizer) ends a quoted value at a line break, then fails naming the
    # rest of the password ("Value not specified for key 'Tail'"); escaped, it reads the value back
    # whole (checked against kafka-clients 4.2's JaasContext).
    password = 'hun"ter\\2\nTail\r\tX'
    java = java_client_config(
        {
            "bootstrap.servers": "b",
            "sasl.mechanisms": "PLAIN",
            "sasl.username": "u",
            "sasl.password": password,
        }
    )
    jaas = java["sasl.jaas.config"]
    assert "\n" not in jaas and "\r" not in jaas
    assert jaas == f'{PLAIN_MODULE} required username="u" password="hun\\"ter\\\\2\\nTail\\r\tX";'
    # Read back as Kafka reads it, the secret is the connection's, character for character.
    back = librdkafka_config("k", "b", 9093, {"security.protocol": "SASL_SSL", **java})
    assert back["sasl.password"] == password


@pytest.mark.parametrize(
    ("quoted", "value"),
    [
        ("a\\nb", "a\nb"),
        ("a\\tb\\rc", "a\tb\rc"),
        ('q\\"\\\\z', 'q"\\z'),
        ("\\101\\0\\477", "A\x00\x277"),
        ("\\x\\é", "xé"),
    ],
    ids=["newline", "tab and return", "quote and backslash", "octal", "any other character"],
)
def test_a_jaas_password_is_unescaped_as_kafka_reads_it(quoted, value):
    # java.io.StreamTokenizer's escapes, which Kafka's JaasConfig reads a quoted value with.
    config = librdkafka_config(
        "k",
        "b",
        9093,
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.jaas.config": f'{SCRAM_MODULE} required username="u" password="{quoted}";',
        },
    )
    assert config["sasl.password"] == value


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
def test_disabled_certificate_verification_is_refused_naming_the_setting(value):
    """The Java client cannot skip verification: mapping it to a hostname switch would be a lie."""
    with pytest.raises(KafkaConfigError) as excinfo:
        java_client_config({"bootstrap.servers": "b", "enable.ssl.certificate.verification": value})
    assert "'enable.ssl.certificate.verification'" in str(excinfo.value)
    assert "ssl_ca_pem" in str(excinfo.value)


def test_hostname_check_off_maps_to_both_clients():
    config = librdkafka_config("k", "b", 9093, {"security_protocol": "SSL", "ssl_check_hostname": False})
    assert config["ssl.endpoint.identification.algorithm"] == "none"
    assert java_client_config(config)["ssl.endpoint.identification.algorithm"] == ""
    on = librdkafka_config("k", "b", 9093, {"ssl_check_hostname": "true"})
    assert on["ssl.endpoint.identification.algorithm"] == "https"
    assert "ssl.endpoint.identification.algorithm" not in java_client_config(on)


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
# the documented connection form, per mechanism: both clients' settings

CA = "-----BEGIN CERTIFICATE-----\nQ0EgY2VydGlmaWNhdGUgYm9keQ==\n-----END CERTIFICATE-----\n"
CERT = "-----BEGIN CERTIFICATE-----\nY2xpZW50IGNlcnRpZmljYXRlIGJvZHk=\n-----END CERTIFICATE-----\n"
KEY_BODY = "cHJpdmF0ZSBrZXkgYm9keSB0aGF0IGlzIHNlY3JldCBhbmQgbG9uZw=="
KEY = f"-----BEGIN PRIVATE KEY-----\n{KEY_BODY}\n-----END PRIVATE KEY-----\n"


def test_scram_over_sasl_ssl_with_login_and_password_from_the_connection():
    config = librdkafka_config(
        "kafka_prod",
        "b1.example.com",
        9093,
        {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "ssl_ca_pem": CA},
        login="lander",
        password="pw",
    )
    assert config == {
        "bootstrap.servers": "b1.example.com:9093",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "lander",
        "sasl.password": "pw",
        "ssl.ca.pem": CA,
    }
    java = java_client_config(config)
    assert java == {
        "bootstrap.servers": "b1.example.com:9093",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": f'{SCRAM_MODULE} required username="lander" password="pw";',
        "ssl.truststore.type": "PEM",
        "ssl.truststore.certificates": CA,
    }


def test_sasl_plain_and_several_brokers():
    config = librdkafka_config(
        "k",
        None,
        None,
        {"bootstrap_servers": "b1:9093,b2:9093", "security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN"},
        login="u",
        password="p",
    )
    assert config["bootstrap.servers"] == "b1:9093,b2:9093"
    assert (
        java_client_config(config)["sasl.jaas.config"]
        == f'{PLAIN_MODULE} required username="u" password="p";'
    )


def test_login_without_a_mechanism_is_plain_for_both_clients():
    """librdkafka's default mechanism is GSSAPI, the Java client's PLAIN: both are told PLAIN."""
    config = librdkafka_config("k", "b", 9093, {"security_protocol": "SASL_SSL"}, login="u", password="p")
    assert config["sasl.mechanism"] == "PLAIN"
    assert java_client_config(config)["sasl.mechanism"] == "PLAIN"


@pytest.mark.parametrize("protocol", [None, "SSL", "PLAINTEXT"])
def test_credentials_without_a_sasl_protocol_are_refused(protocol):
    extra = {"sasl_mechanism": "SCRAM-SHA-256"} | ({"security_protocol": protocol} if protocol else {})
    with pytest.raises(KafkaConfigError) as excinfo:
        librdkafka_config("kafka_prod", "b", 9093, extra, login="u", password="secret-pw")
    assert "'kafka_prod'" in str(excinfo.value)
    assert "security_protocol" in str(excinfo.value)
    assert "secret-pw" not in str(excinfo.value)


def test_mutual_tls_from_pem_text():
    config = librdkafka_config(
        "k",
        "b",
        9094,
        {"security_protocol": "SSL", "ssl_ca_pem": CA, "ssl_certificate_pem": CERT, "ssl_key_pem": KEY},
    )
    assert config["ssl.certificate.pem"] == CERT
    assert config["ssl.key.pem"] == KEY
    java = java_client_config(config)
    assert java == {
        "bootstrap.servers": "b:9094",
        "security.protocol": "SSL",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.certificates": CA,
        "ssl.keystore.type": "PEM",
        "ssl.keystore.certificate.chain": CERT,
        "ssl.keystore.key": KEY,
    }


def test_mutual_tls_from_files_hands_java_their_text(tmp_path):
    (tmp_path / "ca.pem").write_text(CA)
    (tmp_path / "client.crt").write_text(CERT)
    (tmp_path / "client.key").write_text(KEY)
    config = librdkafka_config(
        "k",
        "b",
        9094,
        {
            "security_protocol": "SSL",
            "ssl_ca_location": str(tmp_path / "ca.pem"),
            "ssl_certificate_location": str(tmp_path / "client.crt"),
            "ssl_key_location": str(tmp_path / "client.key"),
            "ssl_key_password": "kpw",
        },
    )
    java = java_client_config(config)
    assert java["ssl.truststore.location"] == str(tmp_path / "ca.pem")
    assert java["ssl.keystore.certificate.chain"] == CERT
    assert java["ssl.keystore.key"] == KEY
    assert java["ssl.key.password"] == "kpw"
    assert "ssl.key.location" not in java and "ssl.certificate.location" not in java


def test_a_combined_pem_file_gives_java_only_the_key_block_as_key(tmp_path):
    (tmp_path / "both.pem").write_text(KEY + CERT)
    config = {
        "bootstrap.servers": "b",
        "ssl.certificate.location": str(tmp_path / "both.pem"),
        "ssl.key.location": str(tmp_path / "both.pem"),
    }
    java = java_client_config(config)
    assert java["ssl.keystore.key"] == KEY
    assert java["ssl.keystore.certificate.chain"] == CERT


def test_an_unreadable_key_file_is_a_config_error_naming_the_setting(tmp_path):
    config = {
        "bootstrap.servers": "b",
        "ssl.certificate.pem": CERT,
        "ssl.key.location": str(tmp_path / "missing.key"),
    }
    with pytest.raises(KafkaConfigError) as excinfo:
        java_client_config(config)
    assert "'ssl.key.location'" in str(excinfo.value)


@pytest.mark.parametrize("header", ["RSA PRIVATE KEY", "EC PRIVATE KEY"])
def test_a_pkcs1_key_is_refused_with_the_conversion_command(header):
    key = f"-----BEGIN {header}-----\n{KEY_BODY}\n-----END {header}-----\n"
    config = {"bootstrap.servers": "b", "ssl.certificate.pem": CERT, "ssl.key.pem": key}
    with pytest.raises(KafkaConfigError) as excinfo:
        java_client_config(config)
    message = str(excinfo.value)
    assert "'ssl.key.pem'" in message and "openssl pkcs8 -topk8" in message
    assert KEY_BODY not in message


@pytest.mark.parametrize(
    "extra", [{"ssl_certificate_pem": CERT}, {"ssl_key_pem": KEY}], ids=["cert only", "key only"]
)
def test_a_certificate_without_its_key_is_refused(extra):
    with pytest.raises(KafkaConfigError) as excinfo:
        librdkafka_config("k", "b", 9094, {"security_protocol": "SSL", **extra})
    assert "needs its key" in str(excinfo.value)
    assert KEY_BODY not in str(excinfo.value)


def test_oauthbearer_client_credentials_from_extra():
    config = librdkafka_config(
        "k",
        "b",
        9093,
        {
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": "OAUTHBEARER",
            "oauth_token_endpoint": "https://idp.example.com/oauth2/token",
            "oauth_client_id": "lander",
            "oauth_client_secret": "cs",
            "oauth_scope": "kafka",
        },
    )
    assert config == {
        "bootstrap.servers": "b:9093",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "OAUTHBEARER",
        "sasl.oauthbearer.method": "oidc",
        "sasl.oauthbearer.token.endpoint.url": "https://idp.example.com/oauth2/token",
        "sasl.oauthbearer.client.id": "lander",
        "sasl.oauthbearer.client.secret": "cs",
        "sasl.oauthbearer.scope": "kafka",
    }
    java = java_client_config(config)
    assert java == {
        "bootstrap.servers": "b:9093",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "OAUTHBEARER",
        "sasl.jaas.config": (
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
            'clientId="lander" clientSecret="cs" scope="kafka";'
        ),
        "sasl.login.callback.handler.class": (
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
        ),
        "sasl.oauthbearer.token.endpoint.url": "https://idp.example.com/oauth2/token",
    }


def test_oauthbearer_client_id_and_secret_from_login_and_password():
    config = librdkafka_config(
        "k",
        "b",
        9093,
        {"security_protocol": "SASL_SSL", "oauth_token_endpoint": "https://idp/token"},
        login="cid",
        password="csecret",
    )
    assert config["sasl.mechanism"] == "OAUTHBEARER"
    assert config["sasl.oauthbearer.client.id"] == "cid"
    assert config["sasl.oauthbearer.client.secret"] == "csecret"
    assert "sasl.username" not in config
    assert 'clientSecret="csecret"' in java_client_config(config)["sasl.jaas.config"]


def test_oauthbearer_extensions_become_jaas_options():
    config = {
        "bootstrap.servers": "b",
        "sasl.mechanism": "OAUTHBEARER",
        "sasl.oauthbearer.token.endpoint.url": "https://idp/token",
        "sasl.oauthbearer.client.id": "c",
        "sasl.oauthbearer.client.secret": "s",
        "sasl.oauthbearer.extensions": "logicalCluster=lkc-1,identityPoolId=pool-2",
    }
    jaas = java_client_config(config)["sasl.jaas.config"]
    assert 'extension_logicalCluster="lkc-1" extension_identityPoolId="pool-2";' in jaas


def test_oauthbearer_without_a_token_endpoint_is_refused_for_java():
    config = {"bootstrap.servers": "b", "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.client.id": "c"}
    with pytest.raises(KafkaConfigError) as excinfo:
        java_client_config(config)
    assert "oauth_token_endpoint" in str(excinfo.value)


# ---------------------------------------------------------------------------------------------
# Java client settings in a connection: translated for librdkafka, or refused


def test_a_scram_jaas_config_is_translated_to_username_and_password():
    config = librdkafka_config(
        "k",
        "b",
        9093,
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.jaas.config": f'{SCRAM_MODULE} required username="u" password="p\\"w";',
        },
    )
    assert "sasl.jaas.config" not in config
    assert (config["sasl.username"], config["sasl.password"]) == ("u", 'p"w')
    assert java_client_config(config)["sasl.jaas.config"] == (
        f'{SCRAM_MODULE} required username="u" password="p\\"w";'
    )


def test_an_unknown_login_module_is_refused_naming_the_setting_not_its_value():
    with pytest.raises(KafkaConfigError) as excinfo:
        librdkafka_config(
            "kafka_prod",
            "b",
            9093,
            {
                "security.protocol": "SASL_SSL",
                "sasl.jaas.config": 'com.example.Custom required token="t0ps3cret";',
            },
        )
    message = str(excinfo.value)
    assert "'sasl.jaas.config'" in message and "'kafka_prod'" in message
    assert "t0ps3cret" not in message


def test_a_pem_truststore_and_keystore_are_translated():
    config = librdkafka_config(
        "k",
        "b",
        9094,
        {
            "security.protocol": "SSL",
            "ssl.truststore.type": "PEM",
            "ssl.truststore.certificates": CA,
            "ssl.keystore.type": "PEM",
            "ssl.keystore.certificate.chain": CERT,
            "ssl.keystore.key": KEY,
        },
    )
    assert (config["ssl.ca.pem"], config["ssl.certificate.pem"], config["ssl.key.pem"]) == (CA, CERT, KEY)
    assert not any(k.startswith(("ssl.truststore", "ssl.keystore")) for k in config)


def test_a_pkcs12_keystore_is_kept_for_both_clients():
    config = librdkafka_config(
        "k",
        "b",
        9094,
        {
            "security.protocol": "SSL",
            "ssl_ca_location": "/ca.pem",
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": "/client.p12",
            "ssl.keystore.password": "kspw",
        },
    )
    assert config["ssl.keystore.location"] == "/client.p12"
    assert config["ssl.keystore.password"] == "kspw"
    java = java_client_config(config)
    assert java["ssl.keystore.type"] == "PKCS12"
    assert java["ssl.keystore.location"] == "/client.p12"
    assert java["ssl.keystore.password"] == "kspw"


@pytest.mark.parametrize(
    ("extra", "setting"),
    [
        ({"ssl.truststore.location": "/t.jks", "ssl.truststore.password": "x"}, "ssl.truststore.type"),
        ({"ssl.keystore.location": "/k.jks", "ssl.keystore.password": "x"}, "ssl.keystore.type"),
        ({"ssl.keymanager.algorithm": "PKIX"}, "ssl.keymanager.algorithm"),
    ],
)
def test_java_only_settings_librdkafka_cannot_take_are_refused(extra, setting):
    with pytest.raises(KafkaConfigError) as excinfo:
        librdkafka_config("kafka_prod", "b", 9094, {"security.protocol": "SSL", **extra})
    assert setting in str(excinfo.value)
    assert "'kafka_prod'" in str(excinfo.value)


def test_a_misspelt_documented_key_is_refused():
    with pytest.raises(KafkaConfigError) as excinfo:
        librdkafka_config("k", "b", 9093, {"security_protocl": "SSL"})
    assert "'security_protocl'" in str(excinfo.value)


def test_the_same_setting_twice_is_refused():
    with pytest.raises(KafkaConfigError) as excinfo:
        librdkafka_config("k", "b", 9093, {"security_protocol": "SSL", "security.protocol": "SASL_SSL"})
    assert "'security.protocol'" in str(excinfo.value)
