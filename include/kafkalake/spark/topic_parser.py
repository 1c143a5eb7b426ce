"""Bronze rows → the parsed frame of a topic, under its schema history: what ingest and replay share.

One :class:`TopicParser` per run. It owns the topic's current schema: the first one (pinned in the
catalog, or inferred from the first rows it sees), and its evolution (``addNewColumns`` adds the new
fields and parses the rows again with them; ``failOnNewColumns`` stops the run). It applies the
catalog's expectations, stops the run on a ``fail`` one, and sums what it parsed into
:class:`RunStats`. The ingest stream (:mod:`kafkalake.spark.batch_writer`) calls it once per micro-batch; a
replay (:mod:`kafkalake.spark.replay`) once for a whole bronze snapshot. Writing the tables is theirs.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kafkalake.config.topic import TopicConfig
from kafkalake.core.errors import ExpectationFailedError, SchemaRejectedError
from kafkalake.core.run_metrics import JobMetrics
from kafkalake.lake.schema_algebra import RESCUED_COLUMN, Schema, merge, repaired, schema_problems
from kafkalake.lake.schema_history import SchemaHistory
from kafkalake.spark import debezium, parse_columns, registry_keys
from kafkalake.spark.batch_cache import cached

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, Observation, SparkSession
    from pyspark.sql.types import StructType

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
    #: Offsets Kafka deleted before the run read them (``fail_on_data_loss: false``; kafka/gaps).
    lost_offsets: int = 0

    def summary(self) -> str:
        dead = ", ".join(f"{r}={n}" for r, n in sorted(self.dead_letters.items())) or "none"
        broken = ", ".join(f"{r}={n}" for r, n in sorted(self.expectation_violations.items())) or "none"
        return (
            f"{self.batches} micro-batches, {self.bronze_rows} rows to bronze ({self.bronze_bytes} bytes of "
            f"keys and values), {self.parsed_rows} parsed "
            f"({self.rescued_rows} with _rescued_data), {self.tombstones} tombstones; dead letters: {dead}; "
            f"expectation violations: {broken}; new schema versions: {self.schema_versions or 'none'}"
            + (
                f"; LOST {self.lost_offsets} offsets Kafka deleted before they were read"
                if self.lost_offsets
                else ""
            )
        )

    def add_landed(self, counts: dict[str, Any]) -> None:
        """Add one batch's :func:`landed_aggregates` (an empty batch's sum and max are null)."""
        self.bronze_rows += counts.get("rows") or 0
        self.bronze_bytes += counts.get("bytes") or 0
        newest = counts.get("newest_timestamp_ms")
        if newest is not None and (self.newest_timestamp_ms is None or newest > self.newest_timestamp_ms):
            self.newest_timestamp_ms = newest

    def merge_parsed(self, other: RunStats) -> None:
        """Add what another writer of this run parsed (the catch-up from bronze)."""
        self.parsed_rows += other.parsed_rows
        self.rescued_rows += other.rescued_rows
        self.tombstones += other.tombstones
        self.dead_letters.update(other.dead_letters)
        self.expectation_violations.update(other.expectation_violations)
        self.schema_versions += other.schema_versions

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
            lost_offsets=self.lost_offsets,
        )


def landed_aggregates(size: Column, timestamp: Column) -> list[Column]:
    """Rows, key + value bytes (``size``: :func:`parse_columns.record_bytes`) and newest Kafka
    timestamp of a batch: part of the batch's one aggregate, so measuring what landed costs no
    extra pass over the data."""
    from pyspark.sql import functions as F

    return [
        F.count(F.lit(1)).alias("rows"),
        F.sum(size).alias("bytes"),
        # Milliseconds, not a timestamp: collecting a timestamp would turn it into local time.
        F.max(F.unix_millis(timestamp)).alias("newest_timestamp_ms"),
    ]


def _bronze_aggregates() -> list[Column]:
    """:func:`landed_aggregates` over the bronze table's columns."""
    from pyspark.sql import functions as F

    return landed_aggregates(
        parse_columns.record_bytes(F.col("key"), F.col("value")), F.col("kafka_timestamp")
    )


def landed_counts(bronze: DataFrame) -> dict[str, Any]:
    """:func:`landed_aggregates` of rows with the bronze table's columns."""
    row = bronze.agg(*_bronze_aggregates()).first()
    return row.asDict() if row else {}


