"""Table care against real Spark and Delta: OPTIMIZE, VACUUM, properties, full-refresh protection.

Most tables are bronze-shaped: created by the in-process session as an ingest creates them, then
given one append commit (one file) per ingest run with delta-rs, which costs no Spark job (20 Spark
appends were ~8-17 CPU-s of the compaction test alone). The concurrency test runs a real ingest from
Kafka. Every check reads the result back with delta-rs, an independent reader.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from kafkalake.config.maintenance import MaintenanceConfig
from kafkalake.config.parsed import ParsedConfig
from kafkalake.config.tables import topic_tables
from kafkalake.config.topic import TopicConfig
from kafkalake.dev import producer
from kafkalake.dev.producer import Record
from kafkalake.lake.care_due import read_state
from kafkalake.spark.batch_writer import BatchWriter
from kafkalake.spark.stream import ensure_table, start_ingest
from kafkalake.spark.table_care import maintain

from .helpers import assert_exactly_once, make_topic, read_rows

pytestmark = pytest.mark.integration


def bronze_topic(path: Path, **maintenance: Any) -> TopicConfig:
    name = path.name.replace("_", "-")
    return TopicConfig(
        name=name,
        freshness_sla=timedelta(hours=6),
        table=path.name,
        path=str(path),
        maintenance=MaintenanceConfig(**maintenance),
    )


def batch(start: int, count: int, partition: int = 0) -> list[tuple[Any, ...]]:
    now = datetime.now(UTC)
    return [
        (
            f"k{i % 7}".encode(),
            f'{{"n": {i}}}'.encode(),
            [("h", bytes([i % 256]))],
            "care",
            partition,
            i,
            now,
            0,
            now,
        )
        for i in range(start, start + count)
    ]


#: kafkalake.spark.stream.bronze_schema() in Arrow's terms (an append that differs is refused).
BRONZE_ARROW = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("kafka_timestamp", pa.timestamp("us", tz="UTC")),
        ("kafka_timestamp_type", pa.int32()),
        ("ingested_at", pa.timestamp("us", tz="UTC")),
    ]
)


def append(topic: TopicConfig, rows: list[tuple[Any, ...]]) -> None:
    """One commit of ``rows`` in one file, as one ingest run's bronze write (delta-rs: no Spark job)."""
    columns = [list(column) for column in zip(*rows, strict=True)]
    columns[2] = [[{"key": k, "value": v} for k, v in headers] for headers in columns[2]]
    write_deltalake(topic.path, pa.table(columns, schema=BRONZE_ARROW), mode="append")


def landed(spark: Any, topic: TopicConfig, runs: int, per_run: int = 50) -> None:
    ensure_table(spark, topic)
    for run in range(runs):
        append(topic, batch(run * per_run, per_run))


def contents(path: str) -> list[tuple[Any, ...]]:
    rows = read_rows(Path(path))
    return sorted((r["partition"], r["offset"], r["key"], r["value"], str(r["headers"])) for r in rows)


def data_files(path: str) -> set[str]:
    return {p.name for p in Path(path).glob("*.parquet")}


def test_optimize_compacts_20_ingest_runs_and_keeps_every_row(spark, tmp_path):
    topic = bronze_topic(tmp_path / "care_optimize")
    landed(spark, topic, runs=20)
    before_rows = contents(topic.path)
    files_before = len(DeltaTable(topic.path).file_uris())
    assert files_before >= 20

    (report,) = maintain(spark, topic, force=True)

    assert report.before.files == files_before
    assert report.after.files <= files_before / 10
    assert report.before.bytes > 0 and report.after.bytes > 0
    assert "OPTIMIZE (bin-packing)" in report.actions
    text = str(report)
    assert f"Before: {files_before} files" in text and f"after: {report.after.files} files" in text
    assert len(DeltaTable(topic.path).file_uris()) == report.after.files
    assert contents(topic.path) == before_rows
    assert len(before_rows) == 20 * 50
    # The log now says when OPTIMIZE ran: the next due check needs no JVM.
    state = read_state(topic.path)
    assert state is not None and state.last_optimize is not None
    assert DeltaTable(topic.path).metadata().configuration["delta.appendOnly"] == "true"


