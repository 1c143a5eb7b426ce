"""Every run of a topic's DAG, one row each, in a Delta table that outlives Airflow's metadata.

Task logs, XCom and StatsD lines vanish with Airflow's clean-up; this table does not. It sits beside
the catalog entry's bronze table, at ``<bronze's folder>/_kafkalake_runs/<bronze's name>``
(``TopicConfig.history_path``, which says why not inside it). The Airflow tasks append to it with
delta-rs (never Spark: a row costs no JVM), one writer at a time (a topic's DAG runs one task at a
time), and read it the same way, as does anything else that wants to look (the UI's freshness
view, ``DeltaTable(path).to_pandas()``).

A row holds counts, offsets, times and kinds only: never a record's value, never a setting or a
secret. Columns are only ever added (each with a default), so rows written before a column existed
read back with its default.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import TYPE_CHECKING, Any

from kafkalake.lake import store_settings

if TYPE_CHECKING:
    import pyarrow as pa

    #: The table's columns, in :class:`RunRecord`'s order (built on first use: see :func:`history_schema`).
    HISTORY_SCHEMA: pa.Schema

# pyarrow and deltalake are imported on use: the DAG files import the tasks that import this module,
# and parsing a DAG file never reads a table.

#: What kind of run a row describes.
KINDS = ("ingest", "idle", "catch_up", "replay", "reingest", "care", "register", "refresh_schema")
OUTCOMES = ("success", "failed", "idle")
#: Table care compacts the history once it has more files than this (one per run appended).
COMPACT_AT_FILES = 48
#: Rows per Parquet row group of a compacted history. Compaction sorts the rows by ``started_at``,
#: so each group spans a stretch of time whose bounds its statistics hold, and a read of a recent
#: window (the freshness view, the watcher, the data-age alert) skips the older groups unread.
#: 60,000 rows in one group: a 1-day window read in 0.26 s; in groups of 4,096: 0.008 s.
ROWS_PER_GROUP = 4096
#: How far back :func:`latest` looks first before it reads the whole history.
LATEST_WINDOW = timedelta(days=1)
#: How long files compaction replaced are kept for readers that opened an older version.
VACUUM_RETAIN_HOURS = 1


@dataclass(frozen=True)
class RunRecord:
    """One run of one task of a topic's DAG, as the history keeps it."""

    #: The catalog entry's topic name (a family's: its table name).
    topic: str
    dag_id: str
    run_id: str
    task_id: str
    try_number: int
    #: One of :data:`KINDS`.
    kind: str
    #: One of :data:`OUTCOMES`.
    outcome: str
    #: The :class:`kafkalake.core.errors.Kind` value of a failed run's error; None otherwise.
    failure_kind: str | None
    #: UTC, timezone-aware.
    started_at: datetime
    ended_at: datetime
    #: The entry's freshness SLA when the run ran.
    sla_seconds: float
    #: Rows landed in bronze (an ingest's: what bronze's Delta log says the run's commits appended).
    rows: int = 0
    #: Bytes of the Kafka keys and values read (not Parquet's size).
    bytes: int = 0
    parsed_rows: int = 0
    batches: int = 0
    #: Dead letters by reason.
    dead_letters: dict[str, int] = field(default_factory=dict)
    #: JSON ``{topic: {partition: [from, to)}}`` of the offsets the run read; ``"{}"`` when none.
    offsets_read: str = "{}"
    #: Records in Kafka not yet in the table after the run.
    lag_records: int | None = None
    #: Age of the oldest record not yet landed after the run, when known.
    lag_seconds: float | None = None
    #: Newest Kafka timestamp the table holds after the run (UTC, aware).
    newest_timestamp: datetime | None = None
    #: ``ended_at - newest_timestamp``, in seconds.
    data_age_seconds: float | None = None
    #: JVMs the run started (spark-submit's driver; 0 for a run without Spark).
    jvm_count: int = 0
    #: The driver JVM's peak resident memory (VmHWM), when the job reported it.
    driver_peak_memory_bytes: int | None = None
    duration_seconds: float | None = None
    #: The parsed table's schema version after the run, when known.
    schema_version: int | None = None
    #: Table care: bronze's files and bytes before and after.
    files_before: int | None = None
    files_after: int | None = None
    table_bytes_before: int | None = None
    table_bytes_after: int | None = None
    #: Offsets Kafka deleted before the run could read them (``fail_on_data_loss: false``).
    lost_offsets: int = 0


