"""Table care: OPTIMIZE (bin-packing, Z-ORDER or liquid clustering), VACUUM, table properties.

Three layers:

* pure decisions (:func:`is_due`, :func:`decide`, :func:`layout_plan`), unit-tested;
* a JVM-free read of each table's Delta log with delta-rs (:func:`read_state`), which the Airflow
  task uses to skip cheaply when nothing is due;
* the Spark side (:func:`maintain`), run by ``jobs/maintain_table.py`` or in-process by tests.

Which tables a topic has is answered in one place, :func:`kafkalake.tables.topic_tables`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from kafkalake.catalog import TopicConfig
from kafkalake.failures import BadConfigError, Kind, failure
from kafkalake.maintenance_config import DELTA_MIN_RETENTION, MaintenanceConfig
from kafkalake.table_settings import delta_ident, set_properties
from kafkalake.tables import Table, topic_tables

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

_OPTIMIZE = "OPTIMIZE"
_VACUUM_END = "VACUUM END"


# ---------------------------------------------------------------------------------------------
# pure decisions


def is_due(last: datetime | None, now: datetime, every: timedelta | None) -> bool:
    """Whether a periodic action is due: never when ``every`` is None, always when it never ran."""
    if every is None:
        return False
    if last is None:
        return True
    return now - last >= every


@dataclass(frozen=True)
class TableState:
    """What the Delta log says, read without a JVM."""

    #: Time of the oldest commit still in the log (the table's creation, until logs are cleaned).
    created: datetime
    last_optimize: datetime | None
    last_vacuum: datetime | None
    properties: Mapping[str, str]


@dataclass(frozen=True)
class Due:
    optimize: bool
    vacuum: bool
    #: Catalog properties whose value on the table differs, sorted.
    properties: tuple[str, ...]
    reason: str

    @property
    def run(self) -> bool:
        return self.optimize or self.vacuum or bool(self.properties)


def _since(moment: datetime | None, now: datetime) -> str:
    return "never" if moment is None else f"{now - moment} ago"


def decide(state: TableState, config: MaintenanceConfig, now: datetime) -> Due:
    """What a table needs now. A table that was never optimized counts from its creation."""
    optimize = is_due(state.last_optimize or state.created, now, config.optimize_every)
    vacuum = is_due(state.last_vacuum or state.created, now, config.vacuum_every)
    properties = tuple(k for k, v in config.properties if state.properties.get(k) != v)
    parts = [
        f"OPTIMIZE {'due' if optimize else 'not due'} (last {_since(state.last_optimize, now)}, "
        f"every {config.optimize_every or 'never'})",
        f"VACUUM {'due' if vacuum else 'not due'} (last {_since(state.last_vacuum, now)}, "
        f"every {config.vacuum_every})",
    ]
    if properties:
        parts.append(f"properties to set: {', '.join(properties)}")
    return Due(optimize, vacuum, properties, "; ".join(parts))


class LayoutError(BadConfigError):
    """Z-ORDER or clustering columns that the tables do not have."""


def layout_plan(
    columns_by_table: Mapping[str, Sequence[str]], wanted: Sequence[str]
) -> dict[str, tuple[str, ...]]:
    """Which of ``wanted`` (zorder_by/cluster_by) each table is laid out by.

    A table with every wanted column gets them; one with none gets plain bin-packing. A table with
    only some, or no table with all of them, is a configuration error naming table and column.
    """
    if not wanted:
        return {name: () for name in columns_by_table}
    plan: dict[str, tuple[str, ...]] = {}
    for name, columns in columns_by_table.items():
        have = [c for c in wanted if c in columns]
        if have and len(have) < len(wanted):
            missing = next(c for c in wanted if c not in columns)
            raise LayoutError(
                failure(
                    Kind.BAD_CONFIG,
                    f"table {name} has no column {missing!r} (it has {', '.join(columns)}): fix the "
                    "topic's maintenance.zorder_by/cluster_by",
                ).message
            )
        plan[name] = tuple(wanted) if have else ()
    if not any(plan.values()):
        tables = "; ".join(f"{name}: {', '.join(cols)}" for name, cols in columns_by_table.items())
        raise LayoutError(
            failure(
                Kind.BAD_CONFIG,
                f"no table has column {wanted[0]!r} of maintenance.zorder_by/cluster_by ({tables})",
            ).message
        )
    return plan


def retain_hours(retain: timedelta) -> int:
    """VACUUM's RETAIN in whole hours, rounded up (never retains less than asked)."""
    return math.ceil(retain.total_seconds() / 3600)


# ---------------------------------------------------------------------------------------------
# the Delta log, read with delta-rs (no JVM)


def _utc(millis: Any) -> datetime:
    return datetime.fromtimestamp(int(millis) / 1000, tz=UTC)


def read_state(path: str) -> TableState | None:
    """The table's maintenance history and properties; None when there is no Delta table."""
    from deltalake import DeltaTable

    if not DeltaTable.is_deltatable(path):
        return None
    table = DeltaTable(path)
    history = table.history()
    created = min((_utc(c["timestamp"]) for c in history), default=datetime.now(UTC))

    def last(operation: str) -> datetime | None:
        return max((_utc(c["timestamp"]) for c in history if c.get("operation") == operation), default=None)

    return TableState(
        created=created,
        last_optimize=last(_OPTIMIZE),
        last_vacuum=last(_VACUUM_END),
        properties=dict(table.metadata().configuration),
    )


