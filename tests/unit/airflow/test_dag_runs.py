"""Backfills and the guarded re-ingest (kafkalake.core.run_mode): a backfill run never ingests, a
confirmed manual run hands the re-ingest time to the job; and the pre-flight leaves an unreadable
checkpoint to the job, which rebuilds it."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from kafkalake.airflow import run_metrics_emit
from kafkalake.kafka import offsets as kafka_offsets

from .dag_helpers import (
    KAFKA_EXTRA,
    POLICY_IDS,
    POLICY_TOPICS,
    ParseGuard,
)

# ---------------------------------------------------------------------------------------------
# backfills and the guarded re-ingest (kafkalake.core.run_mode)


@pytest.mark.parametrize("expected", POLICY_TOPICS, ids=POLICY_IDS)
def test_every_dag_offers_the_reingest_params_off_by_default(policy_bag, expected):
    params = policy_bag.dags[expected.dag_id].params
    assert params["reingest_from"] is None
    assert params["confirm_reingest"] is False
    assert "ISO timestamp" in params.get_param("reingest_from").description


def test_a_backfill_run_skips_the_ingest_without_asking_kafka(caplog):
    from kafkalake.airflow.tasks import check_new_offsets

    guard = ParseGuard()
    with guard.watch(), caplog.at_level("INFO"):
        run = check_new_offsets(
            "payments",
            "/nonexistent/checkpoint",
            "no_such_connection",  # looked up, it would fail: a backfill run never gets that far
            dag_run=SimpleNamespace(run_type="backfill"),
            params={"reingest_from": "2026-01-01T00:00:00Z", "confirm_reingest": True},
        )

    assert run is False
    assert guard.lookups == [] and guard.network == []
    assert "backfill run: not ingesting" in caplog.text and "checkpoint-driven" in caplog.text


def test_the_pre_flight_runs_the_job_on_an_unreadable_checkpoint_instead_of_failing(monkeypatch, tmp_path):
    from kafkalake.airflow.tasks import check_new_offsets

    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "extra": KAFKA_EXTRA}))
    # Retention has deleted the first 10 offsets; the table read up to 100 of them.
    monkeypatch.setattr(kafka_offsets, "watermarks", lambda config, topic: {0: (10, 120)})
    checkpoint = tmp_path / "checkpoint"
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "commits").mkdir()
    (checkpoint / "offsets" / "0").write_text("")  # cut short by a power loss
    (checkpoint / "commits" / "0").write_text('v1\n{"nextBatchWatermarkMs":0}')

    # Read as nothing committed, the 10 deleted offsets were reported lost: offsets_expired, no retry.
    assert check_new_offsets("payments", str(checkpoint), "kafka_default") is True


def test_a_corrupt_checkpoint_is_left_to_the_job_which_rebuilds_it(monkeypatch, tmp_path, caplog):
    """The job reads a checkpoint it cannot parse as missing and rebuilds its position from the
    table (start_plan.checkpoint_facts); the pre-flight and the lag read before the job must not
    fail the run first, or no run ever gets to the rebuild."""
    from kafkalake.airflow import tasks

    checkpoint = tmp_path / "orders" / "_kafkalake" / "checkpoint"
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "commits").mkdir()
    (checkpoint / "offsets" / "0").write_text('v1\n{"batchWatermarkMs":0}\n{"orders":{"0":1')  # cut short
    (checkpoint / "commits" / "0").write_text('v1\n{"nextBatchWatermarkMs":0}')
    monkeypatch.setattr(tasks, "kafka_config_for", lambda conn_id: {})
    monkeypatch.setattr(kafka_offsets, "watermarks", lambda config, topic: {0: (0, 10)})

    with caplog.at_level("WARNING"):
        assert tasks.check_new_offsets("orders", str(checkpoint), "kafka_default") is True
    assert "cannot be read" in caplog.text
    topic = SimpleNamespace(
        name="orders", checkpoint_path=str(checkpoint), starting_offsets="earliest", is_family=False
    )
    assert run_metrics_emit.lag_now({}, topic) is None  # unknown: a metric never fails the run


def test_a_cleared_ingest_task_of_a_backfill_run_still_does_not_ingest(ingest_task):
    from airflow.sdk.exceptions import AirflowSkipException

    with pytest.raises(AirflowSkipException, match="backfill run: not ingesting"):
        ingest_task.execute(context={"dag_run": SimpleNamespace(run_type="backfill"), "params": {}})


def test_a_confirmed_manual_run_hands_the_reingest_time_to_the_job(monkeypatch, ingest_task):
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "extra": KAFKA_EXTRA}))
    seen: dict[str, Any] = {}
    monkeypatch.setattr(
        SparkSubmitOperator, "execute", lambda self, context: seen.update(args=list(self.application_args))
    )
    params = {"reingest_from": "2026-01-01T01:00:00+01:00", "confirm_reingest": True}

    ingest_task.execute(context={"dag_run": SimpleNamespace(run_type="manual"), "params": params})

    assert seen["args"] == ["--topic", "payments", "--reingest-from", "2026-01-01T00:00:00+00:00"]


@pytest.mark.parametrize("run_type", ["scheduled", "manual"])
def test_without_a_confirmed_reingest_the_job_gets_its_usual_arguments(monkeypatch, ingest_task, run_type):
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "extra": KAFKA_EXTRA}))
    seen: dict[str, Any] = {}
    monkeypatch.setattr(
        SparkSubmitOperator, "execute", lambda self, context: seen.update(args=list(self.application_args))
    )
    params = {"reingest_from": "2026-01-01T00:00:00Z" if run_type == "scheduled" else None}

    ingest_task.execute(context={"dag_run": SimpleNamespace(run_type=run_type), "params": params})

    assert seen["args"] == ["--topic", "payments"]
