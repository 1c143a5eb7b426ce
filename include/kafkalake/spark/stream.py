"""The topic's stream: one Kafka read, under one checkpoint, into bronze and the parsed tables.

Exactly once comes from two pieces working together: the checkpoint records which offsets each
micro-batch covers before the batch is written, and every table write records the batch id with its
commit (:mod:`kafkalake.spark.batch_writer`), so a batch replayed after a crash is recognised and not written
twice.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from kafkalake.config.tables import topic_tables
from kafkalake.config.topic import TopicConfig
from kafkalake.spark import table_settings
from kafkalake.spark.driver_kafka import partition_ids

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery
    from pyspark.sql.types import StructType

    from kafkalake.spark.batch_writer import BatchWriter


def bronze_schema() -> StructType:
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    return StructType(
        [
            StructField("key", BinaryType()),
            StructField("value", BinaryType()),
            StructField("headers", ArrayType(header)),
            StructField("topic", StringType()),
            StructField("partition", IntegerType()),
            StructField("offset", LongType()),
            StructField("kafka_timestamp", TimestampType()),
            StructField("kafka_timestamp_type", IntegerType()),
            StructField("ingested_at", TimestampType()),
        ]
    )


def ensure_table(spark: SparkSession, topic: TopicConfig) -> frozenset[str]:
    """Check the topic's tables against the catalog, then create bronze if it is missing.

    Creating it up front gives even a topic with no events yet a table to register. Its
    partitioning and properties come from :mod:`kafkalake.spark.table_settings`; bronze only ever grows
    (``delta.appendOnly``: Delta refuses deletes and updates). Every existing table whose partitioning
    differs from the catalog fails the run here, before anything is written, and properties that
    differ are set.

    Returns:
        The kinds of the topic's tables (:attr:`kafkalake.config.tables.Table.kind`) that exist now, so
        the batches need not look for them again.
    """
    existing = table_settings.existing_tables(spark, topic)
    table_settings.check_partitioning(topic, existing)
    kinds = {found.table.kind for found in existing}
    bronze = topic_tables(topic)[0]
    if bronze.kind not in kinds:
        table_settings.create_table(
            spark,
            topic,
            bronze,
            bronze_schema(),
            f"Kafka topic {topic.name}, as landed by kafkalake (bronze: bytes as they came)",
        )
        kinds.add(bronze.kind)
    table_settings.keep_properties(spark, topic, existing)
    return frozenset(kinds)


#: Larger fetches than the Java client's 1 MiB per partition: a backlog drains in fewer round trips
#: (bench: Kafka read -25%). Bounded: at most 16 MiB buffered per consumer. A connection's own
#: settings win.
FETCH_DEFAULTS = {
    "kafka.max.partition.fetch.bytes": str(8 * 1024 * 1024),
    "kafka.fetch.max.bytes": str(16 * 1024 * 1024),
    "kafka.max.poll.records": "10000",
    # How long the broker holds a fetch that finds no new records (Kafka's default: 500 ms). Every
    # task that reads its partition up to the log end, which is every task of a run that catches
    # up, paid those 500 ms idle: after a poll the Java client sends the next fetch ahead (at the
    # log end, so the broker parks it), then Spark asks for the partition's offset range, and the
    # broker answers one request per connection at a time, so that ask waited behind the parked
    # fetch. Bench, 500 events in 6 partitions, one batch: each task 600 -> 120 ms, the batch
    # 4.4 -> 3.2 s. A backlog's fetches find records and never wait; a wait this short only means
    # more empty fetches while a task polls a partition with nothing new, which it stops doing at
    # its range's end.
    "kafka.fetch.max.wait.ms": "10",
}


#: Bounds on how long the job waits for a broker that does not answer, so an outage fails the run
#: (a transient failure Airflow retries with backoff) in about a minute instead of hanging. Measured
#: with the broker stopped mid-run: Spark's driver asks Kafka for offsets through an AdminClient call
#: bounded by ``default.api.timeout.ms`` (Kafka's default 60 s) and tries ``fetchOffset.numRetries``
#: (3) times, so the job failed after ~3 min 20 s; executors wait ``kafkaConsumer.pollTimeoutMs``
#: (``spark.network.timeout``, 120 s) on a fetch that gets nothing. A healthy broker answers these
#: in milliseconds. A connection's own settings win.
TIMEOUT_DEFAULTS = {
    "kafka.request.timeout.ms": "15000",
    "kafka.default.api.timeout.ms": "20000",
    "kafkaConsumer.pollTimeoutMs": "30000",
}


#: Records of a transaction its producer aborted (or has not committed yet) never reach bronze: the
#: Java client's default, read_uncommitted, hands them over like any other record. A connection's
#: own setting wins. Offsets then have gaps (aborted records and transaction markers), which
#: Spark's Kafka source skips without calling them data loss.
ISOLATION_DEFAULTS = {"kafka.isolation.level": "read_committed"}


def source_options(topic: TopicConfig, client_config: Mapping[str, str]) -> dict[str, str]:
    """Options for Spark's Kafka source; Java client settings take the ``kafka.`` prefix."""
    options = {
        # A family reads the members the job found in Kafka at start (start_ingest).
        "subscribe": topic.name,
        "startingOffsets": topic.starting_offsets,
        "failOnDataLoss": str(topic.fail_on_data_loss).lower(),
        "includeHeaders": "true",
        **ISOLATION_DEFAULTS,
        **FETCH_DEFAULTS,
        **TIMEOUT_DEFAULTS,
        **{f"kafka.{k}": v for k, v in client_config.items()},
    }
    if topic.max_offsets_per_trigger is not None:
        options["maxOffsetsPerTrigger"] = str(topic.max_offsets_per_trigger)
    return options


