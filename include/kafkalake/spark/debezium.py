"""Debezium change events (``format: debezium``): the change history and the source table's current state.

A Debezium topic is parsed like any JSON topic, so its parsed table is the change history: one row
per event, with ``op``, ``ts_ms``, ``source`` (the connector's position: ``source.lsn`` for
PostgreSQL), ``before`` and ``after`` as columns. Three things differ:

* **The envelope.** Connect's JSON converter with schemas wraps every event as ``{"schema": ...,
  "payload": ...}``: the payload is what is parsed (:func:`unwrapped`). Bronze keeps the bytes as
  they came; a dead letter keeps the payload.
* **The schema.** ``before`` and ``after`` are the same row type, but a sample of inserts sees
  ``before`` only as null (a string column) and one of deletes ``after``: each takes the fields of
  both (:func:`shaped`), so a delete's ``before`` and a later update's ``after`` parse into their
  columns, and a new source column reaches both.
* **The current-state table** (``<table>_current``), keyed by the Kafka record key (Debezium's key
  is the row's primary key): the source table as it is, one row per key with ``after``'s fields as
  columns, and ``_kafka`` (key, partition, offset, timestamp), ``_cdc_op`` and ``_cdc_position``.
  Each micro-batch is MERGEd (:func:`merge_current`): ``c``/``r``/``u`` upsert ``after``, ``d``
  deletes the key, tombstones are skipped; a primary-key change (Debezium's delete of the old key,
  then a create of the new) leaves the new key only. A truncate (``op: t``) deletes every row whose
  position is below the truncate's, and the batch's events from before it are left out.

A family (``topics`` / ``topic_pattern`` with one table) whose members carry one source table's
events (its shards, regions) keys the current state by (member topic, key), as a family's latest
table is (``by_topic``): ``_kafka`` holds the topic too, each member's rows are its own source
table's state, and a truncate empties its own member's rows only (each database's positions compare
only with its own).

Order: a key's events are ordered by offset within a partition and, across partitions (a key that
moved partition when partitions were added), by the source position, then partition and offset:
``source.lsn`` for PostgreSQL (the WAL position of the change: two changes of one row, or a row and
a truncate of its table, never commit out of that order); other connectors by the event's
``ts_ms`` (:func:`position`), coarser. Snapshot reads (``op: r``) carry the snapshot's position,
below every change streamed after it, so a snapshot followed by streaming converges.

Exactly once: the MERGE carries the batch's (``txnAppId``, ``txnVersion``), which Delta skips when
the batch is replayed under the same streaming query, and records the batch's Kafka offsets in its
commit (it is the batch's last write: the position carrier). A batch is MERGEd only with the
records at or past the offsets the table recorded (:func:`kafkalake.lake.table_position`), so a
batch written again under a new query id (a lost checkpoint) never applies an old event a second
time: re-applying an insert after a later delete would bring the row back.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from kafkalake.lake.schema_algebra import Schema, merge
from kafkalake.spark import parse_columns
from kafkalake.spark.latest import ensure_columns, idempotent_commit, keyed_merge, newest_per_key
from kafkalake.spark.table_settings import quote_identifier

if TYPE_CHECKING:
    from datetime import datetime

    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from kafkalake.config.topic import TopicConfig

OP = "_cdc_op"
POSITION = "_cdc_position"
_ROW_EVENTS = ("c", "r", "u", "d")
_TRUNCATE = "t"
_NEWER = (
    "CASE WHEN s._kafka.partition = t._kafka.partition THEN s._kafka.offset > t._kafka.offset"
    f" ELSE struct(s.{POSITION}, s._kafka.partition, s._kafka.offset)"
    f" > struct(t.{POSITION}, t._kafka.partition, t._kafka.offset) END"
)


def unwrapped(bronze: DataFrame) -> DataFrame:
    """Bronze rows with each ``{"schema": ..., "payload": ...}`` value replaced by its payload's
    JSON text; other values (bare events, tombstones, what is no JSON) as they are."""
    from pyspark.sql import functions as F

    text = F.col("value").cast("string")
    envelope = F.coalesce(
        F.array_sort(F.json_object_keys(text)) == F.array(F.lit("payload"), F.lit("schema")), F.lit(False)
    )
    payload = F.encode(F.get_json_object(text, "$.payload"), "UTF-8")
    return bronze.withColumn("value", F.when(envelope, payload).otherwise(F.col("value")))


def _row_type(field: dict[str, Any] | None) -> dict[str, Any] | None:
    if field is not None and isinstance(field["type"], dict) and field["type"].get("type") == "struct":
        return field["type"]
    return None


def shaped(schema: Schema) -> Schema:
    """``schema`` with ``before`` and ``after`` both of the row type the two of them know (fields of
    ``after`` first); as it is when neither is an object yet, or a field is missing."""
    fields = {f["name"]: f for f in schema["fields"]}
    after, before = _row_type(fields.get("after")), _row_type(fields.get("before"))
    if after is None and before is None:
        return schema
    row = merge(after or before or {}, before or after or {}).schema
    result = copy.deepcopy(schema)
    for field in result["fields"]:
        if field["name"] in ("before", "after"):
            field["type"] = copy.deepcopy(row)
    return result


def position(frame: DataFrame) -> Column:
    """An event's source position: ``source.lsn`` where the connector gives one (PostgreSQL),
    else the event's ``ts_ms``."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    source = frame.schema["source"].dataType if "source" in frame.columns else None
    if isinstance(source, StructType) and "lsn" in source.fieldNames():
        return F.col("source")["lsn"].cast("bigint")
    return F.col("ts_ms").cast("bigint") if "ts_ms" in frame.columns else F.lit(None).cast("bigint")