def offsets_json(read: dict[str, dict[int, tuple[int, int]]]) -> str:
    """:attr:`RunRecord.offsets_read` from ``{topic: {partition: (from, to)}}`` (``to`` exclusive)."""
    return json.dumps(
        {t: {str(p): [a, b] for p, (a, b) in sorted(parts.items())} for t, parts in sorted(read.items())},
        sort_keys=True,
    )


def records_read(offsets_read: str) -> int:
    """How many offsets an :attr:`RunRecord.offsets_read` covers."""
    return sum(b - a for parts in json.loads(offsets_read).values() for a, b in parts.values())


@cache
def history_schema() -> pa.Schema:
    import pyarrow as pa

    timestamp = pa.timestamp("us", tz="UTC")
    types: dict[str, pa.DataType] = {
        "topic": pa.string(),
        "dag_id": pa.string(),
        "run_id": pa.string(),
        "task_id": pa.string(),
        "try_number": pa.int32(),
        "kind": pa.string(),
        "outcome": pa.string(),
        "failure_kind": pa.string(),
        "started_at": timestamp,
        "ended_at": timestamp,
        "sla_seconds": pa.float64(),
        "rows": pa.int64(),
        "bytes": pa.int64(),
        "parsed_rows": pa.int64(),
        "batches": pa.int64(),
        "dead_letters": pa.map_(pa.string(), pa.int64()),
        "offsets_read": pa.string(),
        "lag_records": pa.int64(),
        "lag_seconds": pa.float64(),
        "newest_timestamp": timestamp,
        "data_age_seconds": pa.float64(),
        "jvm_count": pa.int32(),
        "driver_peak_memory_bytes": pa.int64(),
        "duration_seconds": pa.float64(),
        "schema_version": pa.int64(),
        "files_before": pa.int64(),
        "files_after": pa.int64(),
        "table_bytes_before": pa.int64(),
        "table_bytes_after": pa.int64(),
        "lost_offsets": pa.int64(),
    }
    # The fields without a default: every row has them.
    required = {
        f.name
        for f in _FIELDS
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }
    required.discard("failure_kind")
    fields = [pa.field(f.name, types[f.name], nullable=f.name not in required) for f in _FIELDS]
    return pa.schema(fields)


_FIELDS = dataclasses.fields(RunRecord)


def __getattr__(name: str) -> Any:
    if name == "HISTORY_SCHEMA":
        return history_schema()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def append(location: str, record: RunRecord) -> None:
    """Add ``record`` to the history at ``location``, creating the table on the first run."""
    import pyarrow as pa
    from deltalake import write_deltalake

    row = {f.name: _to_column(getattr(record, f.name)) for f in _FIELDS}
    batch = pa.Table.from_pylist([row], schema=history_schema())
    # "merge": a table written before a column was added gains it (older rows read as null).
    write_deltalake(
        location, batch, mode="append", schema_mode="merge", storage_options=_write_options(location)
    )


def read(
    location: str, *, since: datetime | None = None, settings: store_settings.StorageSettings | None = None
) -> list[RunRecord]:
    """The runs at ``location`` that started at or after ``since``, oldest first; [] with no table.
    ``settings``: the store's, when not the process's (the freshness view reads many topics).

    ``since`` is handed to the Parquet reader, which skips each file and row group whose
    ``started_at`` statistics lie before it: a window's read costs the window, not the history."""
    import pyarrow.dataset as ds

    table = store_settings.open_delta(location, settings)
    if table is None:
        return []
    if since is None:
        data = table.to_pyarrow_table()
    else:
        data = table.to_pyarrow_dataset().to_table(filter=ds.field("started_at") >= _aware(since))
    records = [_from_row(row) for row in data.to_pylist()]
    return sorted(records, key=lambda r: (r.started_at, r.ended_at))


