"""The tasks after the ingest: table care skipped without a JVM when nothing is due, and the
follow-up tasks reporting what the ingest job did without starting a JVM of their own."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from kafkalake.launch import submit

from .dag_helpers import (
    FOUR_TOPICS,
    parse_dags,
    set_catalog,
)

# table maintenance: skipped without a JVM when nothing is due


@pytest.fixture
def maintain_task(monkeypatch, tmp_path) -> Any:
    set_catalog(monkeypatch, FOUR_TOPICS, tmp_path / "lake", strict=True)
    return parse_dags().dags["ingest_payments"].get_task("maintain_table")


def _record_submits(monkeypatch) -> list[str]:
    submitted: list[str] = []
    monkeypatch.setattr(SparkSubmitOperator, "execute", lambda self, context: submitted.append(self.task_id))
    monkeypatch.setattr(submit, "jar_files", lambda conf, **_: [])
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[1]"}))
    return submitted


def test_maintenance_is_skipped_without_spark_when_the_table_is_new(monkeypatch, maintain_task):
    import pyarrow as pa
    from airflow.sdk.exceptions import AirflowSkipException
    from deltalake import write_deltalake

    submitted = _record_submits(monkeypatch)
    with pytest.raises(AirflowSkipException, match="no table maintenance due"):
        maintain_task.execute(context={})  # no table yet
    write_deltalake(maintain_task.topic.path, pa.table({"offset": [1, 2]}))
    with pytest.raises(AirflowSkipException, match="no table maintenance due"):
        maintain_task.execute(context={})  # created a moment ago: OPTIMIZE is due in a day
    assert submitted == []


def test_maintenance_submits_its_job_when_a_property_differs(monkeypatch, tmp_path):
    import pyarrow as pa
    from deltalake import write_deltalake

    catalog = tmp_path / "topics.yaml"
    catalog.write_text(
        "topics:\n  - name: payments\n    freshness_sla: 1h\n"
        "    maintenance: {properties: {delta.logRetentionDuration: 'interval 30 days'}}\n"
    )
    set_catalog(monkeypatch, catalog, tmp_path / "lake", strict=True)
    task = parse_dags().dags["ingest_payments"].get_task("maintain_table")
    submitted = _record_submits(monkeypatch)
    write_deltalake(task.topic.path, pa.table({"offset": [1]}))

    task.execute(context={})

    assert submitted == ["maintain_table"]
    assert Path(task.application).name == "maintain_table.py"


# one JVM per DAG run: the follow-up tasks report what the ingest job did, and start no JVM

FOLLOW_UP_CATALOG = "topics:\n  - name: payments\n    freshness_sla: 15m\n    parsed: {enabled: true}\n"


class FakeTI:
    """What the follow-up tasks read of their task instance: the try number and the ingest's XCom."""

    def __init__(self, try_number: int = 1, follow_ups: Any = None) -> None:
        self.try_number = try_number
        self.follow_ups = follow_ups
        self.pulled: list[tuple[str, str]] = []

    def xcom_pull(self, task_ids: str, key: str) -> Any:
        self.pulled.append((task_ids, key))
        return self.follow_ups


@pytest.fixture
def follow_up_dag(monkeypatch, tmp_path) -> Any:
    catalog = tmp_path / "topics.yaml"
    catalog.write_text(FOLLOW_UP_CATALOG)
    set_catalog(monkeypatch, catalog, tmp_path / "lake", strict=True)
    return parse_dags().dags["ingest_payments"]


def test_refresh_schema_reports_what_the_ingest_job_did_and_starts_no_jvm(monkeypatch, follow_up_dag, caplog):
    submitted = _record_submits(monkeypatch)
    task = follow_up_dag.get_task("refresh_schema")
    # The task's own logger goes to Airflow's task log; a plain one lets caplog read the report.
    monkeypatch.setattr(type(task), "log", property(lambda self: logging.getLogger("follow-up-test")))
    ti = FakeTI(follow_ups={"refresh_schema": "topic payments: 12 values sampled; schema unchanged"})
    with caplog.at_level("INFO", logger="follow-up-test"):
        task.execute(context={"ti": ti})
    assert submitted == []
    assert ti.pulled == [("ingest", "follow_ups")]
    assert "(no JVM started): topic payments: 12 values sampled; schema unchanged" in caplog.text


