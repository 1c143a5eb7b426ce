"""Kafka client settings: from an Airflow connection to librdkafka and to the Java client.

A connection's ``extra`` holds librdkafka settings (``bootstrap.servers``, ``security.protocol``,
``sasl.*``, ``ssl.*``), the convention of Airflow's Kafka provider. The pre-flight check uses them
as they are (confluent-kafka); Spark's Kafka source needs the Java client's names, so they are
mapped here. Secrets travel to spark-submit in a file only its owner can read, never on a command
line, in a log or in XCom.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from kafkalake.core.errors import KafkaConfigError

#: spark-submit's environment names the file; the file holds the settings.
ENV_CLIENT_CONFIG_FILE = "KAFKALAKE_KAFKA_CONFIG_FILE"

_SECRET_HINTS = ("password", "secret", "jaas", "key")
_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
# Consumer settings Spark's Kafka source manages itself and refuses at start-up; connections made
# for other consumers often carry them.
SPARK_MANAGED = {
    "auto.offset.reset",
    "enable.auto.commit",
    "key.deserializer",
    "value.deserializer",
    "interceptor.classes",
}
# librdkafka-only settings that have no Java equivalent or are handled below.
_NOT_FOR_JAVA = {
    "sasl.username",
    "sasl.password",
    "sasl.mechanisms",
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.key.password",
    "log_level",
    "enable.ssl.certificate.verification",
}


def librdkafka_config(
    conn_id: str, host: str | None, port: int | None, extra: Mapping[str, Any]
) -> dict[str, str]:
    """Client settings from a connection's parts; ``host:port`` stands in for bootstrap.servers."""
    config = {str(k): str(v) for k, v in extra.items()}
    if "bootstrap.servers" not in config:
        if not host:
            raise KafkaConfigError(
                f"connection {conn_id!r} names no broker: set extra 'bootstrap.servers' "
                '(e.g. {"bootstrap.servers": "broker:9092"}) or the connection\'s host and port'
            )
        config["bootstrap.servers"] = f"{host}:{port}" if port else host
    return config


def _jaas_quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def java_client_config(config: Mapping[str, str]) -> dict[str, str]:
    """Map librdkafka settings to the Java client's (what Spark's Kafka source takes)."""
    java = {k: v for k, v in config.items() if k not in _NOT_FOR_JAVA | SPARK_MANAGED}
    mechanism = config.get("sasl.mechanism") or config.get("sasl.mechanisms")
    if mechanism:
        java["sasl.mechanism"] = mechanism
    if "sasl.username" in config and "sasl.jaas.config" not in config:
        module = _LOGIN_MODULES.get((mechanism or "PLAIN").upper())
        if module is None:
            raise KafkaConfigError(
                f"sasl.mechanism {mechanism!r} with sasl.username: only {sorted(_LOGIN_MODULES)} map to "
                "the Java client; give 'sasl.jaas.config' yourself for other mechanisms"
            )
        java["sasl.jaas.config"] = (
            f"{module} required username={_jaas_quote(config['sasl.username'])} "
            f"password={_jaas_quote(config.get('sasl.password', ''))};"
        )
    if "ssl.ca.location" in config:
        java["ssl.truststore.type"] = "PEM"
        java["ssl.truststore.location"] = config["ssl.ca.location"]
    if "ssl.certificate.location" in config or "ssl.key.location" in config:
        raise KafkaConfigError(
            "client certificates (ssl.certificate.location / ssl.key.location) need a Java keystore: "
            "set 'ssl.keystore.location', 'ssl.keystore.type' and 'ssl.keystore.password' instead"
        )
    if config.get("enable.ssl.certificate.verification", "true").lower() == "false":
        java["ssl.endpoint.identification.algorithm"] = ""
    return java


def redacted(config: Mapping[str, str]) -> dict[str, str]:
    """A copy safe to log."""
    return {k: ("***" if any(h in k.lower() for h in _SECRET_HINTS) else v) for k, v in config.items()}


@contextlib.contextmanager
def config_file(config: Mapping[str, str]) -> Iterator[Path]:
    """Write settings to a private file for a child process; remove it when the block ends."""
    directory = Path(tempfile.mkdtemp(prefix="kafkalake-"))  # mkdtemp makes it 0700
    path = directory / "kafka-client.json"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump(dict(config), out)
        yield path
    finally:
        path.unlink(missing_ok=True)
        directory.rmdir()


def read_config_file(path: str | os.PathLike[str]) -> dict[str, str]:
    with open(path) as src:
        loaded = json.load(src)
    if not isinstance(loaded, dict) or "bootstrap.servers" not in loaded:
        raise KafkaConfigError(f"{path}: expected a JSON object with 'bootstrap.servers'")
    return {str(k): str(v) for k, v in loaded.items()}
