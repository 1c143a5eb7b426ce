"""The latest-row-per-key table: one row per Kafka key, like a database table fed by a changelog.

A key is the pair (topic, record key): a family's members (docs/catalog.md) are different topics,
whose keys name different things, so ``42`` of ``orders.eu`` and ``42`` of ``orders.us`` are two
rows. A single topic's rows all have its name, so for it the pair is the record key alone.

Each micro-batch is reduced to its latest record per key, then MERGEd: a newer record replaces the
key's row, a tombstone (null value, on a changelog topic) deletes it. Newer is a higher offset in the
same partition; Kafka orders nothing across partitions, where a key's records meet when it moved
(partitions were added to the topic, so keys hash to others): there the later Kafka timestamp wins
(then partition, offset), never the higher partition number, which kept a key's row from before the
move for good when its new partition had a lower number. A row is
replaced only by a record that comes later in Kafka, so replaying a batch changes nothing; on top
of that the MERGE carries the batch's (txnAppId, txnVersion), which Delta records and skips when
seen again. Records without a key cannot be upserted and are left to the parsed table.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

from kafkalake.lake.checkpoint_lock import fence
from kafkalake.spark import parse_columns, registry_keys
from kafkalake.spark.table_settings import as_nullable, quote_identifier

if TYPE_CHECKING:
    from datetime import datetime

    from delta.tables import DeltaMergeBuilder
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from kafkalake.config.topic import TopicConfig

_TOMBSTONE_FLAG = "_kafka_is_tombstone"
_NEWER = (
    "CASE WHEN s._kafka.partition = t._kafka.partition THEN s._kafka.offset > t._kafka.offset"
    " ELSE struct(s._kafka.timestamp, s._kafka.partition, s._kafka.offset)"
    " > struct(t._kafka.timestamp, t._kafka.partition, t._kafka.offset) END"
)
_TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
_TXN_VERSION = "spark.databricks.delta.write.txnVersion"
_USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"


def latest_per_key(frame: DataFrame) -> DataFrame:
    """The batch's last record per key, with a tombstone flag; keyless and dead-letter rows dropped."""
    from pyspark.sql import functions as F

    reason = F.col(parse_columns.REASON)
    rows = frame.where(
        (reason.isNull() | (reason == parse_columns.TOMBSTONE)) & F.col("_kafka.key").isNotNull()
    )
    # Quoted: a column named by a JSON key may hold a dot or a backtick.
    columns = [F.col(quote_identifier(c)) for c in frame.columns if not c.startswith("_kafka_")]
    record = F.struct(
        *columns, F.coalesce(reason == parse_columns.TOMBSTONE, F.lit(False)).alias(_TOMBSTONE_FLAG)
    )
    return newest_per_key(rows, record, by_topic=True).select("latest.*")


def newest_per_key(
    rows: DataFrame, record: Column, position: str | None = None, *, by_topic: bool = False
) -> DataFrame:
    """``record`` (a struct with the row's ``_kafka``) of each key's newest row, as ``latest``:
    each partition's last record of the key, then the latest of those, as :data:`_NEWER` orders
    them; with ``position`` (a field of ``record``), by that field instead of the Kafka timestamp
    (a Debezium topic's source position: :mod:`kafkalake.spark.debezium`). ``by_topic``: a key is
    (``_kafka.topic``, ``_kafka.key``), as in the latest table."""
    from pyspark.sql import functions as F

    key = (F.struct(F.col("_kafka.topic"), F.col("_kafka.key")) if by_topic else F.col("_kafka.key")).alias(
        "_kafka_group_key"
    )
    partition = (
        F.struct(F.col("_kafka.topic"), F.col("_kafka.partition")) if by_topic else F.col("_kafka.partition")
    )
    per_partition = rows.groupBy(key, partition.alias("_kafka_group_partition")).agg(
        F.max_by(record, F.col("_kafka.offset")).alias("latest")
    )
    kafka = F.col("latest._kafka")
    first = F.col("latest")[position] if position else kafka["timestamp"]
    order = F.struct(first, kafka["partition"], kafka["offset"])
    return per_partition.groupBy("_kafka_group_key").agg(F.max_by("latest", order).alias("latest"))


def latest_schema(frame: DataFrame) -> StructType:
    """The latest-row table's columns for a batch of parsed rows."""
    return latest_per_key(frame).drop(_TOMBSTONE_FLAG).schema


def merge_latest(
    spark: SparkSession, frame: DataFrame, path: str, app_id: str, batch_id: int, metadata: str | None = None
) -> None:
    source = latest_per_key(frame)
    columns = [c for c in source.columns if c != _TOMBSTONE_FLAG]
    ensure_columns(spark, path, latest_schema(frame))
    with idempotent_commit(spark, app_id, batch_id, metadata):
        keyed_merge(spark, path, source, columns, f"s.{_TOMBSTONE_FLAG}", _NEWER, by_topic=True).execute()


#: The MERGE's match of a key: the record key, or (topic, record key) (:func:`newest_per_key`).
_SAME_KEY = "t._kafka.key = s._kafka.key"
_SAME_TOPIC_AND_KEY = f"t._kafka.topic = s._kafka.topic AND {_SAME_KEY}"


