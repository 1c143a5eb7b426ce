"""Register a topic's Delta table in the Spark catalog, so it is queryable by name.

The embedded Derby metastore (what pyspark ships) is the default; it admits one JVM at a time, so
registrations on one machine take a file lock. With a Hive metastore (``spark.hadoop.hive.
metastore.uris``) the lock is harmless.
"""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from kafkalake.config.tables import Table, topic_tables
from kafkalake.config.topic import TopicConfig
from kafkalake.core import kill_points
from kafkalake.core.errors import BadConfigError
from kafkalake.lake.registry import record as registry_record

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class RegistrationError(BadConfigError):
    """The table's name is registered at another location: another topic or an older catalog
    claims it. The same catalog fails the same way until one of them changes."""


@contextlib.contextmanager
def metastore_lock(metastore: Path) -> Iterator[None]:
    metastore.mkdir(parents=True, exist_ok=True)
    with (metastore / ".lock").open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _normalise(location: str) -> str:
    """One spelling of a local location: the catalog's ``file:///data/t`` (or ``file://localhost/data/t``)
    is the ``file:/data/t`` the metastore gives back, and both are ``/data/t``."""
    if location.startswith("file:"):
        rest = location.removeprefix("file:")
        if rest.startswith("//"):
            authority, _, path = rest[2:].partition("/")
            rest = "/" + path if authority in ("", "localhost") else rest
        location = rest
    return location.rstrip("/")


def register(spark: SparkSession, topic: TopicConfig, registry: Path | None = None) -> list[str]:
    """Register every table of the topic that exists; one line per table saying what was done.

    A parsed table appears with the topic's first JSON record: until then it is reported, not created.
    With ``registry``, each table registered (or found registered where it should be) is recorded
    there, so the next runs' task can tell without a JVM (:mod:`kafkalake.lake.registry`).
    """
    from delta.tables import DeltaTable

    done = []
    for table in topic_tables(topic):
        if table.kind != "bronze" and not DeltaTable.isDeltaTable(spark, table.location):
            done.append(f"{table.name}: no data yet, registered once its first rows land")
            continue
        done.append(register_table(spark, table))
        if registry is not None:
            registry_record(registry, table)
    return done


def register_table(spark: SparkSession, table: Table) -> str:
    """Create the database and table if missing; refuse when the name points elsewhere."""
    spark.sql(f"CREATE DATABASE IF NOT EXISTS `{table.database}`")
    if spark.catalog.tableExists(table.name):
        row = spark.sql(f"DESCRIBE DETAIL {table.name}").select("location").first()
        existing = _normalise(row["location"]) if row else ""
        if existing != _normalise(table.location):
            raise RegistrationError(
                f"{table.name} is already registered at {existing}, not at {table.location}: "
                "another topic or an older catalog claims this name. Drop the old table (DROP TABLE "
                "removes only the catalog entry of an external table) or pick another table name."
            )
        return f"{table.name} already registered at {existing}"
    # A SQL string literal: a backslash would start an escape (`\t` a tab), so it is doubled first.
    location = table.location.replace("\\", "\\\\").replace("'", "\\'")
    kill_points.reached("register:before_create")
    spark.sql(f"CREATE TABLE IF NOT EXISTS {table.name} USING DELTA LOCATION '{location}'")
    return f"registered {table.name} at {table.location}"
