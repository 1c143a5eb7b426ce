"""One micro-batch of Kafka records into every table of its topic, exactly once.

The stream reads Kafka once, under one checkpoint; each micro-batch is written by
:class:`BatchWriter` (``foreachBatch``) to bronze, then the parsed, dead-letter and latest-row
tables. Every write is idempotent: Delta records ``(txnAppId, txnVersion)`` = (the streaming
query's id, the batch id) in the commit and skips a write it has already committed. A batch replayed
after a crash or a retry therefore fills in only the tables it had not reached. The query id is
the one stored in the checkpoint, as Delta's own streaming sink uses: a new checkpoint is a new id,
so its batch 0 is never mistaken for an old one.

Bronze is written first and unconditionally: whatever happens to parsing later (a rejected schema,
a failing expectation), the bytes are safe and the run can resume from the same batch.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kafkalake import parsing
from kafkalake.catalog import TopicConfig
from kafkalake.failures import ExpectationFailedError, SchemaRejectedError
from kafkalake.run_metrics import JobMetrics
from kafkalake.schemas import RESCUED_COLUMN, Schema, SchemaHistory, merge

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

log = logging.getLogger(__name__)


@dataclass
class RunStats:
    """What one run landed, summed over its micro-batches."""

    batches: int = 0
    bronze_rows: int = 0
    #: Bytes of the Kafka keys and values landed in bronze.
    bronze_bytes: int = 0
    #: Newest Kafka timestamp landed, ms since the epoch.
    newest_timestamp_ms: int | None = None
    parsed_rows: int = 0
    rescued_rows: int = 0
    tombstones: int = 0
    dead_letters: Counter[str] = field(default_factory=Counter)
    expectation_violations: Counter[str] = field(default_factory=Counter)
    schema_versions: list[int] = field(default_factory=list)

    def summary(self) -> str:
        dead = ", ".join(f"{r}={n}" for r, n in sorted(self.dead_letters.items())) or "none"
        broken = ", ".join(f"{r}={n}" for r, n in sorted(self.expectation_violations.items())) or "none"
        return (
            f"{self.batches} micro-batches, {self.bronze_rows} rows to bronze ({self.bronze_bytes} bytes of "
            f"keys and values), {self.parsed_rows} parsed "
            f"({self.rescued_rows} with _rescued_data), {self.tombstones} tombstones; dead letters: {dead}; "
            f"expectation violations: {broken}; new schema versions: {self.schema_versions or 'none'}"
        )

    def add_landed(self, counts: dict[str, Any]) -> None:
        """Add one batch's :func:`landed_aggregates` (an empty batch's sum and max are null)."""
        self.bronze_rows += counts.get("rows") or 0
        self.bronze_bytes += counts.get("bytes") or 0
        newest = counts.get("newest_timestamp_ms")
        if newest is not None and (self.newest_timestamp_ms is None or newest > self.newest_timestamp_ms):
            self.newest_timestamp_ms = newest

    def job_metrics(self, startup_seconds: float, processing_seconds: float) -> JobMetrics:
        return JobMetrics(
            batches=self.batches,
            rows=self.bronze_rows,
            bytes=self.bronze_bytes,
            parsed_rows=self.parsed_rows,
            dead_letters=dict(sorted(self.dead_letters.items())),
            newest_timestamp_ms=self.newest_timestamp_ms,
            startup_seconds=startup_seconds,
            processing_seconds=processing_seconds,
        )


def landed_aggregates(key: Column, value: Column, timestamp: Column) -> list[Column]:
    """Rows, key + value bytes and newest Kafka timestamp of a batch: part of the batch's one
    aggregate, so measuring what landed costs no extra pass over the data."""
    from pyspark.sql import functions as F

    return [
        F.count(F.lit(1)).alias("rows"),
        F.sum(F.coalesce(F.octet_length(key), F.lit(0)) + F.coalesce(F.octet_length(value), F.lit(0))).alias(
            "bytes"
        ),
        # Milliseconds, not a timestamp: collecting a timestamp would turn it into local time.
        F.max(F.unix_millis(timestamp)).alias("newest_timestamp_ms"),
    ]


def write_idempotent(
    frame: DataFrame, path: str, app_id: str, batch_id: int, merge_schema: bool = False
) -> None:
    writer = (
        frame.write.format("delta")
        .mode("append")
        .option("txnAppId", app_id)
        .option("txnVersion", str(batch_id))
    )
    if merge_schema:
        writer = writer.option("mergeSchema", "true")
    writer.save(path)


class BatchWriter:
    """The ``foreachBatch`` function of a topic's stream; keeps the run's stats and its failure."""

    def __init__(self, spark: SparkSession, topic: TopicConfig) -> None:
        self.spark = spark
        self.topic = topic
        self.config = topic.parsed
        self.history = SchemaHistory(topic.schema_dir)
        current = self.history.current()
        self.schema: Schema | None = current.schema if current else None
        self.stats = RunStats()
        #: The typed error a batch raised, kept because Spark hands the caller only a wrapped copy.
        self.failure: Exception | None = None
        self._query_id: str | None = None
        self._started = threading.Event()

    def started(self, query_id: str) -> None:
        """Called with the streaming query's id once it started; batches wait for it."""
        self._query_id = query_id
        self._started.set()

    @property
    def app_id(self) -> str:
        if not self._started.wait(timeout=300):
            raise RuntimeError("the streaming query never reported its id")
        assert self._query_id is not None
        return self._query_id

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        try:
            self._write(batch, batch_id)
        except Exception as err:
            self.failure = err
            raise

    def _write(self, batch: DataFrame, batch_id: int) -> None:
        from pyspark import StorageLevel

        app_id = self.app_id
        # One read of Kafka per batch: the bronze rows are cached, and every table is written from them.
        bronze = batch.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            write_idempotent(bronze, self.topic.path, app_id, batch_id)
            self.stats.batches += 1
            if self.config.enabled:
                self._write_parsed(bronze, batch_id, app_id)
            else:
                # Bronze only: one aggregate over the cached batch, which the write just filled.
                from pyspark.sql import functions as F

                landed = bronze.agg(
                    *landed_aggregates(F.col("key"), F.col("value"), F.col("kafka_timestamp"))
                )
                row = landed.first()
                self.stats.add_landed(row.asDict() if row else {})
        finally:
            bronze.unpersist()

    def _write_parsed(self, bronze: DataFrame, batch_id: int, app_id: str) -> None:
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        if self.schema is None:
            self.schema = self._first_schema(bronze, batch_id)
        frame = parsing.parse_batch(bronze, self.schema, self.config).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            if (
                self.config.evolution in ("addNewColumns", "failOnNewColumns")
                and not frame.where(F.col(RESCUED_COLUMN).isNotNull()).isEmpty()
            ):
                evolved = self._evolve(frame, batch_id)
                if evolved:
                    frame.unpersist()
                    frame = parsing.parse_batch(bronze, self.schema, self.config).persist(
                        StorageLevel.MEMORY_AND_DISK
                    )
            frame = parsing.with_expectations(frame, self.config.expectations)
            counts = self._counts(frame)
            self._check_fail_expectations(frame, counts)
            # mergeSchema: the history decides the schema (new fields added, or accepted); the table follows.
            write_idempotent(parsing.parsed_rows(frame), self.topic.parsed_path, app_id, batch_id, True)
            write_idempotent(parsing.dead_letter_rows(frame), self.topic.dead_letter_path, app_id, batch_id)
            if self.config.latest_by_key:
                from kafkalake.latest import merge_latest

                merge_latest(self.spark, frame, self.topic.latest_path, app_id, batch_id)
            self._add_stats(counts)
        finally:
            frame.unpersist()

    def _counts(self, frame: DataFrame) -> dict[str, int]:
        """Every count a batch reports, in one pass over the cached batch."""
        from pyspark.sql import functions as F

        reason = F.col(parsing.REASON)
        kafka = F.col(parsing.KAFKA_COLUMN)
        aggregates = [
            *landed_aggregates(kafka["key"], F.col(parsing.VALUE), kafka["timestamp"]),
            F.count_if(reason.isNull()).alias("parsed"),
        ]
        if RESCUED_COLUMN in frame.columns:
            aggregates.append(
                F.count_if(reason.isNull() & F.col(RESCUED_COLUMN).isNotNull()).alias("rescued")
            )
        for name in (*parsing.DEAD_LETTER_REASONS, parsing.TOMBSTONE):
            aggregates.append(F.count_if(reason == name).alias(name))
        for expectation in self.config.expectations:
            column = parsing.broken_column(expectation)
            if column in frame.columns:
                aggregates.append(F.count_if(F.col(column)).alias(column))
        row = frame.agg(*aggregates).first()
        return row.asDict() if row else {}

    def _add_stats(self, counts: dict[str, int]) -> None:
        self.stats.add_landed(counts)
        self.stats.parsed_rows += counts.get("parsed", 0)
        self.stats.rescued_rows += counts.get("rescued", 0)
        self.stats.tombstones += counts.get(parsing.TOMBSTONE, 0)
        for name in parsing.DEAD_LETTER_REASONS:
            if counts.get(name):
                self.stats.dead_letters[name] += counts[name]
        for expectation in self.config.expectations:
            broken = counts.get(parsing.broken_column(expectation), 0)
            if broken:
                self.stats.expectation_violations[expectation.name] += broken
                if expectation.action == "drop":
                    self.stats.dead_letters[f"expectation:{expectation.name}"] += broken
                if expectation.action == "warn":
                    log.warning(
                        "topic %s: %d records break expectation %r (%s); kept (action warn)",
                        self.topic.name,
                        broken,
                        expectation.name,
                        expectation.rule,
                    )

    def _first_schema(self, bronze: DataFrame, batch_id: int) -> Schema:
        """The topic's first schema: pinned in the catalog, or inferred from this batch."""
        pinned = parsing.pinned_schema(self.config)
        if pinned is not None:
            schema = pinned
            source = "pinned in the catalog"
        else:
            probe = parsing.parse_batch(bronze, {"type": "struct", "fields": []}, self.config)
            schema = parsing.infer_schema(
                self.spark, parsing.valid_json_texts(probe, self.config.sample_rows)
            )
            source = f"inferred from batch {batch_id}"
        schema = parsing.with_catalog_hints(schema, self.config)
        self._persist(schema, source)
        return schema

    def _persist(self, schema: Schema, source: str) -> None:
        written = self.history.write(schema, source)
        if written:
            self.stats.schema_versions.append(written.version)
            log.info(
                "topic %s: schema version %d (%s): %s",
                self.topic.name,
                written.version,
                source,
                "; ".join(written.changes),
            )

    def _evolve(self, frame: DataFrame, batch_id: int) -> bool:
        """New fields in rescued records: add them (addNewColumns) or stop the run (failOnNewColumns)."""
        assert self.schema is not None
        texts = parsing.valid_json_texts(frame, self.config.sample_rows, only_rescued=True)
        merged = merge(self.schema, parsing.infer_schema(self.spark, texts))
        if not merged.added:
            return False
        new_schema = parsing.with_catalog_hints(merged.schema, self.config)
        fields = ", ".join(str(c) for c in merged.added)
        if self.config.evolution == "failOnNewColumns":
            self.history.propose(new_schema, f"new fields in batch {batch_id}: {fields}")
            raise SchemaRejectedError(
                f"topic {self.topic.name!r}: new fields under evolution mode failOnNewColumns: {fields}. "
                f"The proposed schema is in {self.history.directory}/pending.json"
            )
        self._persist(new_schema, f"new fields in batch {batch_id}")
        self.schema = new_schema
        return True

    def _check_fail_expectations(self, frame: DataFrame, counts: dict[str, Any]) -> None:
        from pyspark.sql import functions as F

        for expectation in self.config.expectations:
            if expectation.action != "fail":
                continue
            broken = counts.get(parsing.broken_column(expectation), 0)
            if not broken:
                continue
            examples = (
                frame.where(F.col(parsing.broken_column(expectation)))
                .select(F.col(parsing.KAFKA_COLUMN)["partition"], F.col(parsing.KAFKA_COLUMN)["offset"])
                .limit(5)
                .collect()
            )
            spots = ", ".join(f"partition {r[0]} offset {r[1]}" for r in examples)
            raise ExpectationFailedError(
                f"topic {self.topic.name!r}: {broken} records break expectation {expectation.name!r} "
                f"({expectation.rule}), whose action is fail; e.g. {spots}"
            )
