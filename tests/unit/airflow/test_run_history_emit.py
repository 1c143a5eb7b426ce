"""The tasks write one history row per run, on success and on failure, and never fail a run for it."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pytest
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk.exceptions import AirflowException, AirflowSkipException
from deltalake import CommitProperties, DeltaTable, write_deltalake

from kafkalake.airflow import run_history_emit
from kafkalake.airflow.run_history_emit import failure_kind, read_ranges, recorded
from kafkalake.config.topic import TopicConfig
from kafkalake.core.errors import BrokerUnreachableError, JobKilledError, OffsetsExpiredError
from kafkalake.core.run_metrics import JobMetrics, idle_metrics
from kafkalake.lake import run_history
from kafkalake.lake.table_position import commit_metadata
from kafkalake.launch import submit

TI = SimpleNamespace(dag_id="ingest_orders", run_id="manual__1", task_id="ingest", try_number=2)


def bronze(path: str) -> None:
    """A bronze table: the history is written only once it exists."""
    write_deltalake(path, pa.table({"offset": [0]}))


def batch(path: str, end: dict[int, int], rows: int) -> None:
    """A micro-batch's commit to bronze, with the offsets record the ingest's commits carry."""
    metadata = commit_metadata(end, batch=0, query="q")
    write_deltalake(
        path,
        pa.table({"offset": list(range(rows))}),
        mode="append",
        commit_properties=CommitProperties(custom_metadata={"userMetadata": metadata}),
    )


@pytest.fixture
def topic(tmp_path) -> TopicConfig:
    config = TopicConfig(name="orders", freshness_sla=timedelta(minutes=15), path=str(tmp_path / "orders"))
    bronze(config.path)
    return config


def test_a_run_that_fails_before_bronze_exists_is_recorded_beside_bronze_not_in_it(tmp_path):
    """A wrong password on day one is on-call's first question; and Delta (Spark) refuses to create
    a table in a folder that holds another Delta table, so the history stays out of bronze's."""
    config = TopicConfig(name="orders", freshness_sla=timedelta(minutes=15), path=str(tmp_path / "orders"))
    with pytest.raises(OffsetsExpiredError), recorded(config, "ingest", TI):
        raise OffsetsExpiredError("gone")
    assert not (tmp_path / "orders").exists()
    (row,) = run_history.read(config.history_path)
    assert (row.outcome, row.failure_kind) == ("failed", "offsets_expired")
    assert config.history_path == str(tmp_path / "_kafkalake_runs" / "orders")


def test_a_run_that_succeeds_is_one_row_with_what_the_job_landed(topic):
    job = JobMetrics(
        batches=2,
        rows=30,
        bytes=900,
        parsed_rows=28,
        dead_letters={"not_json": 2},
        newest_timestamp_ms=1_764_000_000_000,
        startup_seconds=1.0,
        processing_seconds=2.0,
        driver_peak_memory_bytes=500 * 2**20,
    )
    with recorded(topic, "ingest", TI) as run:
        run.set(jvm_count=1)
        run.job(job, 12.5)
    (row,) = run_history.read(topic.history_path)
    assert (row.topic, row.dag_id, row.run_id, row.task_id, row.try_number) == (
        "orders",
        "ingest_orders",
        "manual__1",
        "ingest",
        2,
    )
    assert (row.kind, row.outcome, row.failure_kind, row.sla_seconds) == ("ingest", "success", None, 900.0)
    assert (row.rows, row.bytes, row.parsed_rows, row.batches, row.dead_letters) == (
        30,
        900,
        28,
        2,
        {"not_json": 2},
    )
    assert (row.jvm_count, row.driver_peak_memory_bytes, row.duration_seconds) == (1, 500 * 2**20, 12.5)
    assert row.newest_timestamp == datetime.fromtimestamp(1_764_000_000, tz=UTC)
    assert row.data_age_seconds == pytest.approx((row.ended_at - row.newest_timestamp).total_seconds())


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (OffsetsExpiredError("gone"), "offsets_expired"),
        (BrokerUnreachableError("down"), "broker_unreachable"),
        (RuntimeError("?"), "unknown"),
    ],
    ids=lambda v: v if isinstance(v, str) else type(v).__name__,
)
def test_a_run_that_fails_is_one_row_with_the_kind_and_the_error_goes_on(topic, error, kind):
    with pytest.raises(type(error)), recorded(topic, "care", TI):
        raise error
    (row,) = run_history.read(topic.history_path)
    assert (row.kind, row.outcome, row.failure_kind) == ("care", "failed", kind)


def test_a_typed_cause_names_the_kind_of_a_wrapped_error():
    try:
        try:
            raise OffsetsExpiredError("gone")
        except OffsetsExpiredError as err:
            raise AirflowException("spark-submit failed") from err
    except AirflowException as wrapped:
        assert failure_kind(wrapped) == "offsets_expired"


def test_a_skipped_task_or_one_marked_skip_writes_nothing(topic):
    with pytest.raises(AirflowSkipException), recorded(topic, "care", TI):
        raise AirflowSkipException("nothing due")
    with recorded(topic, "refresh_schema", TI) as run:
        run.skip = True
    assert run_history.read(topic.history_path) == []


def test_an_idle_run_records_its_lag_and_the_age_of_the_newest_record(topic):
    newest_ms = round((datetime.now(UTC) - timedelta(minutes=3)).timestamp() * 1000)
    with recorded(topic, "idle", TI) as run:
        run.outcome = "idle"
        run.metrics(idle_metrics("orders", {0: 0, 1: 0}, newest_ms, datetime.now(UTC)))
    (row,) = run_history.read(topic.history_path)
    assert (row.outcome, row.rows, row.lag_records, row.lag_seconds) == ("idle", 0, 0, 0.0)
    assert row.data_age_seconds is not None and 179 < row.data_age_seconds < 240