def write_measured(bronze: DataFrame, write: Callable[[DataFrame], object]) -> dict[str, Any]:
    """``write(bronze)``, measuring :func:`landed_aggregates` on the way: no cache, no second pass.

    The aggregates ride along the write as a Spark ``Observation``, which Spark fills in before
    the write returns. A write that Delta skipped (its batch was committed by an earlier attempt)
    ran nothing to measure: those rows are counted with one aggregate, as :func:`landed_counts`.
    """
    from pyspark.sql import Observation

    observation = Observation("kafkalake_landed")
    write(bronze.observe(observation, *_bronze_aggregates()))
    measured = observed(observation)
    return measured if measured is not None else landed_counts(bronze)


def observed(observation: Observation) -> dict[str, Any] | None:
    """What ``observation`` measured; None when the write it rode on ran no job (Delta skipped a
    write it had committed before: a replayed batch)."""
    java = observation._jo
    if java is None or not java.future().isCompleted():
        return None
    return dict(observation.get)


@dataclass(frozen=True)
class ParsedFrame:
    """A parsed, cached frame (:func:`parse_columns.parse_batch` + expectations) and its counts."""

    frame: DataFrame
    counts: dict[str, int]

    @property
    def parsed_rows(self) -> int:
        return self.counts.get("parsed") or 0

    @property
    def dead_letters(self) -> int:
        """Rows for the dead-letter table: neither parsed nor a tombstone."""
        rows = self.counts.get("rows") or 0
        return rows - self.parsed_rows - (self.counts.get(parse_columns.TOMBSTONE) or 0)


@dataclass(frozen=True)
class DirectParse:
    """:meth:`TopicParser.direct`: the parsed rows to write, guarded, and their counts once written."""

    rows: DataFrame
    #: The schemas of the parsed and dead-letter tables' rows, as the checked path has them.
    table_schema: StructType
    dead_letter_schema: StructType
    observation: Observation

    def counts(self) -> dict[str, Any] | None:
        """The counts of the rows the write wrote (:func:`observed`)."""
        return observed(self.observation)


