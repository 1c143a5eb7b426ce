"""Guarded re-ingest: re-read Kafka from a point in time and land only what the tables lack.

Gap repair after a bronze restore or lost files. The stream cannot do it: it resumes from its
checkpoint, which is past the gap. A re-ingest (:mod:`kafkalake.run_modes`: a manual run with
``reingest_from`` and ``confirm_reingest``) instead

1. plans a **window** per partition: from Kafka's offset for the timestamp (the first record at or
   after it, what ``offsetsForTimes`` and Spark's ``startingOffsetsByTimestamp`` give) up to the
   offsets the checkpoint has committed. Records past the checkpoint are the stream's: landing them
   here would land them twice once the stream reads them. The window is refused, with nothing
   written, when Kafka has already deleted records the window starts before (:func:`plan_window`);
2. under the checkpoint's run lock (so no stream writes meanwhile), reads the window from Kafka as a
   **batch** (``spark.read``; the checkpoint is never touched), at most ``max_offsets_per_trigger``
   records at a time;
3. writes each chunk through the stream's own writer (:class:`~kafkalake.landing.BatchWriter`), but
   to each table only the records whose (partition, offset) it does not hold yet: bronze gets what
   bronze lacks; the parsed, dead-letter and latest tables get what the parsed and dead-letter tables
   lack (anti-joins on the tables as read at that moment, under the lock). Nothing is written twice,
   and a retry or a second identical re-ingest writes nothing it already wrote.

The window plan is pure; asking Kafka for offsets and the Spark read are the I/O edges.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from kafkalake.catalog import TopicConfig
from kafkalake.landing import BatchWriter
from kafkalake.offsets import Offsets, read_checkpoint, watermarks
from kafkalake.run_lock import checkpoint_lock, local_path
from kafkalake.run_modes import refused

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

#: Records per chunk when the topic sets no ``max_offsets_per_trigger``.
DEFAULT_CHUNK_RECORDS = 100_000


@dataclass(frozen=True)
class Window:
    """What a re-ingest re-reads: offsets ``start[p]`` (inclusive) to ``end[p]`` (exclusive)."""

    topic: str
    since: datetime
    start: Offsets
    end: Offsets

    @property
    def ranges(self) -> dict[int, tuple[int, int]]:
        """The partitions with something to re-read, and their offset ranges."""
        return {p: (s, self.end[p]) for p, s in sorted(self.start.items()) if s < self.end[p]}

    @property
    def records(self) -> int:
        return sum(end - start for start, end in self.ranges.values())

    @property
    def app_id(self) -> str:
        """Delta's ``txnAppId`` of the re-ingest's writes: stable for the topic and its start time,
        and never a streaming query's id, so its writes are told apart in the tables' history."""
        return f"kafkalake-reingest:{self.topic}:{self.since.isoformat()}"

    def describe(self) -> str:
        parts = ", ".join(f"partition {p}: {s}..{e - 1}" for p, (s, e) in self.ranges.items()) or "none"
        return f"{self.records} records of topic {self.topic!r} since {self.since.isoformat()} ({parts})"


def plan_window(
    topic: str,
    since: datetime,
    at_time: Mapping[int, int | None],
    marks: Mapping[int, tuple[int, int]],
    committed: Offsets | None,
) -> Window:
    """The window to re-read, or a refusal (:class:`~kafkalake.failures.ReingestRefusedError`).

    Args:
        topic: the topic's name.
        since: the re-ingest's start.
        at_time: per partition, Kafka's offset for ``since`` (the first record at or after it);
            None when the partition has no record that late.
        marks: per partition, Kafka's (earliest, end) offsets.
        committed: the checkpoint's committed offsets; None when there is no checkpoint.
    """
    if committed is None:
        raise refused(
            f"topic {topic!r} has no checkpoint yet: nothing was landed, so there is no gap to repair. "
            "Run the DAG normally"
        )
    expired = {
        p: earliest
        for p, (earliest, _end) in sorted(marks.items())
        if (offset := at_time.get(p)) is not None and earliest > 0 and offset <= earliest
    }
    if expired:
        spots = ", ".join(f"partition {p} starts at offset {e}" for p, e in expired.items())
        raise refused(
            f"topic {topic!r}: Kafka no longer holds the records from {since.isoformat()} on ({spots}; "
            "the records before were deleted by retention, so some of the window is gone). Nothing "
            "was written. Choose a later reingest_from, after the first record Kafka still holds"
        )
    end = {p: min(committed.get(p, 0), high) for p, (_low, high) in marks.items()}
    start = {}
    for p, (_low, high) in marks.items():
        offset = at_time.get(p)
        start[p] = min(high if offset is None else offset, end[p])
    return Window(topic, since, start, end)


def chunks(window: Window, max_records: int) -> Iterator[dict[int, tuple[int, int]]]:
    """The window in pieces of at most ``max_records`` records (about), every partition advancing."""
    ranges = window.ranges
    if not ranges:
        return
    step = max(1, max_records // len(ranges))
    position = {p: start for p, (start, _end) in ranges.items()}
    while any(position[p] < end for p, (_start, end) in ranges.items()):
        piece = {}
        for p, (_start, end) in ranges.items():
            if position[p] < end:
                piece[p] = (position[p], min(end, position[p] + step))
                position[p] = piece[p][1]
        yield piece


# ---------------------------------------------------------------------------------------------
# I/O: Kafka offsets (confluent-kafka, no JVM) and the checkpoint


def offsets_for_time(
    client_config: Mapping[str, str],
    topic: str,
    partitions: list[int],
    since: datetime,
    timeout: float = 15.0,
) -> dict[int, int | None]:
    """Kafka's offset for ``since`` per partition: the first record at or after it; None if none."""
    from confluent_kafka import Consumer, TopicPartition

    millis = int(since.timestamp() * 1000)
    consumer = Consumer({**client_config, "group.id": "kafkalake-reingest", "enable.auto.commit": "false"})
    try:
        found = consumer.offsets_for_times([TopicPartition(topic, p, millis) for p in partitions], timeout)
    finally:
        consumer.close()
    return {tp.partition: (tp.offset if tp.offset >= 0 else None) for tp in found}


