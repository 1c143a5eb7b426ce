"""The replay DAG: manual, one run at a time, the parsed topics as a param, in the Spark pool."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from airflow.dag_processing.dagbag import DagBag
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk.definitions.retry_policy import RetryAction
from airflow.sdk.definitions.timetables.simple import NullTimetable

from kafkalake.airflow.dag_factory import REPLAY_DAG_ID, RETRIES, retry_policy
from kafkalake.airflow.pools import SPARK_POOL
from kafkalake.core.errors import (
    BadConfigError,
    CheckpointLockedError,
    IngestUnfinishedError,
)
from kafkalake.launch import submit

from .dag_helpers import (
    ParseGuard,
    parse_dags,
    set_catalog,
)

# ---------------------------------------------------------------------------------------------
# the replay DAG: one maintenance DAG, triggered by hand with the topic as a param

REPLAY_CATALOG = """\
topics:
  - name: payments
    freshness_sla: 15m
    spark_conf: {spark.sql.shuffle.partitions: "3"}
  - name: audit
    freshness_sla: 1h
    parsed: false
  - name: clicks
    freshness_sla: 1h
"""


@pytest.fixture
def replay_bag(monkeypatch, tmp_path) -> DagBag:
    catalog = tmp_path / "topics.yaml"
    catalog.write_text(REPLAY_CATALOG)
    set_catalog(monkeypatch, catalog, tmp_path / "lake", strict=True)
    bag = parse_dags()
    assert bag.import_errors == {}
    return bag


def test_replay_dag_is_manual_one_run_at_a_time_and_offers_only_parsed_topics(replay_bag):
    dag = replay_bag.dags[REPLAY_DAG_ID]
    assert isinstance(dag.timetable, NullTimetable)  # schedule=None: triggered by hand only
    assert dag.max_active_runs == 1
    assert dag.catchup is False
    assert not dag.deadline
    assert "kafkalake" in dag.tags
    params = dag.params.dump()
    assert params == {"topic": "clicks", "as_of_version": None, "as_of_timestamp": None}
    schema = dag.params.get_param("topic").schema
    assert schema["enum"] == ["clicks", "payments"]  # the bronze-only topic has nothing to replay
    assert dag.params.get_param("as_of_version").schema["minimum"] == 0
    doc = dag.doc_md
    for words in ("as of", "after", "one Delta commit", "never written", "checkpoint lock", "`RUNBOOK.md`"):
        assert words in doc, words


def test_replay_task_runs_the_replay_job_in_the_spark_pool_with_the_retry_policy(replay_bag):
    dag = replay_bag.dags[REPLAY_DAG_ID]
    assert dag.task_ids == ["replay"]
    task = dag.get_task("replay")
    assert isinstance(task, SparkSubmitOperator)
    assert (task.pool, task.pool_slots) == (SPARK_POOL, 1)
    assert task._conn_id == "spark_default"
    assert task.packages is None
    assert Path(task.application).name == "replay_topic.py"
    assert Path(task.application).is_file()
    assert task.retries == RETRIES
    assert task.retry_policy.serialize() == retry_policy().serialize()
    # A bad param or a half-written ingest fails at once; a running ingest is waited out.
    assert task.retry_policy.evaluate(BadConfigError("bad"), 1, 4).action is RetryAction.FAIL
    assert task.retry_policy.evaluate(IngestUnfinishedError("later"), 1, 4).action is RetryAction.FAIL
    assert task.retry_policy.evaluate(CheckpointLockedError("busy"), 1, 4).action is RetryAction.RETRY


@pytest.mark.parametrize(
    ("params", "args"),
    [
        ({"topic": "payments", "as_of_version": None, "as_of_timestamp": None}, []),
        ({"topic": "payments", "as_of_version": 7, "as_of_timestamp": ""}, ["--as-of-version", "7"]),
        (
            {"topic": "payments", "as_of_version": None, "as_of_timestamp": "2026-11-22T10:00:00Z"},
            ["--as-of-timestamp", "2026-11-22T10:00:00Z"],
        ),
    ],
)
def test_replay_task_submits_the_chosen_topic_with_its_spark_settings(monkeypatch, replay_bag, params, args):
    task = replay_bag.dags[REPLAY_DAG_ID].get_task("replay")
    monkeypatch.setattr(submit, "jar_files", lambda conf, **_: [])
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[1]"}))
    seen: dict[str, Any] = {}

    def submit_instead_of_running(self, context):
        seen["command"] = self._get_hook()._build_spark_submit_command(self.application)

    monkeypatch.setattr(SparkSubmitOperator, "execute", submit_instead_of_running)
    guard = ParseGuard()
    with guard.watch():
        task.execute(context={"params": params})

    command = seen["command"]
    assert command[command.index("--name") + 1] == "kafkalake-replay_topic-payments"
    assert "spark.sql.shuffle.partitions=3" in command  # the topic's own spark_conf
    job = command.index(task.application)
    assert command[job + 1 :] == ["--topic", "payments", *args]
    assert guard.queries == [] and guard.network == []


def test_a_catalog_without_parsed_topics_has_no_replay_dag(monkeypatch, tmp_path):
    catalog = tmp_path / "topics.yaml"
    catalog.write_text("topics:\n  - name: audit\n    freshness_sla: 1h\n    parsed: false\n")
    set_catalog(monkeypatch, catalog, tmp_path / "lake", strict=True)
    assert parse_dags().dag_ids == ["ingest_audit"]


def test_the_replay_task_has_an_execution_timeout(replay_bag):
    assert replay_bag.dags[REPLAY_DAG_ID].get_task("replay").execution_timeout == timedelta(hours=6)