#: Spark's word for "a partition's earliest offset" in a ``startingOffsets`` JSON.
EARLIEST = -2


def starting_offsets_option(topic: str, starting: Mapping[int, int], partitions: Iterable[int]) -> str:
    """The ``startingOffsets`` JSON of a position rebuilt from the tables.

    Spark's Kafka source wants every partition of the topic named once one is (it fails the query
    otherwise, every run): a partition the tables' position does not know, added to the topic since,
    starts at its earliest offset, as all its records are new to the tables.
    """
    offsets = {p: EARLIEST for p in partitions} | dict(starting)
    return json.dumps({topic: {str(p): o for p, o in sorted(offsets.items())}})


#: Spark's word for "a partition's latest offset" in a ``startingOffsets`` JSON.
LATEST = -1


def family_starting_offsets_option(
    starting: Mapping[str, Mapping[int, int] | None], partitions: Mapping[str, Iterable[int]], default: str
) -> str:
    """The ``startingOffsets`` JSON of a family's stream started from the table's position.

    Every partition of every member read is named (Spark refuses the query otherwise): a member's
    offsets the table records, its partitions the table does not know from their earliest offset;
    a member the table holds nothing of (None) from ``default``, the entry's ``starting_offsets``.
    """
    spots: dict[str, dict[str, int]] = {}
    for topic, parts in sorted(partitions.items()):
        known = starting.get(topic)
        fresh = LATEST if known is None and default == "latest" else EARLIEST
        offsets = {p: fresh for p in parts} | dict(known or {})
        spots[topic] = {str(p): o for p, o in sorted(offsets.items())}
    return json.dumps(spots)


def to_bronze(kafka_rows: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    return kafka_rows.select(
        "key",
        "value",
        "headers",
        "topic",
        "partition",
        "offset",
        F.col("timestamp").alias("kafka_timestamp"),
        F.col("timestampType").alias("kafka_timestamp_type"),
        F.current_timestamp().alias("ingested_at"),
    )


def start_ingest(
    spark: SparkSession,
    topic: TopicConfig,
    client_config: Mapping[str, str],
    writer: BatchWriter,
    starting: Mapping[int, int] | None = None,
    *,
    members: Sequence[str] = (),
    family_start: Mapping[str, Mapping[int, int] | None] | None = None,
) -> StreamingQuery:
    """Start the availableNow stream: everything new since the checkpoint, then stop.

    Call :func:`ensure_table` first (once a run: it checks and creates the tables). ``starting``:
    the offsets to start from under a new checkpoint, when the position was rebuilt from the table
    (:func:`kafkalake.lake.start_plan.plan_start`); a checkpoint's own offsets always win.
    """
    options = source_options(topic, client_config)
    if topic.is_family:
        # The members named, not the pattern: specific starting offsets must name every partition.
        options["subscribe"] = ",".join(members)
        if family_start is not None:
            parts = {t: partition_ids(spark, client_config, t) for t in members}
            options["startingOffsets"] = family_starting_offsets_option(
                family_start, parts, topic.starting_offsets
            )
    elif starting is not None:
        now = partition_ids(spark, client_config, topic.name)
        options["startingOffsets"] = starting_offsets_option(topic.name, starting, now)
    source = spark.readStream.format("kafka").options(**options).load()
    query = (
        to_bronze(source)
        .writeStream.queryName(f"kafkalake_{topic.table}")
        .option("checkpointLocation", topic.checkpoint_path)
        .foreachBatch(writer)
        .trigger(availableNow=True)
        .start()
    )
    writer.started(str(query.id))
    return query