def keyed_merge(
    spark: SparkSession,
    path: str,
    source: DataFrame,
    columns: list[str],
    deleted: str,
    newer: str,
    *,
    by_topic: bool = False,
) -> DeltaMergeBuilder:
    """The MERGE of each key's newest record (``source``, one row per ``_kafka.key``) into the table
    at ``path``: a newer record (``newer``, over ``s`` and ``t``) replaces the key's row, or deletes
    it where ``deleted``; a new key is inserted unless ``deleted``."""
    from delta.tables import DeltaTable

    assignments = {quote_identifier(c): f"s.{quote_identifier(c)}" for c in columns}
    return (
        DeltaTable.forPath(spark, path)
        .alias("t")
        .merge(source.alias("s"), _SAME_TOPIC_AND_KEY if by_topic else _SAME_KEY)
        .whenMatchedDelete(condition=f"{deleted} AND {newer}")
        .whenMatchedUpdate(condition=f"NOT {deleted} AND {newer}", set=assignments)
        .whenNotMatchedInsert(condition=f"NOT {deleted}", values=assignments)
    )


def ensure_columns(spark: SparkSession, path: str, wanted: StructType) -> None:
    """Create the table at ``path`` with ``wanted``'s columns, or give it those it lacks, with an
    empty append (``mergeSchema``); nothing when it has them all."""
    from delta.tables import DeltaTable

    exists = DeltaTable.isDeltaTable(spark, path)
    # Nullability aside: the table is created all-nullable (table_settings.as_nullable), while a
    # batch's struct columns are NOT NULL; compared as they were, every batch made the empty
    # append below (a job with a Python worker, ~1-2.5 s a batch) that changed nothing.
    if not exists or as_nullable(DeltaTable.forPath(spark, path).toDF().schema) != as_nullable(wanted):
        empty = spark.createDataFrame([], wanted)
        fence()
        empty.write.format("delta").mode("append").option("mergeSchema", "true").save(path)


@contextlib.contextmanager
def idempotent_commit(
    spark: SparkSession, app_id: str, batch_id: int, metadata: str | None = None
) -> Iterator[None]:
    """The session's next Delta commit (a MERGE) carries (``app_id``, ``batch_id``), which Delta
    records and skips when seen again, and ``metadata`` (the batch's Kafka position)."""
    spark.conf.set(_TXN_APP_ID, app_id)
    spark.conf.set(_TXN_VERSION, str(batch_id))
    if metadata is not None:
        spark.conf.set(_USER_METADATA, metadata)
    try:
        # Every commit a run makes is fenced (the S3 run lock's lease: checkpoint_lock.fence).
        fence()
        yield
    finally:
        spark.conf.unset(_TXN_APP_ID)
        spark.conf.unset(_TXN_VERSION)
        spark.conf.unset(_USER_METADATA)


def delete_by_tombstones(spark: SparkSession, bronze: DataFrame, path: str) -> None:
    """Apply again the tombstones among ``bronze`` rows: a key's row is deleted where its newest
    tombstone is newer (:data:`_NEWER`) than the row. Nothing is inserted or updated, so a tombstone
    applied before changes nothing.

    Why: the Kafka source splits a micro-batch across partitions by offsets, so a key that moved
    partition (partitions added) can have its tombstone (new partition) in an earlier batch than a
    record from before the move (old partition). That record's MERGE finds no row, and the
    not-matched insert, which has no memory of the delete, brought the key back."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    tombstones = bronze.where(F.col("value").isNull() & F.col("key").isNotNull()).select(
        F.struct("topic", "key", "partition", "offset", F.col("kafka_timestamp").alias("timestamp")).alias(
            "_kafka"
        )
    )
    newest = newest_per_key(tombstones, F.struct("_kafka"), by_topic=True).select("latest.*")
    fence()
    (
        DeltaTable.forPath(spark, path)
        .alias("t")
        .merge(newest.alias("s"), _SAME_TOPIC_AND_KEY)
        .whenMatchedDelete(condition=_NEWER)
        .execute()
    )


def settle_after_run(spark: SparkSession, topic: TopicConfig, run_started: datetime, batches: int) -> None:
    """After a stream run of more than one batch on a changelog topic's latest table: the tombstones
    bronze got in the run, applied once more (:func:`delete_by_tombstones`). A run of one batch
    orders a key's records within it, so it needs nothing."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    parsed = topic.parsed
    if not (parsed.enabled and parsed.latest_by_key and parsed.changelog) or batches < 2:
        return
    if not DeltaTable.isDeltaTable(spark, topic.latest_path):
        return
    landed = spark.read.format("delta").load(topic.path).where(F.col("ingested_at") >= F.lit(run_started))
    if topic.key_format is not None:
        # The latest table is keyed by the framed keys' payloads (registry_keys).
        landed = landed.withColumn(
            "key", registry_keys.key_payload(F.col("key"), F.col("headers"), topic.key_format)
        )
    delete_by_tombstones(spark, landed, topic.latest_path)


def rebuild_latest(frame: DataFrame, path: str) -> None:
    """Overwrite the table with the last record per key of ``frame``, in one commit.

    ``frame`` holds every record of the topic (parsed rows and, on a changelog topic, tombstones,
    with :data:`parse_columns.REASON`); the same newer-by-(partition, offset) rule as :func:`merge_latest`
    picks each key's row, and a key whose last record is a tombstone has none. Columns the parsed
    table gained are added (``mergeSchema``); none is dropped.
    """
    from pyspark.sql import functions as F

    latest = latest_per_key(frame)
    rows = latest.where(~F.col(_TOMBSTONE_FLAG)).drop(_TOMBSTONE_FLAG)
    fence()
    rows.write.format("delta").mode("overwrite").option("mergeSchema", "true").save(path)
