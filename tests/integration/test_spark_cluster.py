"""The same DAG, its Spark jobs on a standalone cluster (spark://) instead of local[*]."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from kafkalake.config.catalog import load_catalog
from kafkalake.dev import local_airflow, producer
from kafkalake.dev.producer import Record

from .helpers import assert_exactly_once, read_rows
from .standalone_spark import StandaloneSpark

pytestmark = pytest.mark.integration

TOPIC = "it-cluster"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneSpark]:
    spark = StandaloneSpark(tmp_path_factory.mktemp("spark-standalone")).start()
    yield spark
    spark.stop()


def test_dag_runs_its_spark_jobs_on_a_standalone_cluster(airflow_env, kafka, catalog_file, lake, cluster):
    topic = load_catalog(catalog_file, lake).topic(TOPIC)
    producer.create_topic(kafka.bootstrap_servers, TOPIC, partitions=2)
    records = [Record(f"k{i}".encode(), f'{{"i": {i}}}'.encode()) for i in range(3_000)]
    producer.produce(kafka.bootstrap_servers, TOPIC, records)
    env = {
        **airflow_env,
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": cluster.master_url}),
    }

    run = local_airflow.test_dag(env, topic.dag_id, sync=False)

    assert run.task_states == {
        "check_new_offsets": "success",
        "ingest": "success",
        "refresh_schema": "success",
        "register_table": "success",
        "maintain_table": "skipped",  # not due: the table is new
    }
    assert f"--master {cluster.master_url}" in run.output
    finished = [app["name"] for app in cluster.state()["completedapps"]]
    # The schema refresh ran inside the ingest's application (one JVM per run); registration is a
    # job of its own on a topic's first runs only.
    assert sorted(name for name in finished if TOPIC in name) == [
        f"kafkalake-{job}-{TOPIC}" for job in ("ingest", "register")
    ], finished
    assert "done in the ingest job's Spark application (no JVM started)" in run.output
    rows = read_rows(Path(topic.path))
    assert len(rows) == 3_000
    assert_exactly_once(rows, TOPIC, kafka.bootstrap_servers)
