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

from kafkalake.catalog import TopicConfig

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class RegistrationError(RuntimeError):
    pass


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
    return location.removeprefix("file:").rstrip("/")


def register(spark: SparkSession, topic: TopicConfig) -> str:
    """Create the database and table if missing; refuse when the name points elsewhere."""
    spark.sql(f"CREATE DATABASE IF NOT EXISTS `{topic.database}`")
    if spark.catalog.tableExists(topic.qualified_table):
        row = spark.sql(f"DESCRIBE DETAIL {topic.qualified_table}").select("location").first()
        existing = _normalise(row["location"]) if row else ""
        if existing != _normalise(topic.path):
            raise RegistrationError(
                f"{topic.qualified_table} is already registered at {existing}, not at {topic.path}: "
                "another topic or an older catalog claims this name. Drop the old table (DROP TABLE "
                "removes only the catalog entry of an external table) or pick another 'table'."
            )
        return f"{topic.qualified_table} already registered at {existing}"
    location = topic.path.replace("'", "\\'")
    spark.sql(f"CREATE TABLE IF NOT EXISTS {topic.qualified_table} USING DELTA LOCATION '{location}'")
    return f"registered {topic.qualified_table} at {topic.path}"
