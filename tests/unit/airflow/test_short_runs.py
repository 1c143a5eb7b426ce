"""Which DAG runs start the driver with the quick compiler (IngestOperator._is_short)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from kafkalake.airflow.tasks import IngestOperator
from kafkalake.config.topic import TopicConfig
from kafkalake.core.run_mode import Mode, RunMode
from kafkalake.lake import care_due, parsed_backlog
from kafkalake.launch.spark_conf import SHORT_RUN_JAVA_OPTIONS, SHORT_RUN_RECORDS, for_run


@pytest.fixture
def ingest(tmp_path: Path) -> IngestOperator:
    path = str(tmp_path / "lake" / "orders")
    topic = TopicConfig(name="orders", freshness_sla=timedelta(hours=1), path=path)
    return IngestOperator(
        task_id="ingest",
        kafka_conn_id="kafka_default",
        topic=topic,
        catalog_file=tmp_path / "topics.yaml",
        lake_root=tmp_path / "lake",
    )


SCHEDULED = RunMode(Mode.INGEST)


def test_a_run_with_a_small_known_backlog_is_short(ingest):
    assert ingest._is_short(SCHEDULED, {0: 10, 1: 20})
    assert ingest._is_short(SCHEDULED, {0: SHORT_RUN_RECORDS // 2, 1: SHORT_RUN_RECORDS // 2})
    # Its driver's options end with the quick compiler's.
    options = for_run(ingest.conf or {}, True)["spark.driver.extraJavaOptions"]
    assert options.endswith(SHORT_RUN_JAVA_OPTIONS)


def test_a_large_or_unknown_backlog_or_a_reingest_is_long(ingest):
    assert not ingest._is_short(SCHEDULED, {0: SHORT_RUN_RECORDS, 1: 1})
    assert not ingest._is_short(SCHEDULED, None)  # Kafka did not answer
    reingest = RunMode(Mode.REINGEST, reingest_from=datetime(2026, 11, 1, tzinfo=UTC))
    assert not ingest._is_short(reingest, {0: 10})


def test_a_run_whose_parsed_side_catches_up_from_bronze_is_long(ingest):
    """The catch-up reads bronze's records too, however few Kafka holds."""
    backlog = parsed_backlog.Backlog({0: 5}, "2026-11-26T00:00:00+00:00", "table_state", "test")
    parsed_backlog.write(ingest.topic, backlog)
    assert not ingest._is_short(SCHEDULED, {0: 10})


def test_a_table_state_that_cannot_be_read_makes_a_long_run_not_a_failure(ingest, monkeypatch):
    def unreadable(_topic):
        raise OSError("the store did not answer")

    monkeypatch.setattr(care_due, "due_now", unreadable)
    assert not ingest._is_short(SCHEDULED, {0: 10})


def test_table_care_due_makes_a_long_run(ingest, monkeypatch):
    monkeypatch.setattr(care_due, "due_now", lambda _topic: (True, ["bronze: OPTIMIZE due"]))
    assert not ingest._is_short(SCHEDULED, {0: 10})
