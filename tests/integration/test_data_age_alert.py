"""A data-age SLA miss from the pre-flight of a topic on the fixed interval (kafkalake.airflow.
data_age_alert), against the real broker and a table its ingest job landed.

Records produced with a CreateTime 2 hours old land in a topic whose SLA is 15m: every run keeps up,
so the run deadline never fires, yet the table is too old. The idle pre-flight (the task function
itself, no Airflow server) posts the alert to a real HTTP server through an Airflow connection,
once: the next idle run at the same table position posts nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from kafkalake.airflow.tasks import check_new_offsets
from kafkalake.cli import run_job
from kafkalake.config.catalog import load_catalog
from kafkalake.config.topic import TopicConfig
from kafkalake.dev import producer
from kafkalake.dev.broker import LocalKafka
from kafkalake.dev.producer import Record
from kafkalake.lake import run_history
from kafkalake.launch import jobs

from .airflow_server import WEBHOOK_PATH, WebhookReceiver
from .helpers import read_rows, run_to_end

pytestmark = pytest.mark.integration

TOPIC = "it-stale"
CATALOG = f"""\
topics:
  - name: {TOPIC}
    freshness_sla: 15m
    parsed: false
"""
KAFKA_CONN_ID = "it_stale_kafka"
HOOK_CONN_ID = "it_data_age_hook"
RECORDS = 5
AGE = timedelta(hours=2)


@pytest.fixture(scope="module")
def landed(tmp_path_factory: pytest.TempPathFactory, kafka: LocalKafka) -> tuple[TopicConfig, datetime]:
    """The topic's records, 2 hours old by their CreateTime, landed by a real ingest job; and the
    newest record's time."""
    root = tmp_path_factory.mktemp("stale")
    catalog, lake = root / "topics.yaml", root / "lake"
    catalog.write_text(CATALOG)
    topic = load_catalog(catalog, lake).topic(TOPIC)
    oldest_ms = round((datetime.now(UTC) - AGE).timestamp() * 1000)
    producer.create_topic(kafka.bootstrap_servers, TOPIC, partitions=1)
    producer.produce(
        kafka.bootstrap_servers,
        TOPIC,
        [
            Record(f"k{i}".encode(), json.dumps({"i": i}).encode(), 0, timestamp_ms=oldest_ms + i)
            for i in range(RECORDS)
        ],
    )
    with run_job.kafka_settings(kafka.bootstrap_servers, jobs.environment(catalog, lake)) as env:
        done = run_to_end("ingest_topic", TOPIC, catalog=catalog, lake=lake, env=env, short_run=True)
    assert done.returncode == 0, done.stdout[-5000:]
    rows = read_rows(Path(topic.path))
    assert len(rows) == RECORDS
    newest = max(r["kafka_timestamp"] for r in rows)
    assert newest == datetime.fromtimestamp((oldest_ms + RECORDS - 1) / 1000, tz=UTC)
    return topic, newest


@pytest.fixture
def webhook(monkeypatch: pytest.MonkeyPatch, kafka: LocalKafka) -> Iterator[WebhookReceiver]:
    """A real HTTP server behind an Airflow connection, and the broker's connection."""
    receiver = WebhookReceiver()
    monkeypatch.setenv(f"AIRFLOW_CONN_{HOOK_CONN_ID.upper()}", receiver.connection())
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{KAFKA_CONN_ID.upper()}",
        json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": kafka.bootstrap_servers}}),
    )
    yield receiver
    receiver.close()


def preflight(topic: TopicConfig) -> bool:
    """The DAG's pre-flight task function, with the arguments the DAG gives a fixed-interval topic."""
    return check_new_offsets(
        TOPIC,
        topic.checkpoint_path,
        KAFKA_CONN_ID,
        table_path=topic.path,
        sla_seconds=topic.freshness_sla.total_seconds(),
        alert_data_age=True,
        sla_webhook_conn_id=HOOK_CONN_ID,
    )


def test_an_idle_preflight_over_the_sla_posts_the_data_age_miss_once(landed, webhook):
    topic, newest = landed

    assert preflight(topic) is False  # nothing new in Kafka: an idle run
    [alert] = webhook.received
    body = alert["json"]
    assert alert["path"] == WEBHOOK_PATH
    assert (body["event"], body["topic"], body["table_path"], body["outcome"]) == (
        "kafkalake.data_age_miss",
        TOPIC,
        topic.path,
        "idle",
    )
    assert (body["sla_seconds"], body["lag_records"]) == (900.0, 0)
    assert datetime.fromisoformat(body["newest_timestamp"]) == newest
    assert AGE.total_seconds() <= body["data_age_seconds"] < (AGE + timedelta(minutes=15)).total_seconds()
    assert body["text"].startswith(f"data age SLA miss: table {topic.path} of Kafka topic {TOPIC} is 2h")
    assert "over its freshness SLA of 15m" in body["text"]

    # Nothing changed: the next idle run records its row and pages no one.
    assert preflight(topic) is False
    assert len(webhook.received) == 1
    runs = run_history.read(topic.history_path)
    assert [(r.kind, r.outcome, r.newest_timestamp) for r in runs] == [("idle", "idle", newest)] * 2
    assert all(r.data_age_seconds is not None and r.data_age_seconds > r.sla_seconds for r in runs)
