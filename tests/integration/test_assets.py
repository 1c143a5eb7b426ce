"""What a topic's DAG leaves in Airflow's metadata DB besides its table: the Spark pool, asset events.

One small topic of its own, run through ``airflow dags test`` against the real broker, Spark and
Delta: a run that lands rows records one event of the table's asset, from its ``ingest`` task.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from kafkalake.airflow.pools import DEFAULT_SPARK_SLOTS, SPARK_POOL
from kafkalake.config.catalog import load_catalog
from kafkalake.config.topic import TopicConfig
from kafkalake.dev import local_airflow, producer
from kafkalake.dev.broker import LocalKafka
from kafkalake.dev.producer import Record

from .helpers import read_rows

pytestmark = pytest.mark.integration

TOPIC = "it-assets"


@pytest.fixture(scope="module")
def topic(catalog_file: Path, lake: Path, kafka: LocalKafka) -> TopicConfig:
    config = load_catalog(catalog_file, lake).topic(TOPIC)
    producer.create_topic(kafka.bootstrap_servers, TOPIC, partitions=1)
    return config


def test_init_db_creates_the_spark_pool_and_keeps_a_size_set_since(airflow_env):
    home = Path(airflow_env["AIRFLOW_HOME"])
    assert local_airflow.pool_slots(home, SPARK_POOL) == DEFAULT_SPARK_SLOTS == 2

    def set_slots(slots: int) -> None:
        with sqlite3.connect(home / "airflow.db") as db:
            db.execute("UPDATE slot_pool SET slots = ? WHERE pool = ?", (slots, SPARK_POOL))

    set_slots(3)  # as `airflow pools set kafkalake_spark 3 ...` would
    try:
        assert local_airflow.ensure_spark_pool(airflow_env) == 3
        assert local_airflow.pool_slots(home, SPARK_POOL) == 3
    finally:
        set_slots(DEFAULT_SPARK_SLOTS)


def test_a_run_that_lands_rows_records_one_event_of_the_tables_asset(airflow_env, kafka, topic):
    home = Path(airflow_env["AIRFLOW_HOME"])
    records = [Record(f"k{i}".encode(), f'{{"n": {i}}}'.encode(), 0) for i in range(20)]
    producer.produce(kafka.bootstrap_servers, TOPIC, records)
    assert local_airflow.asset_events(home, topic.qualified_table) == []

    # Registration is not under test here, and on a new topic it is a JVM of its own.
    run = local_airflow.test_dag(airflow_env, topic.dag_id, sync=False, mark_success="^register_table$")

    assert run.task_states["ingest"] == "success"
    assert len(read_rows(Path(topic.path))) == 20
    assert local_airflow.asset_events(home, topic.qualified_table) == [
        local_airflow.AssetEvent(
            asset_name="bronze.it_assets",
            asset_uri=f"file://{topic.path}",
            source_dag_id="ingest_it_assets",
            source_task_id="ingest",
            source_run_id=run.run_id,
        )
    ]
