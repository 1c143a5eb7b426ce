"""The object-store connection as the tasks and jobs get it: masked, in a file the job deletes."""

from __future__ import annotations

import json
import os
import stat
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from kafkalake.airflow.connections import storage_settings_file
from kafkalake.config.topic import TopicConfig
from kafkalake.core.errors import BadConfigError
from kafkalake.lake import store_settings

SECRET = "canary-secret-7c1e"


@pytest.fixture
def lake_s3(monkeypatch):
    connection = {
        "conn_type": "aws",
        "login": "AKIA1",
        "password": SECRET,
        "extra": {"endpoint_url": "http://127.0.0.1:9", "region_name": "us-east-1"},
    }
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_S3", json.dumps(connection))
    yield
    store_settings.use(store_settings.StorageSettings())


def topic(path: str, conn_id: str | None = "lake_s3") -> TopicConfig:
    return TopicConfig(name="orders", freshness_sla=timedelta(hours=1), path=path, storage_conn_id=conn_id)


def test_the_job_gets_the_settings_in_a_private_file_gone_after_the_block(lake_s3):
    with storage_settings_file(topic("s3a://bucket/raw/orders")) as env:
        path = Path(env[store_settings.ENV_STORAGE_CONFIG_FILE])
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert store_settings.StorageSettings.from_json(path.read_text(), str(path)).secret_key == SECRET
        # The task's own reads (pre-flight, care due) use them too.
        assert store_settings.current().secret_key == SECRET
    assert not path.exists() and not path.parent.exists()
    assert SECRET not in " ".join(env.values())


def test_local_tables_and_settings_from_the_environment_hand_over_nothing(lake_s3):
    with storage_settings_file(topic("/data/orders")) as env:
        assert env == {}
    with storage_settings_file(topic("s3a://bucket/raw/orders", conn_id=None)) as env:
        assert env == {}
    assert store_settings.current() == store_settings.StorageSettings()


def test_a_connection_with_half_a_key_pair_is_bad_config_naming_topic_and_connection(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_S3", json.dumps({"conn_type": "aws", "login": "AKIA1"}))
    with pytest.raises(BadConfigError, match="topic 'orders': connection 'lake_s3'"):
        with storage_settings_file(topic("s3a://bucket/raw/orders")):
            pass
    assert os.environ.get(store_settings.ENV_STORAGE_CONFIG_FILE) is None


def registry_hand_over(
    monkeypatch: pytest.MonkeyPatch, connection: dict[str, object]
) -> tuple[dict[str, str], Any]:
    """The environment and the registry settings the job of an avro topic gets from ``connection``,
    read from the file while it exists (0600), which is gone after the block."""
    from dataclasses import replace

    from kafkalake.airflow.connections import registry_settings_file
    from kafkalake.kafka import schema_registry

    monkeypatch.setenv("AIRFLOW_CONN_SCHEMAS", json.dumps(connection))
    avro = replace(topic("/data/orders"), format="avro", registry_conn_id="schemas")
    with registry_settings_file(avro) as env:
        path = Path(env[schema_registry.ENV_REGISTRY_CONFIG_FILE])
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        settings = schema_registry.load_file(path, remove=False)
    assert not path.exists() and not path.parent.exists()
    return env, settings


def test_the_registry_connection_reaches_the_job_in_a_private_file_only(monkeypatch):
    from kafkalake.airflow.connections import registry_settings_file

    host = "http://127.0.0.1:8081/apis/ccompat/v7"
    connection = {"conn_type": "http", "host": host, "login": "u", "password": SECRET}
    env, settings = registry_hand_over(monkeypatch, connection)
    assert (settings.url, settings.username, settings.password) == (host, "u", SECRET)
    assert SECRET not in " ".join(env.values())
    with registry_settings_file(topic("/data/orders")) as env:
        assert env == {}


def test_the_registry_s_ca_and_client_key_reach_the_job_in_the_private_file_only(monkeypatch, tmp_path):
    from kafkalake.dev.secured_broker import PIPELINE_USER, make_pki
    from kafkalake.kafka import schema_registry

    pki = make_pki(tmp_path / "pki", [PIPELINE_USER])
    certificate, key = pki.client(PIPELINE_USER).pem()
    extra = {"ssl_ca_pem": pki.ca.read_text(), "ssl_certificate_pem": certificate, "ssl_key_pem": key}
    connection = {"conn_type": "http", "host": "https://127.0.0.1:8443", "extra": extra}
    env, settings = registry_hand_over(monkeypatch, connection)
    assert (settings.ssl_ca_pem, settings.ssl_certificate_pem, settings.ssl_key_pem) == (
        pki.ca.read_text(),
        certificate,
        key,
    )
    assert schema_registry.ssl_context(settings) is not None
    assert "PRIVATE KEY" not in " ".join(env.values())