def test_vacuum_retain_zero_removes_unreferenced_files_and_spares_kafkalake_dir(spark, tmp_path):
    topic = bronze_topic(
        tmp_path / "care_vacuum", vacuum_retain=timedelta(0), allow_vacuum_retain_below_7d=True
    )
    landed(spark, topic, runs=5)
    checkpoint = Path(topic.checkpoint_path)
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "offsets" / "0").write_text('v1\n{}\n{"care": {"0": 250}}\n')
    schemas = Path(topic.path) / "_kafkalake" / "schemas"
    schemas.mkdir(parents=True)
    (schemas / "v1.json").write_text('{"fields": []}')
    before_rows = contents(topic.path)
    old_files = data_files(topic.path)

    (report,) = maintain(spark, topic, force=True)

    assert "VACUUM RETAIN 0 HOURS" in report.actions
    current = {Path(u).name for u in DeltaTable(topic.path).file_uris()}
    # The 5 pre-OPTIMIZE files are unreferenced now, and gone; only current files remain.
    assert data_files(topic.path) == current
    assert not (old_files & current)
    assert (checkpoint / "offsets" / "0").read_text().endswith('{"care": {"0": 250}}\n')
    assert (schemas / "v1.json").read_text() == '{"fields": []}'
    assert contents(topic.path) == before_rows
    state = read_state(topic.path)
    assert state is not None and state.last_vacuum is not None


def test_vacuum_below_seven_days_is_refused_by_delta_without_the_opt_in(spark, tmp_path):
    """Why the opt-in matters: Delta's own guard refuses; the job lifts it only when opted in."""
    topic = bronze_topic(tmp_path / "care_guard")
    landed(spark, topic, runs=1)
    with pytest.raises(Exception, match=r"(?i)retention"):
        spark.sql(f"VACUUM delta.`{topic.path}` RETAIN 0 HOURS")


def test_optimize_while_an_ingest_run_writes_both_succeed_and_every_record_lands_once(spark, kafka, tmp_path):
    """The acceptance test: a real availableNow run (Kafka → bronze, parsed, dead letters; 300
    records a micro-batch) and OPTIMIZE + VACUUM of the same tables at the same time."""
    name = "it-care-concurrent"
    topic = make_topic(tmp_path, name, ParsedConfig(), max_offsets=300)
    producer.create_topic(kafka.bootstrap_servers, name, partitions=2)
    records = [
        Record(f"user-{i % 40}".encode(), b"{broken" if i % 50 == 7 else json.dumps({"seq": i}).encode())
        for i in range(3000)
    ]
    placed = producer.produce(kafka.bootstrap_servers, name, records)

    ensure_table(spark, topic)
    writer = BatchWriter(spark, topic)
    query = start_ingest(spark, topic, {"bootstrap.servers": kafka.bootstrap_servers}, writer)
    deadline = time.monotonic() + 300
    # OPTIMIZE starts once every table holds two micro-batches: 8 more are still to come.
    while not all(
        DeltaTable.is_deltatable(t.location) and DeltaTable(t.location).version() >= 2
        for t in topic_tables(topic)
    ):
        assert query.isActive and time.monotonic() < deadline, query.exception() or "ingest too slow"
        time.sleep(0.5)
    reports = maintain(spark, topic, force=True)
    query.awaitTermination(timeout=600)

    assert writer.failure is None and query.exception() is None
    assert [r.table for r in reports] == [t.name for t in topic_tables(topic)]
    assert all("OPTIMIZE (bin-packing)" in r.actions for r in reports)
    # Each table's OPTIMIZE committed and compacted (file counts before/after mean little here:
    # the stream keeps adding files while it runs).
    for table in topic_tables(topic):
        (optimize,) = [c for c in DeltaTable(table.location).history() if c["operation"] == "OPTIMIZE"]
        metrics = optimize["operationMetrics"]
        assert int(metrics["numRemovedFiles"]) > int(metrics["numAddedFiles"]) == 1, (table.name, metrics)
    # Concurrent for real: the stream committed to bronze both before and after OPTIMIZE did.
    history = sorted(DeltaTable(topic.path).history(), key=lambda c: c["version"])
    optimized = next(c["version"] for c in history if c["operation"] == "OPTIMIZE")
    writes = [c["version"] for c in history if c["operation"] == "WRITE"]
    assert min(writes) < optimized < max(writes), [(c["version"], c["operation"]) for c in history]
    assert writer.stats.batches == len(writes) >= 10

    # Every record once: in bronze, and in exactly one of the parsed and dead-letter tables.
    assert_exactly_once(read_rows(Path(topic.path)), name, kafka.bootstrap_servers)
    landed = Counter(
        (r["_kafka"]["partition"], r["_kafka"]["offset"]) for r in read_rows(Path(topic.parsed_path))
    )
    dead = read_rows(Path(topic.dead_letter_path))
    landed.update((r["partition"], r["offset"]) for r in dead)
    assert landed == Counter(placed)
    assert len(dead) == sum(r.value == b"{broken" for r in records) == 60


