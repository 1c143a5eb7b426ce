"""How a topic's tables are created and kept: partitioning and table properties.

* At creation (:func:`create_table`): the catalog's partitioning (``maintenance.partition_by``), its
  properties, and ``delta.appendOnly=true`` on bronze. ``ingestion_date`` is a Delta generated
  column (``CAST(ingested_at AS DATE)``), so writers never supply it and readers filtering on
  ``ingestion_date`` read only the matching partitions.
* On every ingest run (:func:`check_partitioning`, :func:`keep_properties`): an existing table
  partitioned otherwise than the catalog says fails the run (Delta cannot re-partition a table in
  place), and properties that differ from the catalog are set.

What each table should look like (:func:`settings_for`) is a pure function; the rest is I/O.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kafkalake.config.maintenance import APPEND_ONLY, INGESTION_DATE
from kafkalake.config.tables import BRONZE_COLUMNS, Table, topic_tables
from kafkalake.config.topic import TopicConfig
from kafkalake.core.errors import BadConfigError, Kind, failure
from kafkalake.lake import store_settings
from kafkalake.lake.checkpoint_lock import fence

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)

#: Where each kind of table keeps its ingestion time; the latest-row table is never partitioned:
#: MERGE updates its rows in place, and a row would move between partitions with every update.
_INGESTED_AT = {"bronze": "ingested_at", "dead_letter": "ingested_at", "parsed": "_kafka.ingested_at"}


#: Delta's per-file statistics (min, max, null count), used to skip files when reading.
STATS_COLUMNS = "delta.dataSkippingStatsColumns"
STATS_PROPERTIES = frozenset({STATS_COLUMNS, "delta.dataSkippingNumIndexedCols"})
#: What bronze is read by: offsets (the catch-up, replays, re-ingests), Kafka time and ingestion
#: time (schema refresh samples). By default Delta keeps statistics of the first 32 columns, which on
#: bronze means a copy of the topic's name per row for a min and a max that never differ, and null
#: counts of the key, the value and the headers (bench: a 500,000-row bronze write 2.04-2.26 s ->
#: 1.74-1.99 s). A topic's own ``maintenance.properties`` setting either property wins.
BRONZE_STATS_COLUMNS = ("partition", "offset", "kafka_timestamp", "ingested_at")


def bronze_stats_columns(layout_columns: Sequence[str]) -> list[str]:
    """Bronze's statistics columns: :data:`BRONZE_STATS_COLUMNS`, and the Z-order or clustering
    columns that are bronze's (Delta lays files out only by columns it keeps statistics of)."""
    extra = [c for c in layout_columns if c in BRONZE_COLUMNS and c not in BRONZE_STATS_COLUMNS]
    return [*BRONZE_STATS_COLUMNS, *extra]


@dataclass(frozen=True)
class GeneratedColumn:
    name: str
    type: str
    #: Spark SQL over the table's other columns; Delta computes it on every write.
    expression: str


@dataclass(frozen=True)
class TableSettings:
    """What the catalog asks of one table."""

    partition_by: tuple[str, ...] = ()
    generated: tuple[GeneratedColumn, ...] = ()
    properties: tuple[tuple[str, str], ...] = ()


#: The Kafka topic a table was created for (:func:`kafkalake.cli.full_refresh.not_ours` reads it).
TOPIC_PROPERTY = "kafkalake.topic"


def settings_for(topic: TopicConfig, table: Table) -> TableSettings:
    """Partitioning and properties of one of the topic's tables (from
    :func:`~kafkalake.config.tables.topic_tables`)."""
    config = topic.maintenance
    properties = dict(config.properties)
    # Whose table this is, read by a full refresh before it deletes anything at the location.
    properties[TOPIC_PROPERTY] = topic.name
    if table.kind == "bronze":
        properties[APPEND_ONLY] = "true"
        if not STATS_PROPERTIES & properties.keys():
            properties[STATS_COLUMNS] = ",".join(bronze_stats_columns(config.layout_columns))
    partition_by: tuple[str, ...] = ()
    generated: tuple[GeneratedColumn, ...] = ()
    if config.partition_by == INGESTION_DATE and table.kind in _INGESTED_AT:
        source = _INGESTED_AT[table.kind]
        generated = (GeneratedColumn(INGESTION_DATE, "DATE", f"CAST({source} AS DATE)"),)
        partition_by = (INGESTION_DATE,)
    elif config.partition_by is not None and config.partition_by != INGESTION_DATE and table.kind == "parsed":
        partition_by = (config.partition_by,)
    return TableSettings(partition_by, generated, tuple(sorted(properties.items())))


def partitioning_mismatch(table: Table, wanted: Sequence[str], actual: Sequence[str]) -> str | None:
    """The on-call message when an existing table is partitioned otherwise than the catalog says."""
    if tuple(wanted) == tuple(actual):
        return None

    def spelled(columns: Sequence[str]) -> str:
        return f"partitioned by {', '.join(columns)}" if columns else "not partitioned"

    now = f"maintenance.partition_by: {actual[0]}" if actual else "no maintenance.partition_by"
    return (
        f"table {table.name} at {table.location} is {spelled(actual)}, but the catalog wants it "
        f"{spelled(wanted)}. Delta cannot re-partition a table in place. Either put the catalog back "
        f"({now}), or rebuild the tables: pause the DAG, run `python -m kafkalake.cli.full_refresh "
        "--topic <topic> --yes` (while Kafka still holds every record) and unpause; the next run "
        "creates them with the new partitioning"
    )


