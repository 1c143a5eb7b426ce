"""Kafka client settings from an Airflow connection: the one lookup the tasks and the CLIs share.

The connection is read at run time only (never at DAG parse time); what its fields mean is decided
in :mod:`kafkalake.kafka.client_config`.
"""

from __future__ import annotations

from airflow.sdk import BaseHook

from kafkalake.kafka import client_config


def kafka_config_for(conn_id: str) -> dict[str, str]:
    """librdkafka settings from an Airflow connection (extra = librdkafka settings)."""
    conn = BaseHook.get_connection(conn_id)
    return client_config.librdkafka_config(conn_id, conn.host, conn.port, conn.extra_dejson)