@pytest.mark.parametrize(
    ("try_number", "follow_ups"),
    [
        (1, None),  # an ingest that pushed nothing (a re-ingest run, an older job)
        (1, {}),  # the refresh failed inside the ingest job
        (1, {"register_table": "x"}),  # the ingest did other work, not this
        (2, {"refresh_schema": "done"}),  # a retry, or a task cleared by hand: do the work
    ],
)
def test_refresh_schema_runs_its_own_job_when_the_ingest_did_not_or_on_a_retry(
    monkeypatch, follow_up_dag, try_number, follow_ups
):
    submitted = _record_submits(monkeypatch)
    follow_up_dag.get_task("refresh_schema").execute(context={"ti": FakeTI(try_number, follow_ups)})
    assert submitted == ["refresh_schema"]


def test_table_care_done_by_the_ingest_job_is_reported_with_no_jvm_and_no_due_check(
    monkeypatch, follow_up_dag, caplog
):
    submitted = _record_submits(monkeypatch)
    task = follow_up_dag.get_task("maintain_table")
    monkeypatch.setattr(type(task), "log", property(lambda self: logging.getLogger("follow-up-test")))
    # The table does not even exist here: the due check would skip; the report comes from the XCom.
    ti = FakeTI(follow_ups={"maintain_table": "bronze.payments: 5 files -> 1 file, OPTIMIZE (bin-packing)"})
    with caplog.at_level("INFO", logger="follow-up-test"):
        task.execute(context={"ti": ti})
    assert submitted == []
    assert "(no JVM started): bronze.payments: 5 files -> 1 file" in caplog.text


@pytest.mark.parametrize(
    ("try_number", "follow_ups"),
    [
        (1, None),  # a backfill or an idle run: the ingest did not run
        (1, {"refresh_schema": "done"}),  # care was not due then, or failed in the ingest job
        (2, {"maintain_table": "done"}),  # a retry, or cleared by hand: do it (when due)
    ],
)
def test_table_care_not_done_by_the_ingest_is_judged_here_as_before(
    monkeypatch, follow_up_dag, try_number, follow_ups
):
    from airflow.sdk.exceptions import AirflowSkipException

    submitted = _record_submits(monkeypatch)
    with pytest.raises(AirflowSkipException, match="no table maintenance due"):
        follow_up_dag.get_task("maintain_table").execute(context={"ti": FakeTI(try_number, follow_ups)})
    assert submitted == []


def test_register_table_starts_no_jvm_only_when_every_existing_table_is_recorded(monkeypatch, follow_up_dag):
    import pyarrow as pa
    from deltalake import write_deltalake

    from kafkalake.config.tables import topic_tables
    from kafkalake.lake import registry

    submitted = _record_submits(monkeypatch)
    task = follow_up_dag.get_task("register_table")
    records = registry.registry_dir(Path(task.lake_root))
    bronze, parsed = topic_tables(task.topic)[:2]

    task.execute(context={"ti": FakeTI()})  # no table yet: nothing to register
    assert submitted == []

    write_deltalake(bronze.location, pa.table({"offset": [1]}))
    task.execute(context={"ti": FakeTI()})  # bronze exists, never registered
    assert submitted == ["register_table"]

    registry.record(records, bronze)
    task.execute(context={"ti": FakeTI()})  # recorded at its location; the parsed table is not there yet
    assert submitted == ["register_table"]

    write_deltalake(parsed.location, pa.table({"offset": [1]}))
    task.execute(context={"ti": FakeTI()})  # the parsed table appeared: register it
    assert submitted == ["register_table", "register_table"]

    registry.record(records, parsed)
    task.execute(context={"ti": FakeTI(try_number=2)})  # cleared by hand: always runs the job
    assert submitted == ["register_table"] * 3
    task.execute(context={"ti": FakeTI()})
    assert submitted == ["register_table"] * 3
