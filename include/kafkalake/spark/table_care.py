"""Table care: OPTIMIZE (bin-packing, Z-ORDER or liquid clustering), VACUUM, table properties.

Whether care is due is decided without a JVM in :mod:`kafkalake.lake.care_due`; this is the Spark
side, run by ``jobs/maintain_table.py`` or in-process by tests, and the pure layout plan it follows.

Which tables a topic has is answered in one place, :func:`kafkalake.config.tables.topic_tables`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from kafkalake.config.maintenance import (
    DELTA_MIN_RETENTION,
    RETENTION_PROPERTY,
    MaintenanceConfig,
    interval_of,
)
from kafkalake.config.tables import Table, topic_tables
from kafkalake.config.topic import TopicConfig
from kafkalake.core import kill_points
from kafkalake.core.errors import BadConfigError, Kind, failure
from kafkalake.lake.care_due import decide, read_state
from kafkalake.lake.checkpoint_lock import fence
from kafkalake.lake.start_plan import read_table
from kafkalake.spark.table_settings import delta_ident, quote_identifier, set_properties

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


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


def holds_run_lock(topic: TopicConfig) -> bool:
    """Whether the topic's table care must hold its run lock, keeping ingests, replays and re-ingests out.

    On an object store a commit beside another could be lost. And a VACUUM that retains less than
    Delta's 7-day guard could delete the data files a running ingest has written but not committed
    yet (unreferenced, and as old as the retention): the commit would then name files that are gone.
    """
    return topic.on_object_store or topic.maintenance.vacuum_retain < DELTA_MIN_RETENTION


def vacuum_retention(config: MaintenanceConfig, properties: Mapping[str, str]) -> timedelta:
    """What VACUUM retains: ``vacuum_retain``, or the table's ``delta.deletedFileRetentionDuration``
    when that is longer (Delta refuses a shorter RETAIN, and readers were promised the longer one)."""
    try:
        table = interval_of(properties.get(RETENTION_PROPERTY, ""))
    except ValueError:
        table = None
    return max(config.vacuum_retain, table) if table is not None else config.vacuum_retain


def retain_hours(retain: timedelta) -> int:
    """VACUUM's RETAIN in whole hours, rounded up (never retains less than asked)."""
    return math.ceil(retain.total_seconds() / 3600)


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


def _size(table: Table) -> Size:
    """Files and bytes of the table's current version, from its log with delta-rs: a DESCRIBE
    DETAIL computes the whole snapshot in Spark jobs, twice per table and care pass (before and
    after), which on an object store took ~1.5 s a table."""
    facts = read_table(table.location)
    return Size(facts.files, facts.bytes) if facts is not None else Size(0, 0)


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
    columns = {t.name: list(state.columns) for t, state in existing.items()}
    layout = layout_plan(columns, config.layout_columns) if existing else {}
    reports = []
    for table, state in existing.items():
        due = decide(state, config, now)
        log.info("%s: %s", table.name, "forced" if force else due.reason)
        before = _size(table)
        report = TableReport(table.name, before, before)
        properties = dict(config.properties)
        changed = {k: properties[k] for k in (properties if force else due.properties)}
        changed = {k: v for k, v in changed.items() if state.properties.get(k) != v}
        if changed:
            set_properties(spark, table.location, changed)
            report.actions.append(f"set {', '.join(f'{k}={v}' for k, v in sorted(changed.items()))}")
        if config.optimize_every is not None and (force or due.optimize):
            kill_points.reached("maintain:before_optimize")
            report.actions.append(_optimize(spark, table, config, layout[table.name]))
            kill_points.reached("maintain:after_optimize")
        if force or due.vacuum:
            kill_points.reached("maintain:before_vacuum")
            report.actions.append(_vacuum(spark, table, config, {**state.properties, **changed}))
        report.after = _size(table)
        log.info("%s", report)
        reports.append(report)
    return reports


def _optimize(spark: SparkSession, table: Table, config: MaintenanceConfig, columns: tuple[str, ...]) -> str:
    fence()
    ident = delta_ident(table.location)
    cols = ", ".join(quote_identifier(c) for c in columns)
    if columns and config.cluster_by:
        # Clustering columns live in the log's domain metadata, which delta-rs does not show.
        detail = spark.sql(f"DESCRIBE DETAIL {ident}").first()
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
_RETENTION_IGNORE = "spark.databricks.delta.vacuum.retentionWindowIgnore.enabled"
_LISTING_PARALLELISM = "spark.sql.sources.parallelPartitionDiscovery.parallelism"


def _vacuum(
    spark: SparkSession, table: Table, config: MaintenanceConfig, properties: Mapping[str, str]
) -> str:
    """VACUUM with the catalog's retention. Directories starting with ``_`` (``_delta_log``,
    ``_kafkalake`` with the checkpoint and schema history) are never touched by Delta's VACUUM."""
    retain = vacuum_retention(config, properties)
    hours = retain_hours(retain)
    # A VACUUM END commit in the log is how the next run knows when VACUUM last ran.
    spark.conf.set("spark.databricks.delta.vacuum.logging.enabled", "true")
    # Delta 4 ignores RETAIN (other than 0 hours) by default and keeps only the table's retention
    # (7 days unless set): a vacuum_retain of 30d deleted files 8 days old.
    spark.conf.set(_RETENTION_IGNORE, "false")
    if not spark.sparkContext.getConf().contains(_LISTING_PARALLELISM):
        # VACUUM lists the table in this many tasks (default 10,000): on 2 cores that alone took
        # 193 s for a 5-file table (22-54 s with 8). A topic's spark_conf can still set it.
        spark.conf.set(_LISTING_PARALLELISM, str(max(8, 4 * spark.sparkContext.defaultParallelism)))
    below_guard = retain < DELTA_MIN_RETENTION
    if below_guard:
        if not config.allow_vacuum_retain_below_7d:  # the catalog refuses this already
            raise BadConfigError(f"{table.name}: vacuum_retain below 7 days without the opt-in")
        spark.conf.set(_RETENTION_CHECK, "false")
    try:
        fence()
        spark.sql(f"VACUUM {delta_ident(table.location)} RETAIN {hours} HOURS")
    finally:
        if below_guard:
            spark.conf.unset(_RETENTION_CHECK)
    return f"VACUUM RETAIN {hours} HOURS"