class TopicParser:
    """Parses bronze rows of one topic with its current schema; keeps the run's stats."""

    def __init__(self, spark: SparkSession, topic: TopicConfig, stats: RunStats | None = None) -> None:
        self.spark = spark
        self.topic = topic
        self.config = topic.parsed
        self.history = SchemaHistory(topic.schema_dir)
        current = self.history.current()
        self.schema: Schema | None = current.schema if current else None
        #: The schema is this run's guess, not recorded: no sample had a JSON object with a field.
        self._provisional = False
        self.stats = stats if stats is not None else RunStats()

    def parse(self, bronze: DataFrame, source: str) -> ParsedFrame:
        """Parse ``bronze`` (cached by the caller); the result is cached: unpersist it when done.

        Args:
            bronze: rows with the bronze table's columns.
            source: what the rows are, for the schema history ("batch 3", "replay of bronze v5").

        Raises:
            SchemaRejectedError: new fields under ``failOnNewColumns``.
            ExpectationFailedError: a record broke a ``fail`` expectation.
        """
        # The public hook: a registry topic's parser asks the registry here (registry_parser).
        self.ensure_schema(bronze, source)
        bronze = self._payloads(bronze)
        frame = self._parse(bronze)
        try:
            # The counts are the one pass that parses the rows (and fills the cache the writes
            # read); they also tell whether any record has fields the schema lacks.
            counts = self._counts(frame)
            if self._rescued_decide() and counts.get("rescued", 0) > 0 and self._evolve(frame, source):
                frame.unpersist()
                frame = self._parse(bronze)
                counts = self._counts(frame)
            self._check_fail_expectations(frame, counts)
        except BaseException:
            frame.unpersist()
            raise
        return ParsedFrame(frame, counts)

    def ensure_schema(self, bronze: DataFrame, source: str) -> None:
        """The schema to parse ``bronze`` with: the current one (repaired if no table could take
        it), or the topic's first (pinned, or inferred from these rows)."""
        self._ensure_schema(self._payloads(bronze), source)

    def _payloads(self, bronze: DataFrame) -> DataFrame:
        """The values to parse: a Debezium topic's events out of their envelope, if they have one."""
        return debezium.unwrapped(bronze) if self.config.debezium else bronze

    def _inferred(self, texts: DataFrame) -> Schema:
        schema = parse_columns.infer_schema(texts, self.config)
        return debezium.shaped(schema) if self.config.debezium else schema

    def _ensure_schema(self, bronze: DataFrame, source: str) -> None:
        if self.schema is None or self._provisional:
            self.schema = self._first_schema(bronze, source)
        elif problems := schema_problems(self.schema):
            self.schema = self._repair(self.schema, problems)

    def direct(self, bronze: DataFrame) -> DirectParse:
        """The parsed rows of ``bronze`` to write straight from the parse: no cache, no counts pass.

        For a batch where every record is a parsed row that needs nothing decided before it is
        written, which is most batches. The counts ride along the write as an ``Observation``. A
        record that needs the checked path of :meth:`parse` (a dead letter, a record to rescue
        while the evolution mode may add or refuse its fields, a broken ``fail`` expectation, a
        tombstone) makes the write's job fail before Delta commits anything
        (:data:`parse_columns.CHECKED_PATH_NEEDED`); the caller then takes that path.
        Call :meth:`ensure_schema` first.
        """
        from pyspark.sql import Observation
        from pyspark.sql import functions as F

        frame = self._parsed_frame(self._payloads(bronze))
        needs_check = F.col(parse_columns.REASON).isNotNull()
        if self._rescued_decide() and RESCUED_COLUMN in frame.columns:
            needs_check = needs_check | F.col(RESCUED_COLUMN).isNotNull()
        for expectation in self.config.expectations:
            if expectation.action == "fail":
                needs_check = needs_check | F.col(parse_columns.broken_column(expectation))
        observation = Observation("kafkalake_parsed")
        key = F.col(parse_columns.KAFKA_COLUMN)["key"]
        size = parse_columns.record_bytes(key, F.col(parse_columns.VALUE))
        observed = frame.observe(observation, *self._count_columns(frame, size))
        return DirectParse(
            rows=parse_columns.guarded_rows(observed, needs_check),
            table_schema=parse_columns.parsed_rows(frame).schema,
            dead_letter_schema=parse_columns.dead_letter_rows(frame).schema,
            observation=observation,
        )

    def _rescued_decide(self) -> bool:
        """Whether a rescued record decides something before its batch is written: its new fields
        are added (``addNewColumns``) or refused (``failOnNewColumns``)."""
        return self.config.evolution in ("addNewColumns", "failOnNewColumns")

    def _parsed_frame(self, bronze: DataFrame) -> DataFrame:
        """:func:`parse_columns.parse_batch` with the expectations marked: what both paths write."""
        assert self.schema is not None
        frame = parse_columns.parse_batch(bronze, self.schema, self.config)
        if self.topic.key_format is not None:
            # A JSON Schema value's keys (an Avro key needs the registry: registry_parser's parser).
            frame = registry_keys.checked_keys(frame, self.topic.key_format)
        return parse_columns.with_expectations(frame, self.config.expectations)

    def _parse(self, bronze: DataFrame) -> DataFrame:
        return cached(parse_columns.for_cache(self._parsed_frame(bronze)))

    def add_stats(self, counts: dict[str, int]) -> None:
        """Count a parsed frame into the run's stats, once its tables are written."""
        self.stats.add_landed(counts)
        self.stats.parsed_rows += counts.get("parsed", 0)
        self.stats.rescued_rows += counts.get("rescued", 0)
        self.stats.tombstones += counts.get(parse_columns.TOMBSTONE, 0)
        for name in parse_columns.DEAD_LETTER_REASONS:
            if counts.get(name):
                self.stats.dead_letters[name] += counts[name]
        for expectation in self.config.expectations:
            broken = counts.get(parse_columns.broken_column(expectation), 0)
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

    def _counts(self, frame: DataFrame) -> dict[str, int]:
        """Every count a parsed frame reports, in one pass over the cached frame."""
        from pyspark.sql import functions as F

        row = frame.agg(*self._count_columns(frame, F.col(parse_columns.RECORD_BYTES))).first()
        return row.asDict() if row else {}

    def _count_columns(self, frame: DataFrame, size: Column) -> list[Column]:
        """The aggregates behind :meth:`add_stats`; ``size``: a record's key + value bytes."""
        from pyspark.sql import functions as F

        reason = F.col(parse_columns.REASON)
        kafka = F.col(parse_columns.KAFKA_COLUMN)
        aggregates = [
            *landed_aggregates(size, kafka["timestamp"]),
            F.count_if(reason.isNull()).alias("parsed"),
        ]
        if RESCUED_COLUMN in frame.columns:
            aggregates.append(
                F.count_if(reason.isNull() & F.col(RESCUED_COLUMN).isNotNull()).alias("rescued")
            )
        for name in (*parse_columns.DEAD_LETTER_REASONS, parse_columns.TOMBSTONE):
            aggregates.append(F.count_if(reason == name).alias(name))
        for expectation in self.config.expectations:
            column = parse_columns.broken_column(expectation)
            if column in frame.columns:
                aggregates.append(F.count_if(F.col(column)).alias(column))
        return aggregates

    def _first_schema(self, bronze: DataFrame, source: str) -> Schema:
        """The topic's first schema: pinned in the catalog, or inferred from these rows.

        Rows with no JSON object that has a field (a test message, a tombstone, malformed values)
        teach nothing: their schema is used for them but not recorded, and the next batch infers
        again. Recorded, it was the topic's schema for good under the modes that add no field
        (``rescue``, ``none``: every later field rescued or dropped) and refused every field under
        ``failOnNewColumns``.
        """
        pinned = parse_columns.pinned_schema(self.config)
        if pinned is not None:
            schema = pinned
            origin = "pinned in the catalog"
        else:
            schema = self._inferred(parse_columns.sample_texts(bronze, self.config))
            origin = f"inferred from {source}"
        provisional = pinned is None and not schema["fields"]
        schema = parse_columns.with_catalog_hints(schema, self.config)
        if provisional:
            log.info(
                "topic %s: %s has no JSON object with a field; no schema recorded yet",
                self.topic.name,
                source,
            )
            self._provisional = True
        else:
            self._persist(schema, origin)
        return schema

    def _repair(self, schema: Schema, problems: list[str]) -> Schema:
        """A current version no table could take (recorded by an older release): the repaired one,
        recorded as the next version."""
        fixed = repaired(schema)
        if schema_problems(fixed):
            # Nested too deep: the table has that column already; only a rebuild helps (RUNBOOK).
            log.warning("topic %s: the current schema %s", self.topic.name, "; ".join(problems))
            return schema
        self._persist(fixed, f"repaired ({'; '.join(problems)})")
        return fixed

    def _persist(self, schema: Schema, origin: str) -> None:
        written = self.history.write(schema, origin)
        self._provisional = False
        if written:
            self.stats.schema_versions.append(written.version)
            log.info(
                "topic %s: schema version %d (%s): %s",
                self.topic.name,
                written.version,
                origin,
                "; ".join(written.changes),
            )

    def _evolve(self, frame: DataFrame, source: str) -> bool:
        """New fields in rescued records: add them (addNewColumns) or stop the run (failOnNewColumns)."""
        assert self.schema is not None
        texts = parse_columns.valid_json_texts(
            frame, self.config.sample_rows, only_rescued=True, framed=self.config.framed
        )
        merged = merge(self.schema, self._inferred(texts), max_columns=self.config.max_columns)
        skipped = [str(c) for c in merged.changes if c.kind == "skipped"]
        if skipped:
            log.warning("topic %s: %s", self.topic.name, "; ".join(skipped))
        if not merged.added:
            return False
        new_schema = parse_columns.with_catalog_hints(merged.schema, self.config, self.schema)
        fields = ", ".join(str(c) for c in merged.added)
        if self.config.evolution == "failOnNewColumns":
            self.history.propose(new_schema, f"new fields in {source}: {fields}")
            raise SchemaRejectedError(
                f"topic {self.topic.name!r}: new fields under evolution mode failOnNewColumns: {fields}. "
                f"The proposed schema is in {self.history.directory}/pending.json"
            )
        self._persist(new_schema, f"new fields in {source}")
        self.schema = new_schema
        return True

    def _check_fail_expectations(self, frame: DataFrame, counts: dict[str, Any]) -> None:
        from pyspark.sql import functions as F

        for expectation in self.config.expectations:
            if expectation.action != "fail":
                continue
            broken = counts.get(parse_columns.broken_column(expectation), 0)
            if not broken:
                continue
            examples = (
                frame.where(F.col(parse_columns.broken_column(expectation)))
                .select(
                    F.col(parse_columns.KAFKA_COLUMN)["partition"],
                    F.col(parse_columns.KAFKA_COLUMN)["offset"],
                )
                .limit(5)
                .collect()
            )
            spots = ", ".join(f"partition {r[0]} offset {r[1]}" for r in examples)
            raise ExpectationFailedError(
                f"topic {self.topic.name!r}: {broken} records break expectation {expectation.name!r} "
                f"({expectation.rule}), whose action is fail; e.g. {spots}"
            )
