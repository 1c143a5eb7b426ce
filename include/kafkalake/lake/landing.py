"""What a table has landed, as the freshness watcher needs it: its Kafka offsets, when it last
landed some, and how many bytes a row takes in it. Read with delta-rs (no JVM), from the log only.

The offsets are :func:`~kafkalake.lake.table_position.position_in`'s (what the table's current state
holds); the time is that commit's; the bytes per row come from the write metrics Spark records in
each commit (``numOutputBytes`` / ``numOutputRows``), or else from its files' sizes and row counts,
so "what waits" in records becomes an estimate of the file a run would write.

Also what a table received after a given version (:func:`received_after`): the run history's row of
a job killed before it could report (its task reads the tables' logs instead).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from kafkalake.lake import store_settings
from kafkalake.lake.table_position import TablePosition, is_batch_commit, position_in

#: Commits read back: enough for the position record past table care's commits, and for a mean.
HISTORY_LIMIT = 200


@dataclass(frozen=True)
class Landing:
    version: int
    position: TablePosition | None
    #: When the commit that recorded the position was made; None without one.
    landed_at: datetime | None
    #: Mean bytes per row written over the commits read; None when none said.
    bytes_per_row: float | None


def landing_in(version: int, history: Iterable[Mapping[str, Any]]) -> Landing:
    commits = list(history)
    position = position_in(commits)
    landed_at = None
    if position is not None:
        stamp = next((c.get("timestamp") for c in commits if int(c["version"]) == position.version), None)
        landed_at = datetime.fromtimestamp(int(stamp) / 1000, UTC) if stamp is not None else None
    rows = written = 0
    for commit in commits:
        metrics = commit.get("operationMetrics") or {}
        try:
            commit_rows, commit_bytes = int(metrics["numOutputRows"]), int(metrics["numOutputBytes"])
        except (KeyError, TypeError, ValueError):
            continue
        rows, written = rows + commit_rows, written + commit_bytes
    return Landing(version, position, landed_at, written / rows if rows else None)


def read_landing(
    location: str, known: Landing | None = None, settings: store_settings.StorageSettings | None = None
) -> Landing | None:
    """The table's :class:`Landing`; ``known`` again when the table has not moved since. None
    when there is no table."""
    table = store_settings.open_delta(location, settings)
    if table is None:
        return None
    version = table.version()
    if known is not None and known.version == version:
        return known
    landing = landing_in(version, table.history(HISTORY_LIMIT))
    if landing.bytes_per_row is None:
        # Writers that record no bytes written (delta-rs): the files the table has now say it.
        landing = replace(landing, bytes_per_row=_file_bytes_per_row(table))
    return landing


def _file_bytes_per_row(table: Any) -> float | None:
    import pyarrow as pa

    files = pa.table(table.get_add_actions(flatten=True))
    rows = sum(n or 0 for n in files.column("num_records").to_pylist())
    return sum(files.column("size_bytes").to_pylist()) / rows if rows else None


#: The operations that append rows: a micro-batch's write, as Spark and delta-rs name it.
APPENDS = frozenset({"WRITE", "STREAMING UPDATE"})


@dataclass(frozen=True)
class Received:
    """What a table's commits after a version appended."""

    rows: int
    #: Commits carrying kafkalake's offsets record: one per micro-batch (a replayed batch's skipped
    #: write commits nothing).
    batches: int


def received_in(history: Iterable[Mapping[str, Any]], after: int | None) -> Received:
    """The rows appended by the commits above version ``after`` (every commit when None), from the
    write metrics each commit records (Spark's ``numOutputRows``, delta-rs' ``num_added_rows``);
    care's rewrites (OPTIMIZE) add none."""
    rows = batches = 0
    for commit in history:
        if after is not None and int(commit["version"]) <= after:
            continue
        if commit.get("operation") not in APPENDS:
            continue
        metrics = commit.get("operationMetrics") or {}
        try:
            rows += int(metrics.get("numOutputRows", metrics.get("num_added_rows", 0)))
        except (TypeError, ValueError):
            pass
        batches += is_batch_commit(commit)
    return Received(rows, batches)


def table_version(location: str) -> int | None:
    """The table's version now; None when there is no table."""
    table = store_settings.open_delta(location)
    return None if table is None else table.version()


def received_after(location: str, after: int | None) -> Received:
    """What the table at ``location`` received above version ``after`` (None: since its creation)."""
    table = store_settings.open_delta(location)
    if table is None:
        return Received(0, 0)
    newer = table.version() - (after if after is not None else -1)
    if newer <= 0:
        return Received(0, 0)
    return received_in(table.history(newer), after)