def test_properties_follow_the_catalog_and_zorder_names_a_missing_column(spark, tmp_path):
    wanted = {"delta.logRetentionDuration": "interval 30 days", "delta.autoOptimize.autoCompact": "true"}
    topic = bronze_topic(
        tmp_path / "care_props", properties=tuple(sorted(wanted.items())), zorder_by=("partition", "offset")
    )
    landed(spark, topic, runs=3)

    (report,) = maintain(spark, topic, force=True)

    config = DeltaTable(topic.path).metadata().configuration
    assert {k: config.get(k) for k in wanted} == wanted
    assert config["delta.appendOnly"] == "true"
    assert "OPTIMIZE ZORDER BY (partition, offset)" in report.actions

    from kafkalake.spark.table_care import LayoutError

    missing = bronze_topic(tmp_path / "care_props", zorder_by=("customer_id",))
    with pytest.raises(LayoutError, match=r"customer_id.*bronze\.care_props|bronze\.care_props.*customer_id"):
        maintain(spark, missing, force=True)


def test_maintenance_task_runs_its_spark_job_in_a_dag_run(airflow_env, catalog_file, lake):
    """``maintain_table`` through Airflow: due (1s cadence), so it submits the job, which reports.

    The tasks before it are marked successful instead of run, and the table is written here with
    delta-rs: the one JVM of this test is the maintenance job's.
    """
    import time

    import pyarrow as pa
    from deltalake import write_deltalake

    from kafkalake.config.catalog import load_catalog
    from kafkalake.dev import local_airflow

    topic = load_catalog(catalog_file, lake).topic("it-care")
    for run_number in range(4):
        write_deltalake(
            topic.path,
            pa.table({"offset": list(range(run_number * 50, run_number * 50 + 50))}),
            mode="append",
        )
    time.sleep(1)  # the 1s cadence has passed since the table's creation

    before = "check_new_offsets|ingest|refresh_schema|register_table"
    run = local_airflow.test_dag(airflow_env, topic.dag_id, sync=False, mark_success=before)
    seconds = local_airflow.task_seconds(Path(airflow_env["AIRFLOW_HOME"]), run, "maintain_table")
    print(f"maintain_table took {seconds:.0f}s")

    assert run.task_states["maintain_table"] == "success"
    assert "OPTIMIZE due" in run.output and "properties to set: delta.logRetentionDuration" in run.output
    assert "kafkalake maintenance report: bronze.it_care: set delta.logRetentionDuration" in run.output
    assert "OPTIMIZE (bin-packing)" in run.output and "Before: 4 files" in run.output
    config = DeltaTable(topic.path).metadata().configuration
    assert config["delta.logRetentionDuration"] == "interval 30 days"
    assert len(DeltaTable(topic.path).file_uris()) == 1
    assert len(read_rows(Path(topic.path))) == 4 * 50
    # The run history's care row: the files before and after, as the Delta log has them.
    from kafkalake.lake import run_history

    (care,) = run_history.read(topic.history_path)
    assert (care.kind, care.outcome, care.task_id, care.jvm_count) == ("care", "success", "maintain_table", 1)
    assert (care.files_before, care.files_after) == (4, 1)
    table_bytes = sum(DeltaTable(topic.path).get_add_actions(flatten=True).column("size_bytes").to_pylist())
    assert care.table_bytes_after == table_bytes and care.table_bytes_before is not None


