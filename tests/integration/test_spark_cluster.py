"""The same DAG, its Spark jobs on a standalone cluster (spark://) instead of local[*].

The cluster authenticates and encrypts its RPC (standalone_spark): the jobs get its secret through
the properties file named by KAFKALAKE_SPARK_AUTH_FILE, and a client without it is turned away.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kafkalake.config.catalog import load_catalog
from kafkalake.dev import local_airflow, producer
from kafkalake.dev.producer import Record
from kafkalake.launch.spark_auth import ENV_SPARK_AUTH_FILE, SECRET_KEY, read_properties, write_auth_file
from kafkalake.launch.submit import spark_submit

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
        ENV_SPARK_AUTH_FILE: str(cluster.auth_file),
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
    assert f"--properties-file {cluster.auth_file}" in run.output
    assert "spark.network.crypto.enabled=true" in run.output
    secret = read_properties(cluster.auth_file.read_text())[SECRET_KEY]
    assert secret not in run.output
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


def test_a_client_without_the_cluster_s_secret_is_turned_away(cluster, tmp_path):
    app = tmp_path / "count_three.py"
    app.write_text(
        "from pyspark.sql import SparkSession\nSparkSession.builder.getOrCreate().range(3).count()\n"
    )
    wrong = tmp_path / "wrong.properties"
    write_auth_file(wrong, "not-the-cluster-s-secret")
    command = [spark_submit(), "--master", cluster.master_url, "--properties-file", str(wrong), str(app)]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}

    # The master drops the connection in the authentication handshake; the driver would try twice more
    # (20 s apart) before giving up, so it is stopped at its first refusal.
    seen: list[str] = []
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    ) as job:
        assert job.stdout is not None
        for line in job.stdout:
            seen.append(line)
            if "Exception while bootstrapping client" in line or "Failed to connect to master" in line:
                break
        job.kill()
        returncode = job.wait(timeout=60)

    assert returncode != 0, "".join(seen[-20:])
    assert any("Failed to connect to master" in line or "bootstrapping client" in line for line in seen)
    apps = cluster.state()
    assert "count_three.py" not in [a["name"] for a in apps["completedapps"] + apps["activeapps"]]
    # The same cluster takes a job with its own secret (the DAG above); this one never registered.
    assert cluster.state()["aliveworkers"] == 1
