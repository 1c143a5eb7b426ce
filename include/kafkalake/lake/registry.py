"""Which of a topic's tables the metastore already has, recorded beside it: read without a JVM.

Registering a table needs a Spark session with Hive support (20-30 s of JVM start-up) for what is,
after a topic's first runs, always "already registered". The registration job records each table
it registered (or found registered at the same location) as a small file; the register_table task
reads these and starts no JVM when every table that exists is recorded at its location. A cleared
or retried task always runs the job, so on-call can force a re-registration.
"""

from __future__ import annotations

from pathlib import Path

from kafkalake.config.tables import Table
from kafkalake.core.paths import metastore_dir
from kafkalake.lake import store_settings


def registry_dir(lake_root: Path) -> Path:
    """Where the records of a lake's registrations live: beside its embedded metastore."""
    return metastore_dir(lake_root) / "registered"


def _record(registry: Path, table: Table) -> Path:
    # Table names are `database.table` of SQL identifiers: safe as a file name.
    return registry / table.name


def record(registry: Path, table: Table) -> None:
    """Note that ``table`` is registered at its location (written whole, then renamed)."""
    registry.mkdir(parents=True, exist_ok=True)
    target = _record(registry, table)
    partial = target.with_name(f".{target.name}.partial")
    partial.write_text(table.location)
    partial.replace(target)


def is_recorded(registry: Path, table: Table) -> bool:
    try:
        return _record(registry, table).read_text() == table.location
    except OSError:
        return False


def unregistered(registry: Path, tables: list[Table]) -> list[str]:
    """Names of the tables that exist (locally or on an object store) but are not recorded."""
    return [
        table.name
        for table in tables
        if not is_recorded(registry, table) and store_settings.open_delta(table.location) is not None
    ]
