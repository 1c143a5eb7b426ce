"""Kafka client settings from an Airflow connection: the one lookup the tasks and the CLIs share.

The connection is read at run time only (never at DAG parse time); what its fields mean is decided
in :mod:`kafkalake.kafka.client_config`.
"""

from __future__ import annotations

from airflow.sdk import BaseHook
from airflow.sdk.log import mask_secret

from kafkalake.kafka import client_config


def kafka_config_for(conn_id: str) -> dict[str, str]:
    """librdkafka settings from an Airflow connection (the form of :mod:`kafkalake.kafka.client_config`).

    Every secret in them is registered with Airflow's secrets masker, so a value that reaches a
    task log by any path shows as ``***``. Airflow masks the connection's password by itself, but
    not extra keys such as ``ssl_key_pem``.
    """
    conn = BaseHook.get_connection(conn_id)
    config = client_config.librdkafka_config(
        conn_id, conn.host, conn.port, conn.extra_dejson, login=conn.login, password=conn.password
    )
    mask_secrets(config)
    return config


def mask_secrets(config: dict[str, str]) -> None:
    """Register the settings' secrets (Java's too: the JAAS line holds the password) with the masker."""
    for secret in client_config.secret_values(config):
        mask_secret(secret)