def _events(frame: DataFrame, by_topic: bool = False) -> DataFrame:
    """The parsed events of a parsed frame (no dead letters, no tombstones), with their op and
    position, and ``after``'s fields as columns; ``by_topic`` (a family): ``_kafka`` holds the
    member topic too, part of the key."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    kafka = F.col(parse_columns.KAFKA_COLUMN)
    events = frame.where(F.col(parse_columns.REASON).isNull())
    after = frame.schema["after"].dataType if "after" in frame.columns else None
    names = after.fieldNames() if isinstance(after, StructType) else []
    columns = [F.col("after")[name].alias(name) for name in names]
    return events.select(
        *columns,
        F.struct(
            *([kafka["topic"].alias("topic")] if by_topic else []),
            kafka["key"].alias("key"),
            kafka["partition"].alias("partition"),
            kafka["offset"].alias("offset"),
            kafka["timestamp"].alias("timestamp"),
        ).alias("_kafka"),
        (F.col("op") if "op" in frame.columns else F.lit(None)).cast("string").alias(OP),
        position(frame).alias(POSITION),
    )


def _current_rows(events: DataFrame, truncates: dict[str, int], by_topic: bool) -> DataFrame:
    """Each key's newest row event (of those after its topic's last truncate, when there is one)."""
    from pyspark.sql import functions as F

    rows = events.where(F.col(OP).isin(*_ROW_EVENTS) & F.col("_kafka.key").isNotNull())
    if truncates:
        # A null position is no later than a truncate: left out, as the comparison leaves it.
        rows = rows.where(~F.coalesce(F.expr(_truncated(truncates, by_topic, "", "<=")), F.lit(True)))
    return _newest(rows, by_topic)


def _newest(rows: DataFrame, by_topic: bool) -> DataFrame:
    """Each key's newest of ``rows`` (events, :func:`_events`), in source order."""
    from pyspark.sql import functions as F

    record = F.struct(*[F.col(quote_identifier(c)) for c in rows.columns])
    return newest_per_key(rows, record, POSITION, by_topic=by_topic).select("latest.*")


def current_schema(frame: DataFrame, by_topic: bool = False) -> StructType:
    """The current-state table's columns for a batch of parsed events."""
    return _events(frame, by_topic).schema


def _last_truncates(events: DataFrame, by_topic: bool) -> dict[str, int]:
    """Each topic's last truncate position (a single topic's under ``""``).

    Per topic: a family's members are their own source tables (a shard's, a region's), whose
    truncates empty only their own rows, and whose positions (each database's LSN) do not compare."""
    from pyspark.sql import functions as F

    group = F.col("_kafka.topic") if by_topic else F.lit("")
    rows = events.where(F.col(OP) == _TRUNCATE).groupBy(group.alias("t")).agg(F.max(POSITION).alias("p"))
    return {str(r["t"]): int(r["p"]) for r in rows.collect() if r["p"] is not None}


