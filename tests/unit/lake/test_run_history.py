"""The run history: rows appended with delta-rs read back as they were written."""

from __future__ import annotations

import dataclasses
import itertools
from datetime import UTC, datetime, timedelta, timezone

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from kafkalake.config.catalog import load_catalog
from kafkalake.lake import run_history
from kafkalake.lake.run_history import RunRecord

from ..config.catalog_helpers import write_catalog

T0 = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)


def run(started: datetime = T0, **changes: object) -> RunRecord:
    record = RunRecord(
        topic="orders",
        dag_id="ingest_orders",
        run_id=f"scheduled__{started.isoformat()}",
        task_id="ingest",
        try_number=1,
        kind="ingest",
        outcome="success",
        failure_kind=None,
        started_at=started,
        ended_at=started + timedelta(seconds=42),
        sla_seconds=900.0,
    )
    return dataclasses.replace(record, **changes)  # type: ignore[arg-type]


def full_run() -> RunRecord:
    return run(
        rows=1200,
        bytes=345_678,
        parsed_rows=1190,
        batches=2,
        dead_letters={"not_json": 7, "type_mismatch": 3},
        offsets_read=run_history.offsets_json({"orders": {1: (100, 700), 0: (0, 600)}}),
        lag_records=5,
        lag_seconds=1.5,
        newest_timestamp=T0 + timedelta(seconds=30),
        data_age_seconds=12.0,
        jvm_count=1,
        driver_peak_memory_bytes=812 * 2**20,
        duration_seconds=41.7,
        schema_version=3,
        files_before=40,
        files_after=2,
        table_bytes_before=10_000,
        table_bytes_after=9_000,
        lost_offsets=4,
    )


def test_a_record_reads_back_field_for_field(tmp_path):
    location = str(tmp_path / "runs")
    record = full_run()
    run_history.append(location, record)
    assert run_history.read(location) == [record]
    assert run_history.latest(location) == record
    assert run_history.records_read(record.offsets_read) == 1200


def test_a_record_with_every_optional_field_none_reads_back(tmp_path):
    location = str(tmp_path / "runs")
    record = run(kind="care", outcome="failed", failure_kind="store_unreachable", ended_at=T0)
    run_history.append(location, record)
    (back,) = run_history.read(location)
    assert back == record
    assert back.lag_records is None and back.newest_timestamp is None and back.dead_letters == {}
    assert back.offsets_read == "{}" and back.started_at.tzinfo is not None


def test_the_table_is_delta_with_the_declared_columns_and_a_map_of_dead_letters(tmp_path):
    location = str(tmp_path / "runs")
    run_history.append(location, full_run())
    run_history.append(location, run(T0 + timedelta(minutes=5), dead_letters={"too_large": 1}))
    table = DeltaTable(location)
    assert table.version() == 1
    data = table.to_pyarrow_table()
    assert data.schema.names == run_history.HISTORY_SCHEMA.names
    assert pa.types.is_map(data.schema.field("dead_letters").type)
    by_start = sorted(zip(data["started_at"].to_pylist(), data["dead_letters"].to_pylist(), strict=True))
    assert [dict(m) for _, m in by_start] == [{"not_json": 7, "type_mismatch": 3}, {"too_large": 1}]


def test_rows_come_back_oldest_first_and_since_keeps_the_later_ones(tmp_path):
    location = str(tmp_path / "runs")
    later, first, middle = (run(T0 + timedelta(minutes=m)) for m in (10, 0, 5))
    for record in (later, first, middle):
        run_history.append(location, record)
    assert run_history.read(location) == [first, middle, later]
    assert run_history.read(location, since=T0 + timedelta(minutes=5)) == [middle, later]
    # Another timezone names the same moment.
    cet = timezone(timedelta(hours=1))
    assert run_history.read(location, since=(T0 + timedelta(minutes=6)).astimezone(cet)) == [later]
    assert run_history.read(location, since=T0 + timedelta(hours=1)) == []
    assert run_history.latest(location) == later


def test_no_table_yet_reads_as_no_runs(tmp_path):
    assert run_history.read(str(tmp_path / "runs")) == []
    assert run_history.read(str(tmp_path / "runs"), since=T0) == []
    assert run_history.latest(str(tmp_path / "runs")) is None


def test_a_naive_time_is_refused_not_guessed(tmp_path):
    with pytest.raises(ValueError, match="naive"):
        run_history.append(str(tmp_path / "runs"), run(T0.replace(tzinfo=None)))