def properties_to_set(wanted: Mapping[str, str], current: Mapping[str, str]) -> dict[str, str]:
    """The wanted properties whose value on the table differs (missing ones included)."""
    return {k: v for k, v in sorted(wanted.items()) if current.get(k) != v}


def as_nullable(schema: StructType) -> StructType:
    """The schema with every field, element and value nullable, at any depth.

    A table created from a DataFrame (an append) gets this; one created with the table builder
    would keep NOT NULL from Kafka's columns and then refuse rows the appended tables accept.
    """
    from pyspark.sql.types import StructType

    def loosen(node: Any) -> Any:
        if isinstance(node, dict):
            loose = {k: loosen(v) for k, v in node.items()}
            for key in ("nullable", "containsNull", "valueContainsNull"):
                if key in loose:
                    loose[key] = True
            return loose
        if isinstance(node, list):
            return [loosen(v) for v in node]
        return node

    return StructType.fromJson(loosen(json.loads(schema.json())))


# ---------------------------------------------------------------------------------------------
# Spark and Delta


def quote_identifier(name: str) -> str:
    """A column name as a Spark SQL identifier: in backticks, its own backticks doubled.

    Also what ``F.col`` and ``DataFrame.select`` need for a name with a dot, which they would
    otherwise read as a struct field.
    """
    return "`" + name.replace("`", "``") + "`"


def delta_ident(location: str) -> str:
    """A table's location as a Spark SQL identifier: ``delta.`<path>```."""
    return "delta.`" + location.replace("`", "``") + "`"


def _quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def set_properties(spark: SparkSession, location: str, changes: Mapping[str, str]) -> None:
    settings = ", ".join(f"{_quote(k)} = {_quote(v)}" for k, v in sorted(changes.items()))
    fence()
    spark.sql(f"ALTER TABLE {delta_ident(location)} SET TBLPROPERTIES ({settings})")


def create_table(
    spark: SparkSession, topic: TopicConfig, table: Table, schema: StructType, comment: str
) -> None:
    """Create the table with its partitioning and properties, unless there is one at its location.

    An existing table is left as it is: :func:`check_partitioning` and :func:`keep_properties`
    look after it.
    """
    from delta.tables import DeltaTable

    if DeltaTable.isDeltaTable(spark, table.location):
        return
    settings = settings_for(topic, table)
    columns = {field.name for field in schema.fields} | {g.name for g in settings.generated}
    missing = [c for c in settings.partition_by if c not in columns]
    if missing:
        raise BadConfigError(
            failure(
                Kind.BAD_CONFIG,
                f"topic {topic.name!r}: maintenance.partition_by is {missing[0]!r}, but the first records "
                f"of {table.name} have no such column (they have {', '.join(sorted(columns))}): fix "
                "maintenance.partition_by, or pin parsed.schema with that field",
            ).message
        )
    builder = (
        DeltaTable.createIfNotExists(spark)
        .location(table.location)
        .addColumns(as_nullable(schema))
        .comment(comment)
    )
    for column in settings.generated:
        builder = builder.addColumn(column.name, column.type, generatedAlwaysAs=column.expression)
    if settings.partition_by:
        builder = builder.partitionedBy(*settings.partition_by)
    for key, value in settings.properties:
        builder = builder.property(key, value)
    fence()
    builder.execute()


@dataclass(frozen=True)
class ExistingTable:
    table: Table
    partition_columns: tuple[str, ...]
    properties: Mapping[str, str]


def existing_tables(spark: SparkSession, topic: TopicConfig) -> list[ExistingTable]:
    """The topic's tables that exist, with their partitioning and properties.

    Read with delta-rs, local or on an object store (with the job's storage settings): the log's
    metadata only, in milliseconds, where Spark's ``DESCRIBE DETAIL`` rebuilt each table's whole
    snapshot (bench: ~12 s of a run's start-up for two passes over four tables).
    """
    found = []
    for table in topic_tables(topic):
        delta = store_settings.open_delta(table.location)
        if delta is not None:
            meta = delta.metadata()
            found.append(ExistingTable(table, tuple(meta.partition_columns), dict(meta.configuration)))
    return found


def check_partitioning(topic: TopicConfig, existing: Sequence[ExistingTable]) -> None:
    """Raise :class:`BadConfigError` when an existing table's partitioning is not the catalog's."""
    for found in existing:
        wanted = settings_for(topic, found.table).partition_by
        reason = partitioning_mismatch(found.table, wanted, found.partition_columns)
        if reason is not None:
            raise BadConfigError(failure(Kind.BAD_CONFIG, f"topic {topic.name!r}: {reason}").message)


def keep_properties(spark: SparkSession, topic: TopicConfig, existing: Sequence[ExistingTable]) -> list[str]:
    """Set, on every existing table, the catalog's properties it lacks or has otherwise."""
    done = []
    for found in existing:
        wanted = dict(settings_for(topic, found.table).properties)
        changes = properties_to_set(wanted, found.properties)
        if changes:
            set_properties(spark, found.table.location, changes)
            line = f"{found.table.name}: set {', '.join(f'{k}={v}' for k, v in changes.items())}"
            log.info("%s", line)
            done.append(line)
    return done