def _truncated(truncates: dict[str, int], by_topic: bool, alias: str, compare: str) -> str:
    """SQL: a row (of table ``alias``, or unaliased) at a position ``compare`` its topic's last
    truncate. Topic names are Kafka's (letters, digits, ``._-``): safe in a quoted literal."""
    prefix = f"{alias}." if alias else ""
    older = [f"{prefix}{POSITION} {compare} {below}" for below in truncates.values()]
    if by_topic:
        older = [f"({prefix}_kafka.topic = '{t}' AND {o})" for t, o in zip(truncates, older, strict=True)]
    return " OR ".join(older) or "false"


def merge_current(
    spark: SparkSession,
    frame: DataFrame,
    path: str,
    app_id: str,
    batch_id: int,
    metadata: str | None = None,
    *,
    by_topic: bool = False,
) -> None:
    """MERGE a batch's parsed events (the cached parsed frame, with records the table holds left
    out by the caller) into the current-state table, in one commit; ``by_topic`` (a family): keyed
    by (member topic, key)."""
    events = _events(frame, by_topic)
    truncates = _last_truncates(events, by_topic)
    source = _current_rows(events, truncates, by_topic)
    ensure_columns(spark, path, events.schema)
    with idempotent_commit(spark, app_id, batch_id, metadata):
        merging = keyed_merge(spark, path, source, source.columns, f"s.{OP} = 'd'", _NEWER, by_topic=by_topic)
        if truncates:
            merging = merging.whenNotMatchedBySourceDelete(
                condition=_truncated(truncates, by_topic, "t", "<")
            )
        merging.execute()


def settle_after_run(spark: SparkSession, topic: TopicConfig, run_started: datetime, batches: int) -> None:
    """After a stream run of more than one batch: the run's deletes and truncates applied once more
    to the current-state table (deletes only, so applying one again changes nothing).

    Why: the Kafka source splits a micro-batch across partitions by offsets, so a key that moved
    partition can have its delete (new partition) in an earlier batch than its insert from before
    the move (old partition); that insert's MERGE finds no row and brings the key back. Likewise an
    event from before a truncate in another partition. A run reads every partition up to the end
    offsets it started with, so the older event is in the same run (as for the latest table:
    :func:`kafkalake.spark.latest.settle_after_run`).
    """
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    if not topic.parsed.debezium or batches < 2 or not DeltaTable.isDeltaTable(spark, topic.current_path):
        return
    by_topic = topic.is_family
    history = spark.read.format("delta").load(topic.parsed_path)
    landed = history.where(F.col("_kafka.ingested_at") >= F.lit(run_started))
    events = _events(landed.withColumn(parse_columns.REASON, F.lit(None).cast("string")), by_topic)
    newest = _newest(events.where((F.col(OP) == "d") & F.col("_kafka.key").isNotNull()), by_topic)
    table = DeltaTable.forPath(spark, topic.current_path)
    same = "t._kafka.key = s._kafka.key" + (" AND t._kafka.topic = s._kafka.topic" if by_topic else "")
    table.alias("t").merge(newest.alias("s"), same).whenMatchedDelete(condition=_NEWER).execute()
    truncates = _last_truncates(events, by_topic)
    if truncates:
        table.delete(_truncated(truncates, by_topic, "", "<"))


def rebuild_current(events_frame: DataFrame, path: str, by_topic: bool = False) -> None:
    """Overwrite the current-state table with the state every event of ``events_frame`` (the whole
    change history, as the parsed table holds it) leads to, in one commit: each key's newest row
    event after its topic's last truncate, unless it is a delete."""
    from pyspark.sql import functions as F

    events = _events(events_frame.withColumn(parse_columns.REASON, F.lit(None).cast("string")), by_topic)
    rows = _current_rows(events, _last_truncates(events, by_topic), by_topic).where(F.col(OP) != "d")
    rows.write.format("delta").mode("overwrite").option("mergeSchema", "true").save(path)
