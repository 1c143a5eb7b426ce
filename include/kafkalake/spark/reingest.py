"""Guarded re-ingest: re-read Kafka from a point in time and land only what the tables lack.

Gap repair after a bronze restore or lost files. The stream cannot do it: it resumes from its
checkpoint, which is past the gap. A re-ingest (:mod:`kafkalake.core.run_mode`: a manual run with
``reingest_from`` and ``confirm_reingest``) instead

1. plans a **window** per partition: from Kafka's offset for the timestamp (the first record at or
   after it, what ``offsetsForTimes`` and Spark's ``startingOffsetsByTimestamp`` give) up to the
   offsets the checkpoint has committed. Records past the checkpoint are the stream's: landing them
   here would land them twice once the stream reads them. The window is refused, with nothing
   written, when Kafka has already deleted records the window starts before (:func:`plan_window`);
2. under the checkpoint's run lock (so no stream writes meanwhile), reads the window from Kafka as a
   **batch** (``spark.read``; the checkpoint is never touched), at most ``max_offsets_per_trigger``
   records at a time (and never more than a parsed topic's default batch: each chunk is cached);
3. writes each chunk through the stream's own writer (:class:`~kafkalake.spark.batch_writer.BatchWriter`), but
   to each table only the records whose (partition, offset) it does not hold yet: bronze gets what
   bronze lacks; the parsed, dead-letter and latest tables get what the parsed and dead-letter tables
   lack (anti-joins on the tables as read at that moment, under the lock). Nothing is written twice,
   and a retry or a second identical re-ingest writes nothing it already wrote.

The window plan is pure; asking Kafka for offsets and the Spark read are the I/O edges.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING

from kafkalake.config.tables import topic_tables
from kafkalake.config.topic import TopicConfig
from kafkalake.kafka.windows import Window, chunk_records, chunks, resolve_family_windows, resolve_window
from kafkalake.lake.checkpoint_lock import checkpoint_lock
from kafkalake.lake.txn_versions import first_txn_version
from kafkalake.spark.batch_cache import cached
from kafkalake.spark.batch_writer import BatchWriter
from kafkalake.spark.stream import source_options, to_bronze

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

# ---------------------------------------------------------------------------------------------
# Spark: read the window as a batch, write what each table lacks


class GapWriter(BatchWriter):
    """The stream's writer, writing to each table only the records it does not hold yet."""

    def __init__(
        self, spark: SparkSession, topic: TopicConfig, app_id: str, only_topic: str | None = None
    ) -> None:
        super().__init__(spark, topic)
        self.started(app_id)
        #: A family's member: bronze holds other topics' rows at the same (partition, offset).
        self.only_topic = only_topic
        self.records_position = False
        #: Rows written, per group of tables ("bronze", "parsed").
        self.landed: Counter[str] = Counter()
        self._cached: list[DataFrame] = []

    def rows_for(self, tables: str, bronze: DataFrame) -> DataFrame | None:
        missing = cached(bronze.join(self._present(tables), ["partition", "offset"], "left_anti"))
        self._cached.append(missing)
        count = missing.count()
        log.info(
            "topic %s: %d records of this chunk are missing from the %s tables",
            self.topic.name,
            count,
            tables,
        )
        if count == 0:
            return None
        self.landed[tables] += count
        return missing

    def release(self) -> None:
        for frame in self._cached:
            frame.unpersist()
        self._cached.clear()

    def _present(self, tables: str) -> DataFrame:
        """(partition, offset) of every record the group's tables hold, read now (under the lock)."""
        from pyspark.sql import functions as F

        if tables == "bronze":
            sources = [(self.topic.path, F.col("topic"), F.col("partition"), F.col("offset"))]
        else:
            kafka = F.col("_kafka")
            sources = [
                (self.topic.parsed_path, kafka["topic"], kafka["partition"], kafka["offset"]),
                (self.topic.dead_letter_path, F.col("topic"), F.col("partition"), F.col("offset")),
            ]
        present = self.spark.createDataFrame([], "partition int, offset bigint")
        for path, member, partition, offset in sources:
            if _is_delta_table(self.spark, path):
                found = self.spark.read.format("delta").load(path)
                if self.only_topic is not None:
                    found = found.where(member == self.only_topic)
                present = present.unionByName(
                    found.select(partition.alias("partition"), offset.alias("offset"))
                )
        return present