def local_checkpoint(topic_name: str, checkpoint: str) -> Path:
    """The checkpoint's local path; a re-ingest needs one (its lock and its offsets are files)."""
    path = local_path(checkpoint)
    if path is None:
        raise refused(
            f"topic {topic_name!r}: its checkpoint {checkpoint} is not on a local filesystem; a re-ingest "
            "reads the checkpoint's offsets and holds its run lock, which need local (or file://) tables"
        )
    return path


def resolve_window(
    topic_name: str, checkpoint: str, client_config: Mapping[str, str], since: datetime
) -> Window:
    """Ask Kafka and the checkpoint, then :func:`plan_window`."""
    state = read_checkpoint(local_checkpoint(topic_name, checkpoint), topic_name)
    marks = watermarks(client_config, topic_name)
    at_time = offsets_for_time(client_config, topic_name, sorted(marks), since)
    return plan_window(topic_name, since, at_time, marks, state.committed if state else None)


# ---------------------------------------------------------------------------------------------
# Spark: read the window as a batch, write what each table lacks


class GapWriter(BatchWriter):
    """The stream's writer, writing to each table only the records it does not hold yet."""

    def __init__(self, spark: SparkSession, topic: TopicConfig, app_id: str) -> None:
        super().__init__(spark, topic)
        self.started(app_id)
        #: Rows written, per group of tables ("bronze", "parsed").
        self.landed: Counter[str] = Counter()
        self._cached: list[DataFrame] = []

    def rows_for(self, tables: str, bronze: DataFrame) -> DataFrame | None:
        from pyspark import StorageLevel

        missing = bronze.join(self._present(tables), ["partition", "offset"], "left_anti")
        missing = missing.persist(StorageLevel.MEMORY_AND_DISK)
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
            sources = [(self.topic.path, F.col("partition"), F.col("offset"))]
        else:
            kafka = F.col("_kafka")
            sources = [
                (self.topic.parsed_path, kafka["partition"], kafka["offset"]),
                (self.topic.dead_letter_path, F.col("partition"), F.col("offset")),
            ]
        present = self.spark.createDataFrame([], "partition int, offset bigint")
        for path, partition, offset in sources:
            if _is_delta_table(self.spark, path):
                found = self.spark.read.format("delta").load(path)
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
    from kafkalake.bronze import source_options, to_bronze

    stream_only = ("subscribe", "startingOffsets", "maxOffsetsPerTrigger")
    options = {k: v for k, v in source_options(topic, client_config).items() if k not in stream_only}
    options["assign"] = json.dumps({topic.name: sorted(piece)})
    options["startingOffsets"] = json.dumps({topic.name: {str(p): s for p, (s, _e) in piece.items()}})
    options["endingOffsets"] = json.dumps({topic.name: {str(p): e for p, (_s, e) in piece.items()}})
    return to_bronze(spark.read.format("kafka").options(**options).load())


def land_window(
    spark: SparkSession, topic: TopicConfig, client_config: Mapping[str, str], window: Window
) -> GapWriter:
    """Land the window's records each table lacks; the caller holds the checkpoint's run lock."""
    writer = GapWriter(spark, topic, window.app_id)
    # txnVersion: Delta skips a write whose version is not above the last one recorded for the app
    # id. The anti-joins are what keep rows from landing twice; a version from the clock only keeps
    # a later re-ingest from the same start time from being mistaken for this one.
    first_version = time.time_ns() // 1_000_000 * 10_000
    max_records = topic.max_offsets_per_trigger or DEFAULT_CHUNK_RECORDS
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
