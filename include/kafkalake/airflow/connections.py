"""Kafka client and object-store settings from Airflow connections: the lookups tasks and CLIs share.

Connections are read at run time only (never at DAG parse time); what their fields mean is decided
in :mod:`kafkalake.kafka.client_config` and :mod:`kafkalake.lake.store_settings`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from typing import Any

from airflow.sdk import BaseHook
from airflow.sdk.log import mask_secret

from kafkalake.config.topic import TopicConfig
from kafkalake.core.errors import BadConfigError
from kafkalake.kafka import client_config, redaction, schema_registry
from kafkalake.lake import store_settings
from kafkalake.launch import handover


def kafka_config_for(conn_id: str) -> dict[str, str]:
    """librdkafka settings from an Airflow connection (the form of :mod:`kafkalake.kafka.client_config`).

    Every secret in them is registered with Airflow's secrets masker, so a value that reaches a
    task log by any path shows as ``***``. Airflow masks the connection's password by itself, but
    not extra keys such as ``ssl_key_pem``.
    """
    return _kafka_config(conn_id, BaseHook.get_connection(conn_id))


async def akafka_config_for(conn_id: str) -> dict[str, str]:
    """:func:`kafka_config_for` from async code (the triggerer's event loop)."""
    return _kafka_config(conn_id, await BaseHook.aget_connection(conn_id))


def _kafka_config(conn_id: str, conn: Any) -> dict[str, str]:
    config = client_config.librdkafka_config(
        conn_id, conn.host, conn.port, conn.extra_dejson, login=conn.login, password=conn.password
    )
    mask_secrets(config)
    return config


async def astorage_settings(
    topic_name: str, location: str, conn_id: str | None
) -> store_settings.StorageSettings:
    """The object-store settings of a table, from async code, without making them this process's
    own (the triggerer reads tables of several stores): pass them to delta-rs' reads."""
    if not (store_settings.is_object_store(location) and conn_id):
        return store_settings.current()
    return _storage_settings(topic_name, conn_id, await BaseHook.aget_connection(conn_id))


def use_storage(topic_name: str, location: str, conn_id: str | None) -> store_settings.StorageSettings:
    """The object-store settings of a topic whose tables are at ``location``, now in use here.

    Local tables need none; without ``conn_id`` they come from the worker's environment. The
    secret key and session token are registered with the secrets masker.
    """
    settings = storage_settings(topic_name, location, conn_id)
    store_settings.use(settings)
    return settings


def storage_settings(topic_name: str, location: str, conn_id: str | None) -> store_settings.StorageSettings:
    """The object-store settings of a topic whose tables are at ``location``, not put in use (see
    :func:`use_storage`); the secrets are registered with the secrets masker."""
    settings = store_settings.StorageSettings()
    if store_settings.is_object_store(location) and conn_id:
        settings = _storage_settings(topic_name, conn_id, BaseHook.get_connection(conn_id))
    return settings


def _storage_settings(topic_name: str, conn_id: str, conn: Any) -> store_settings.StorageSettings:
    """The settings of an ``aws`` connection, their secrets registered with the masker."""
    try:
        settings = store_settings.from_connection(conn_id, conn.login, conn.password, conn.extra_dejson)
    except ValueError as err:
        raise BadConfigError(f"topic {topic_name!r}: {err}") from None
    for secret in settings.secrets():
        mask_secret(secret)
    return settings


def use_topic_storage(topic: TopicConfig) -> store_settings.StorageSettings:
    return use_storage(topic.name, topic.path, topic.storage_conn_id)


@contextmanager
def storage_settings_file(topic: TopicConfig) -> Iterator[dict[str, str]]:
    """The environment a job of ``topic`` needs for its object-store settings, for a ``with`` block.

    The settings go in a private file the job deletes on read (secrets never on a command line);
    nothing for local tables or settings left to the environment.
    """
    settings = use_topic_storage(topic) if topic.on_object_store else store_settings.StorageSettings()
    fields = {k: v for k, v in asdict(settings).items() if v}
    if not fields:
        yield {}
        return
    with handover.config_file(fields, name="store_settings.json") as path:
        yield {store_settings.ENV_STORAGE_CONFIG_FILE: str(path)}


@contextmanager
def registry_settings_file(topic: TopicConfig) -> Iterator[dict[str, str]]:
    """The environment a job of ``topic`` needs for its schema registry, for a ``with`` block.

    For a topic in a registry format: its ``registry_conn_id`` connection in a private file the job
    deletes on read (the password and the client key never on a command line, masked in the task's
    log); nothing for other topics.
    """
    if not topic.uses_registry or topic.registry_conn_id is None:
        yield {}
        return
    conn = BaseHook.get_connection(topic.registry_conn_id)
    settings = schema_registry.from_connection(
        topic.registry_conn_id, conn.host, conn.port, conn.login, conn.password, conn.extra_dejson
    )
    for secret in settings.secrets():
        mask_secret(secret)
    fields = {k: v for k, v in asdict(settings).items() if v is not None}
    with handover.config_file(fields, name="registry_settings.json") as path:
        yield {schema_registry.ENV_REGISTRY_CONFIG_FILE: str(path)}


def mask_secrets(config: dict[str, str]) -> None:
    """Register the settings' secrets (Java's too: the JAAS line holds the password) with the masker."""
    for secret in redaction.secret_values(config):
        mask_secret(secret)