def test_rows_written_before_a_column_existed_read_with_its_default(tmp_path):
    location = str(tmp_path / "runs")
    older_schema = pa.schema(
        [f for f in run_history.HISTORY_SCHEMA if f.name not in ("lost_offsets", "jvm_count")]
    )
    old = full_run()
    row = {f.name: getattr(old, f.name) for f in older_schema}
    row["dead_letters"] = sorted(old.dead_letters.items())
    write_deltalake(location, pa.Table.from_pylist([row], schema=older_schema))
    run_history.append(location, run(T0 + timedelta(minutes=1), lost_offsets=2, jvm_count=1))
    first, second = run_history.read(location)
    assert first == dataclasses.replace(old, lost_offsets=0, jvm_count=0)
    assert (second.lost_offsets, second.jvm_count) == (2, 1)


def test_every_entry_single_or_family_keeps_its_history_beside_bronze_not_inside_it(tmp_path):
    catalog = load_catalog(
        write_catalog(
            tmp_path,
            "topics:\n  - {name: orders, freshness_sla: 1h, path: s3a://bucket/tables/orders/}\n"
            "  - {topics: [a.eu, a.us], table: a_all, freshness_sla: 1h, parsed: false}\n",
        ),
        tmp_path / "lake",
    )
    assert catalog.topic("orders").history_path == "s3a://bucket/tables/_kafkalake_runs/orders"
    family = catalog.topic("a_all")
    assert family.is_family
    assert family.history_path == str(tmp_path / "lake" / "bronze" / "_kafkalake_runs" / "a_all")


def test_the_expected_run_is_the_longest_of_the_newest_successful_landing_runs():
    default = timedelta(seconds=60)
    assert run_history.expected_run([], default) == default
    idle = run(kind="idle", outcome="idle", ended_at=T0 + timedelta(hours=1))
    failed = run(
        outcome="failed", failure_kind="kafka_unreachable", jvm_count=1, ended_at=T0 + timedelta(hours=1)
    )
    assert run_history.expected_run([idle, failed], default) == default

    def landing(minute: int, seconds: float) -> RunRecord:
        started = T0 + timedelta(minutes=minute)
        return run(started, ended_at=started + timedelta(seconds=seconds), jvm_count=1)

    # An old slow run falls out of the newest ten; catch-ups count, care does not.
    runs = [landing(0, 500)] + [landing(m, 30 + m) for m in range(1, 11)]
    runs.append(run(T0 + timedelta(minutes=20), kind="care", jvm_count=1, ended_at=T0 + timedelta(hours=2)))
    assert run_history.expected_run(runs, default) == timedelta(seconds=40)
    runs.append(dataclasses.replace(landing(30, 90), kind="catch_up"))
    assert run_history.expected_run(runs, default) == timedelta(seconds=90)


def test_care_sorts_the_history_into_row_groups_a_window_read_skips(tmp_path):
    import pyarrow.parquet as pq

    location = str(tmp_path / "runs")
    # Appended out of time order, as a backfill's and a retry's rows can be.
    minutes = [37, 3, 59, 12, 44, 0, 25, 51, 8, 30, 18, 41]
    for minute in minutes:
        run_history.append(location, run(T0 + timedelta(minutes=minute)))
    before = run_history.read(location)
    window = run_history.read(location, since=T0 + timedelta(minutes=30))

    assert run_history.care(location, max_files=4, rows_per_group=3) is not None

    assert run_history.read(location) == before
    assert run_history.read(location, since=T0 + timedelta(minutes=30)) == window
    assert [r.started_at for r in window] == [T0 + timedelta(minutes=m) for m in sorted(minutes) if m >= 30]
    (data_file,) = DeltaTable(location).file_uris()
    meta = pq.ParquetFile(data_file.removeprefix("file://")).metadata
    column = meta.schema.to_arrow_schema().get_field_index("started_at")
    bounds = [
        (meta.row_group(g).column(column).statistics.min, meta.row_group(g).column(column).statistics.max)
        for g in range(meta.num_row_groups)
    ]
    # Four groups of three, each a stretch of time after the one before it: the reader can skip
    # every group whose max lies before a window's start.
    assert meta.num_row_groups == 4
    assert all(low <= high < next_low for (low, high), (next_low, _) in itertools.pairwise(bounds))


def test_the_latest_run_is_found_outside_the_recent_window_too(tmp_path):
    location = str(tmp_path / "runs")
    old, older = run(T0), run(T0 - timedelta(days=30))
    run_history.append(location, old)
    run_history.append(location, older)
    assert run_history.latest(location, now=T0 + timedelta(days=10)) == old
    newest = run(T0 + timedelta(days=10, minutes=-5))
    run_history.append(location, newest)
    assert run_history.latest(location, now=T0 + timedelta(days=10)) == newest