def latest(
    location: str,
    settings: store_settings.StorageSettings | None = None,
    *,
    now: datetime | None = None,
) -> RunRecord | None:
    """The run that started last, or None before the first: looked for in the last
    :data:`LATEST_WINDOW` first, in the whole history only when that holds none."""
    recent = (now or datetime.now(UTC)) - LATEST_WINDOW
    runs = read(location, since=recent, settings=settings) or read(location, settings=settings)
    return runs[-1] if runs else None


def care(
    location: str, *, max_files: int = COMPACT_AT_FILES, rows_per_group: int = ROWS_PER_GROUP
) -> str | None:
    """Compact the history into one file once it has more than ``max_files``, and vacuum what that
    left behind; None when there was nothing to do, else what was done."""
    from deltalake import DeltaTable, WriterProperties

    options = store_settings.delta_options(location)
    if not DeltaTable.is_deltatable(location, storage_options=options):
        return None
    table = DeltaTable(location, storage_options=_write_options(location))
    files = len(table.file_uris())
    if files <= max_files:
        return None
    # Sorted by start (a one-column z-order is a sort) into small row groups: see ROWS_PER_GROUP.
    # It rewrites the whole history, a few MB after years of runs, only when it has grown
    # COMPACT_AT_FILES files since.
    compacted = table.optimize.z_order(
        ["started_at"], writer_properties=WriterProperties(max_row_group_size=rows_per_group)
    )
    # Readers open the table's newest version; an older one is kept a while for one that opened it
    # just before the compaction.
    removed = table.vacuum(
        retention_hours=VACUUM_RETAIN_HOURS, enforce_retention_duration=False, dry_run=False
    )
    return (
        f"{files} files compacted ({compacted.get('numFilesRemoved', 0)} removed, "
        f"{compacted.get('numFilesAdded', 0)} added); vacuum deleted {len(removed)} older files"
    )


def _write_options(location: str) -> dict[str, str] | None:
    options = store_settings.delta_options(location)
    if options is None:
        return None
    # Safe here without a lock service: a topic's DAG runs one task at a time, so the history has
    # one writer.
    return {**options, "AWS_S3_ALLOW_UNSAFE_RENAME": "true"}


def _to_column(value: Any) -> Any:
    if isinstance(value, datetime):
        return _aware(value)
    if isinstance(value, dict):
        return sorted(value.items())
    return value


def _aware(moment: datetime) -> datetime:
    if moment.tzinfo is None:
        raise ValueError(f"run history: a naive datetime ({moment.isoformat()}): give it a timezone (UTC)")
    return moment.astimezone(UTC)


def _from_row(row: dict[str, Any]) -> RunRecord:
    values: dict[str, Any] = {}
    for f in _FIELDS:
        value = row.get(f.name)
        if value is None:
            # A column added after the row was written: the field's default.
            if f.default is not dataclasses.MISSING:
                value = f.default
            elif f.default_factory is not dataclasses.MISSING:
                value = f.default_factory()
        elif f.name == "dead_letters":
            value = dict(value)
        elif isinstance(value, datetime):
            value = value.astimezone(UTC)
        values[f.name] = value
    return RunRecord(**values)


#: Runs that start a Spark job to land records: what a queued run of the topic will do.
LANDING_KINDS = frozenset({"ingest", "catch_up", "reingest"})
#: How many of the newest landing runs the expected run time looks at.
EXPECTED_FROM_RUNS = 10


def expected_run(records: Sequence[RunRecord], default: timedelta) -> timedelta:
    """How long the next landing run will take: the longest of the newest
    :data:`EXPECTED_FROM_RUNS` successful ones (a run's task time, ``ended_at - started_at``).
    The longest, not the median: the freshness watcher queues a run this long before the SLA would
    be missed, so it errs early. ``default`` before any such run."""
    landed = sorted(
        (r for r in records if r.kind in LANDING_KINDS and r.outcome == "success" and r.jvm_count > 0),
        key=lambda r: r.started_at,
    )[-EXPECTED_FROM_RUNS:]
    if not landed:
        return default
    return max(r.ended_at - r.started_at for r in landed)