def _is_delta_table(spark: SparkSession, path: str) -> bool:
    from delta.tables import DeltaTable

    return bool(DeltaTable.isDeltaTable(spark, path))


def read_chunk(
    spark: SparkSession,
    topic: TopicConfig,
    client_config: Mapping[str, str],
    piece: Mapping[int, tuple[int, int]],
) -> DataFrame:
    """One chunk of the window from Kafka, as a batch, in bronze's columns."""
    stream_only = ("subscribe", "startingOffsets", "maxOffsetsPerTrigger")
    options = {k: v for k, v in source_options(topic, client_config).items() if k not in stream_only}
    options["assign"] = json.dumps({topic.name: sorted(piece)})
    options["startingOffsets"] = json.dumps({topic.name: {str(p): s for p, (s, _e) in piece.items()}})
    options["endingOffsets"] = json.dumps({topic.name: {str(p): e for p, (_s, e) in piece.items()}})
    return to_bronze(spark.read.format("kafka").options(**options).load())


def land_window(
    spark: SparkSession,
    topic: TopicConfig,
    client_config: Mapping[str, str],
    window: Window,
    only_topic: str | None = None,
) -> GapWriter:
    """Land the window's records each table lacks; the caller holds the checkpoint's run lock."""
    writer = GapWriter(spark, topic, window.app_id, only_topic)
    # The anti-joins keep rows from landing twice; the versions only have to be new (txn_versions).
    first_version = first_txn_version([t.location for t in topic_tables(topic)], window.app_id)
    max_records = chunk_records(topic.max_offsets_per_trigger)
    try:
        for number, piece in enumerate(chunks(window, max_records)):
            writer(read_chunk(spark, topic, client_config, piece), first_version + number)
            writer.release()
    finally:
        writer.release()
    return writer


@dataclass(frozen=True)
class Outcome:
    window: Window
    #: Rows written to bronze, and to the parsed tables (parsed + dead letters).
    bronze_rows: int
    parsed_rows: int

    def summary(self) -> str:
        return (
            f"re-read {self.window.describe()}; wrote what the tables lacked: {self.bronze_rows} rows "
            f"to bronze, {self.parsed_rows} to the parsed and dead-letter tables"
        )


def reingest(
    spark: SparkSession, topic: TopicConfig, client_config: Mapping[str, str], since: datetime
) -> Outcome:
    """The whole re-ingest, under the checkpoint's run lock: plan the window, land what is missing.

    Raises:
        ReingestRefusedError: the window cannot be re-read (see :func:`plan_window`); nothing written.
        CheckpointLockedError: a run of the topic holds the lock (transient: retried).
    """
    with checkpoint_lock(topic.checkpoint_path):
        window = resolve_window(topic.name, topic.checkpoint_path, client_config, since)
        log.info("re-ingest window: %s (txnAppId %s)", window.describe(), window.app_id)
        if not window.records:
            return Outcome(window, 0, 0)
        writer = land_window(spark, topic, client_config, window)
    return Outcome(window, writer.landed["bronze"], writer.landed["parsed"])


def reingest_family(
    spark: SparkSession, topic: TopicConfig, client_config: Mapping[str, str], since: datetime
) -> list[Outcome]:
    """:func:`reingest` of a family, member by member, under the family's run lock: every member's
    window is planned first (one refused, nothing written), then each is landed as a single topic's
    would be, comparing with the member's own rows in bronze.

    Raises:
        ReingestRefusedError: a member's window cannot be re-read; nothing written.
        CheckpointLockedError: a run of the family holds the lock (transient: retried).
    """
    outcomes: list[Outcome] = []
    with checkpoint_lock(topic.checkpoint_path):
        windows = resolve_family_windows(topic.name, topic.checkpoint_path, client_config, since)
        for member, window in windows.items():
            log.info("re-ingest window of %s: %s (txnAppId %s)", member, window.describe(), window.app_id)
            if not window.records:
                outcomes.append(Outcome(window, 0, 0))
                continue
            alone = replace(topic, name=member, members=(), topic_pattern=None)
            writer = land_window(spark, alone, client_config, window, only_topic=member)
            outcomes.append(Outcome(window, writer.landed["bronze"], writer.landed["parsed"]))
    return outcomes