def test_cluster_by_turns_on_liquid_clustering_and_keeps_every_row(spark, tmp_path):
    topic = bronze_topic(tmp_path / "care_cluster", cluster_by=("partition", "offset"))
    landed(spark, topic, runs=3)
    before_rows = contents(topic.path)

    (report,) = maintain(spark, topic, force=True)

    assert "OPTIMIZE (liquid clustering by partition, offset)" in report.actions
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{topic.path}`").first()
    assert list(detail["clusteringColumns"]) == ["partition", "offset"]
    assert contents(topic.path) == before_rows
    assert DeltaTable(topic.path).metadata().configuration["delta.appendOnly"] == "true"


def test_care_in_the_ingest_session_when_due_and_only_then(spark, tmp_path, capsys):
    """The ingest job's follow-up: due care is done in its warm session and summarised for the
    task to report; not due, nothing; failing, left to the task's own job (nothing half done)."""
    from kafkalake.spark.follow_ups import care_in_session

    due = bronze_topic(tmp_path / "care_followup", optimize_every=timedelta(seconds=1))
    landed(spark, due, runs=3)
    time.sleep(1)  # the 1s cadence has passed since the table's creation
    before = contents(due.path)

    summary = care_in_session(spark, due)

    assert summary is not None and "OPTIMIZE (bin-packing)" in summary and "Before: 3 files" in summary
    assert "kafkalake maintenance report: bronze.care_followup: OPTIMIZE" in capsys.readouterr().out
    assert len(DeltaTable(due.path).file_uris()) == 1
    assert contents(due.path) == before

    fresh = bronze_topic(tmp_path / "care_fresh")  # OPTIMIZE is due a day after creation
    landed(spark, fresh, runs=2)
    assert care_in_session(spark, fresh) is None
    assert len(DeltaTable(fresh.path).file_uris()) == 2

    broken = bronze_topic(
        tmp_path / "care_followup", optimize_every=timedelta(seconds=1), zorder_by=("customer_id",)
    )
    append(broken, batch(1_000, 10))
    version = DeltaTable(broken.path).version()
    time.sleep(1)
    assert care_in_session(spark, broken) is None  # its task then runs the job and fails bad_config
    assert DeltaTable(broken.path).version() == version


def test_vacuum_keeps_files_for_the_whole_vacuum_retain_not_delta_s_default_7_days(spark, tmp_path):
    """Delta 4 ignores VACUUM's RETAIN (other than 0 hours) unless told not to: vacuum_retain: 30d
    then kept files 7 days only. Files compacted away 10 days ago must still be there."""
    import json
    import os
    import time

    topic = bronze_topic(tmp_path / "care_retain", vacuum_retain=timedelta(days=30))
    landed(spark, topic, runs=3)
    old_files = data_files(topic.path)
    maintain(spark, topic, force=True)  # OPTIMIZE: the 3 files are now tombstones
    ten_days_ago = time.time() - 10 * 86400
    log = Path(topic.path) / "_delta_log"
    for commit in sorted(log.glob("*.json")):
        actions = [json.loads(line) for line in commit.read_text().splitlines() if line]
        for action in actions:
            if "remove" in action:
                action["remove"]["deletionTimestamp"] = int(ten_days_ago * 1000)
        commit.write_text("".join(json.dumps(a) + "\n" for a in actions))
    for crc in log.glob("*.crc"):
        crc.unlink()
    for name in old_files:
        os.utime(Path(topic.path) / name, (ten_days_ago, ten_days_ago))

    (report,) = maintain(spark, topic, force=True)

    assert "VACUUM RETAIN 720 HOURS" in report.actions
    assert old_files <= data_files(topic.path)
