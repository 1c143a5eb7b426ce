"""Is table care due? Decided from each table's Delta log, read with delta-rs (no JVM).

The Airflow task asks :func:`due_now` to skip cheaply when nothing is due; the Spark side
(:mod:`kafkalake.spark.table_care`) does the work.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from kafkalake.config.maintenance import MaintenanceConfig
from kafkalake.config.tables import topic_tables
from kafkalake.config.topic import TopicConfig
from kafkalake.lake import store_settings

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
    #: The table's top-level column names.
    columns: tuple[str, ...] = ()


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


# ---------------------------------------------------------------------------------------------
# the Delta log, read with delta-rs (no JVM)


def _utc(millis: Any) -> datetime:
    return datetime.fromtimestamp(int(millis) / 1000, tz=UTC)


def read_state(path: str, settings: store_settings.StorageSettings | None = None) -> TableState | None:
    """The table's maintenance history and properties; None when there is no Delta table.
    ``settings``: the store's, when not the process's (the freshness watcher's)."""
    table = store_settings.open_delta(path, settings)
    if table is None:
        return None
    history = table.history()
    created = min((_utc(c["timestamp"]) for c in history), default=datetime.now(UTC))

    def last(operation: str) -> datetime | None:
        return max((_utc(c["timestamp"]) for c in history if c.get("operation") == operation), default=None)

    return TableState(
        created=created,
        last_optimize=last(_OPTIMIZE),
        last_vacuum=last(_VACUUM_END),
        properties=dict(table.metadata().configuration),
        columns=tuple(field.name for field in table.schema().fields),
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