def test_a_history_that_cannot_be_written_never_fails_the_run_nor_hides_its_error(topic, caplog):
    # A file where the history's folder would be.
    Path(topic.history_path).parent.mkdir(parents=True, exist_ok=True)
    Path(topic.history_path).write_text("not a folder")
    with recorded(topic, "ingest", TI):
        pass
    with pytest.raises(OffsetsExpiredError, match="gone"), recorded(topic, "ingest", TI):
        raise OffsetsExpiredError("gone")
    assert caplog.text.count("run history: this run's row was not written") == 2


def test_offsets_read_run_from_the_table_s_old_end_or_kafka_s_start_to_its_new_end():
    before = {"a": {0: 10, 1: 5}}
    after = {"a": {0: 25, 1: 5, 2: 4}, "b": {0: 3}}
    starts = {"a": {2: 1}, "b": {0: 0}}
    assert read_ranges(before, after, starts) == {"a": {0: (10, 25), 2: (1, 4)}, "b": {0: (0, 3)}}


def test_the_ingest_task_records_a_failed_job_with_its_kind(monkeypatch, ingest_task, tmp_path):
    line = "KAFKALAKE_FAILURE kind=offsets_expired [offsets_expired] topic 'payments': gone"

    def failing_submit(self, context):
        raise AirflowException(f"Cannot execute: spark-submit. Error code is: 65.\n{line}")

    monkeypatch.setattr(SparkSubmitOperator, "execute", failing_submit)
    monkeypatch.setattr(submit, "jar_files", lambda conf, **_: [])
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "host": "b:9092"}))
    bronze(ingest_task.topic.path)
    with pytest.raises(OffsetsExpiredError):
        ingest_task.execute(context={"ti": TI})
    (row,) = run_history.read(ingest_task.topic.history_path)
    assert (row.topic, row.kind, row.outcome, row.failure_kind, row.jvm_count) == (
        "payments",
        "ingest",
        "failed",
        "offsets_expired",
        1,
    )
    assert row.offsets_read == "{}" and row.rows == 0


def test_a_killed_job_s_row_holds_what_its_tables_received_from_their_delta_logs(
    monkeypatch, ingest_task, caplog
):
    """A job killed by a signal writes no metrics: the task, seeing spark-submit exit 137, writes
    the row from bronze's (and the parsed table's) Delta log: the rows and batches committed after
    the version the table had before the job, and the offsets it gained."""
    topic = ingest_task.topic
    batch(topic.path, {0: 2}, rows=2)  # a run before: not this one's

    def killed_submit(self, context):
        # Two micro-batches commit, table care rewrites the files, then the signal.
        batch(topic.path, {0: 5}, rows=3)
        batch(topic.path, {0: 9}, rows=4)
        DeltaTable(topic.path).optimize.compact()
        if topic.parsed.enabled:
            write_deltalake(topic.parsed_path, pa.table({"n": [1, 2, 3, 4, 5, 6]}), mode="append")
        raise AirflowException("Cannot execute: spark-submit. Error code is: 137.")

    monkeypatch.setattr(SparkSubmitOperator, "execute", killed_submit)
    monkeypatch.setattr(submit, "jar_files", lambda conf, **_: [])
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "host": "b:9092"}))
    with pytest.raises(JobKilledError, match="was killed"):
        ingest_task.execute(context={"ti": TI})
    (row,) = run_history.read(topic.history_path)
    assert (row.kind, row.outcome, row.failure_kind, row.jvm_count) == ("ingest", "failed", "job_killed", 1)
    assert (row.rows, row.batches, row.bytes, row.dead_letters) == (7, 2, 0, {})
    assert row.parsed_rows == (6 if topic.parsed.enabled else 0)
    assert json.loads(row.offsets_read) == {topic.name: {"0": [2, 9]}}
    assert "run history" not in caplog.text, "nothing failed to be recorded"


def test_a_replayed_batch_the_job_counts_again_is_not_in_the_rows_bronze_received(topic):
    """A retry replays the batch its killed try committed: Delta skips the write, the job counts
    its 3 rows anyway. The row holds what bronze's log says the run appended; the batches the job ran."""
    batch(topic.path, {0: 3}, rows=3)  # the killed try's last batch
    with recorded(topic, "ingest", TI) as run:
        run.track_offsets(topic, {})
        batch(topic.path, {0: 7}, rows=4)  # the retry's new batch
        job = JobMetrics(
            batches=2,
            rows=7,
            bytes=70,
            parsed_rows=0,
            dead_letters={},
            newest_timestamp_ms=None,
            startup_seconds=1.0,
            processing_seconds=2.0,
        )
        run.job(job, 3.0)
    (row,) = run_history.read(topic.history_path)
    assert (row.rows, row.batches, row.bytes) == (4, 2, 70)
    assert json.loads(row.offsets_read) == {"orders": {"0": [3, 7]}}


def test_care_compacts_a_history_of_many_appends_into_one_file(topic):
    for _ in range(5):
        with recorded(topic, "idle", TI) as run:
            run.outcome = "idle"
    assert run_history.care(topic.history_path, max_files=5) is None
    with recorded(topic, "idle", TI) as run:
        run.outcome = "idle"
    done = run_history.care(topic.history_path, max_files=5)
    assert done is not None and "6 files compacted" in done
    from deltalake import DeltaTable

    assert len(DeltaTable(topic.history_path).file_uris()) == 1
    assert len(run_history.read(topic.history_path)) == 6
    run_history_emit.care_for_history(topic)  # nothing to do now: no error