def due_now(topic: TopicConfig, now: datetime | None = None) -> tuple[bool, list[str]]:
    """Whether the maintenance job has work for any of the topic's tables, with one line per table."""
    now = now or datetime.now(UTC)
    lines = []
    run = False
    for table in topic_tables(topic):
        state = read_state(table.location)
        if state is None:
            lines.append(f"{table.name}: no Delta table at {table.location} yet")
            continue
        due = decide(state, topic.maintenance, now)
        run = run or due.run
        lines.append(f"{table.name}: {due.reason}")
    return run, lines


# ---------------------------------------------------------------------------------------------
# the Spark side


@dataclass(frozen=True)
class Size:
    files: int
    bytes: int

    def __str__(self) -> str:
        return f"{self.files} files, {self.bytes:,} bytes"


@dataclass
class TableReport:
    table: str
    before: Size
    after: Size
    actions: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        done = "; ".join(self.actions) or "nothing due"
        return f"{self.table}: {done}. Before: {self.before}; after: {self.after}"


def _detail(spark: SparkSession, table: Table) -> Any:
    return spark.sql(f"DESCRIBE DETAIL {delta_ident(table.location)}").first()


def _size(detail: Any) -> Size:
    return Size(int(detail["numFiles"]), int(detail["sizeInBytes"]))


def maintain(
    spark: SparkSession, topic: TopicConfig, *, force: bool = False, now: datetime | None = None
) -> list[TableReport]:
    """Bring every table of the topic in step with its ``maintenance`` block.

    Per table, what is due (everything with ``force``): properties that differ, then OPTIMIZE
    (Z-ORDER or liquid clustering when configured), then VACUUM. Returns one report per table.
    """
    config = topic.maintenance
    now = now or datetime.now(UTC)
    states = {t: read_state(t.location) for t in topic_tables(topic)}
    for table in [t for t, state in states.items() if state is None]:
        log.info("%s: no Delta table at %s yet; nothing to maintain", table.name, table.location)
    existing = {t: state for t, state in states.items() if state is not None}
    columns = {t.name: spark.read.format("delta").load(t.location).columns for t in existing}
    layout = layout_plan(columns, config.layout_columns) if existing else {}
    reports = []
    for table, state in existing.items():
        due = decide(state, config, now)
        log.info("%s: %s", table.name, "forced" if force else due.reason)
        detail = _detail(spark, table)
        report = TableReport(table.name, _size(detail), _size(detail))
        properties = dict(config.properties)
        changed = {k: properties[k] for k in (properties if force else due.properties)}
        changed = {k: v for k, v in changed.items() if state.properties.get(k) != v}
        if changed:
            set_properties(spark, table.location, changed)
            report.actions.append(f"set {', '.join(f'{k}={v}' for k, v in sorted(changed.items()))}")
        if config.optimize_every is not None and (force or due.optimize):
            report.actions.append(_optimize(spark, table, config, layout[table.name], detail))
        if force or due.vacuum:
            report.actions.append(_vacuum(spark, table, config))
        report.after = _size(_detail(spark, table))
        log.info("%s", report)
        reports.append(report)
    return reports


def _optimize(
    spark: SparkSession, table: Table, config: MaintenanceConfig, columns: tuple[str, ...], detail: Any
) -> str:
    ident = delta_ident(table.location)
    cols = ", ".join(f"`{c}`" for c in columns)
    if columns and config.cluster_by:
        current = tuple(detail["clusteringColumns"] or ())
        if current != columns:
            spark.sql(f"ALTER TABLE {ident} CLUSTER BY ({cols})")
        spark.sql(f"OPTIMIZE {ident}")
        return f"OPTIMIZE (liquid clustering by {', '.join(columns)})"
    if columns:
        spark.sql(f"OPTIMIZE {ident} ZORDER BY ({cols})")
        return f"OPTIMIZE ZORDER BY ({', '.join(columns)})"
    spark.sql(f"OPTIMIZE {ident}")
    return "OPTIMIZE (bin-packing)"


_RETENTION_CHECK = "spark.databricks.delta.retentionDurationCheck.enabled"
_LISTING_PARALLELISM = "spark.sql.sources.parallelPartitionDiscovery.parallelism"


def _vacuum(spark: SparkSession, table: Table, config: MaintenanceConfig) -> str:
    """VACUUM with the catalog's retention. Directories starting with ``_`` (``_delta_log``,
    ``_kafkalake`` with the checkpoint and schema history) are never touched by Delta's VACUUM."""
    hours = retain_hours(config.vacuum_retain)
    # A VACUUM END commit in the log is how the next run knows when VACUUM last ran.
    spark.conf.set("spark.databricks.delta.vacuum.logging.enabled", "true")
    if not spark.sparkContext.getConf().contains(_LISTING_PARALLELISM):
        # VACUUM lists the table in this many tasks (default 10,000): on 2 cores that alone took
        # 193 s for a 5-file table (22-54 s with 8). A topic's spark_conf can still set it.
        spark.conf.set(_LISTING_PARALLELISM, str(max(8, 4 * spark.sparkContext.defaultParallelism)))
    below_guard = config.vacuum_retain < DELTA_MIN_RETENTION
    if below_guard:
        if not config.allow_vacuum_retain_below_7d:  # the catalog refuses this already
            raise BadConfigError(f"{table.name}: vacuum_retain below 7 days without the opt-in")
        spark.conf.set(_RETENTION_CHECK, "false")
    try:
        spark.sql(f"VACUUM {delta_ident(table.location)} RETAIN {hours} HOURS")
    finally:
        if below_guard:
            spark.conf.unset(_RETENTION_CHECK)
    return f"VACUUM RETAIN {hours} HOURS"
