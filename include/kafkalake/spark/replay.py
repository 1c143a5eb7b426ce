"""Replay: rebuild a topic's parsed tables from bronze as of a version or a time, one commit per table.

When a parsing bug ships, the fix is to re-parse the raw zone, not to re-read Kafka (whose data may
be gone). A replay re-parses, with today's code, schema history and catalog settings, every record
in the bronze snapshot ``bronze@as_of`` (Delta time travel), and puts the result in place of what
the parsed and dead-letter tables hold for those records:

* **The window.** Bronze is append-only and each partition's offsets only grow from version to
  version, so "in the snapshot" is ``(partition, offset)`` at or below the snapshot's highest offset
  of that partition. That predicate selects the records to re-parse in bronze and the rows to
  replace in the parsed tables; records bronze received after the snapshot were parsed by the fixed
  code already, and their rows are kept as they are. A :class:`Selection` may narrow the window to
  a range of Kafka timestamps as well.
* **Atomic per table.** The parsed and the dead-letter table each change in one Delta commit
  (``replaceWhere`` with the window's predicate and the new rows; ``mergeSchema`` lets the parsed
  table gain columns): a reader sees the old table or the new one, never a mix. The latest-row
  table is rebuilt whole, from the parsed table's rows plus bronze's tombstones, with the same
  newer-by-(partition, offset) rule as the ingest's MERGE, and overwritten in one commit; a Debezium
  topic's current-state table likewise, from the whole change history.
* **Safety.** The replay holds the topic's checkpoint lock for its whole run, so an ingest cannot
  interleave (it fails with ``checkpoint_locked`` and retries). It reads bronze and never writes
  it, and never touches the checkpoint; it refuses to run while the last ingest left a micro-batch
  half written (``ingest_unfinished``), which the resumed batch would write a second time.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from kafkalake.config.tables import topic_tables
from kafkalake.config.topic import TopicConfig
from kafkalake.core import durations, kill_points
from kafkalake.core.errors import BadConfigError, IngestUnfinishedError, Kind, failure
from kafkalake.lake.checkpoint import read_checkpoint
from kafkalake.lake.checkpoint_lock import checkpoint_lock, fence
from kafkalake.spark import parse_columns, registry_keys
from kafkalake.spark.debezium import rebuild_current
from kafkalake.spark.latest import rebuild_latest
from kafkalake.spark.registry_parser import topic_parser
from kafkalake.spark.table_settings import create_table
from kafkalake.spark.topic_parser import RunStats, TopicParser

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Selection:
    """Which bronze records a replay re-parses.

    The snapshot: ``as_of_version`` or ``as_of_timestamp`` (the last version committed at or
    before it), at most one; neither means bronze's latest version (a full rebuild). Within it,
    optionally only the records whose Kafka timestamp is in ``[kafka_timestamp_from,
    kafka_timestamp_until)``. Timestamps are timezone-aware.
    """

    as_of_version: int | None = None
    as_of_timestamp: datetime | None = None
    kafka_timestamp_from: datetime | None = None
    kafka_timestamp_until: datetime | None = None

    def problems(self) -> list[str]:
        """What is wrong with this selection, as phrases naming the field and value."""
        found = []
        if self.as_of_version is not None and self.as_of_timestamp is not None:
            found.append(
                f"give as_of_version ({self.as_of_version}) or as_of_timestamp "
                f"({self.as_of_timestamp.isoformat()}), not both"
            )
        if self.as_of_version is not None and self.as_of_version < 0:
            found.append(f"as_of_version {self.as_of_version} is negative")
        for name in ("as_of_timestamp", "kafka_timestamp_from", "kafka_timestamp_until"):
            value = getattr(self, name)
            if value is not None and value.tzinfo is None:
                found.append(f"{name} {value.isoformat()} has no time zone")
        start, end = self.kafka_timestamp_from, self.kafka_timestamp_until
        if start is not None and end is not None and start.tzinfo and end.tzinfo and start >= end:
            found.append(
                f"kafka_timestamp_from {start.isoformat()} is not before "
                f"kafka_timestamp_until {end.isoformat()}"
            )
        return found

    def describe(self) -> str:
        if self.as_of_version is not None:
            snapshot = f"as of bronze version {self.as_of_version}"
        elif self.as_of_timestamp is not None:
            snapshot = f"as of {self.as_of_timestamp.isoformat()}"
        else:
            snapshot = "as of bronze's latest version"
        if self.kafka_timestamp_from is None and self.kafka_timestamp_until is None:
            return snapshot
        start = self.kafka_timestamp_from.isoformat() if self.kafka_timestamp_from else "the start"
        end = self.kafka_timestamp_until.isoformat() if self.kafka_timestamp_until else "the end"
        return f"{snapshot}, Kafka timestamps from {start} until {end}"


def parse_timestamp(topic: str, name: str, text: str) -> datetime:
    """An ISO 8601 timestamp from a command line or a DAG param; without a zone it is UTC."""
    try:
        return durations.parse_timestamp(text)
    except ValueError:
        raise BadConfigError(
            failure(
                Kind.BAD_CONFIG,
                f"topic {topic!r}: {name} {text!r} is not an ISO 8601 timestamp, e.g. 2026-11-22T10:00:00Z",
            ).message
        ) from None


def selection_from(
    topic: str,
    as_of_version: int | str | None = None,
    as_of_timestamp: str | None = None,
    kafka_timestamp_from: str | None = None,
    kafka_timestamp_until: str | None = None,
) -> Selection:
    """A :class:`Selection` from text (a command line, DAG params): empty means not given.

    Raises:
        BadConfigError: a value that is not a version or a timestamp, or that contradicts another.
    """

    def given(value: object) -> bool:
        return value is not None and str(value).strip() != ""

    version = None
    if given(as_of_version):
        try:
            version = int(str(as_of_version).strip())
        except ValueError:
            raise bad(topic, f"as_of_version {as_of_version!r} is not a whole number") from None
    stamps = {
        name: parse_timestamp(topic, name, str(value)) if given(value) else None
        for name, value in (
            ("as_of_timestamp", as_of_timestamp),
            ("kafka_timestamp_from", kafka_timestamp_from),
            ("kafka_timestamp_until", kafka_timestamp_until),
        )
    }
    selection = Selection(version, **stamps)
    if problems := selection.problems():
        raise bad(topic, "; ".join(problems))
    return selection


def bad(topic: str, detail: str) -> BadConfigError:
    return BadConfigError(failure(Kind.BAD_CONFIG, f"topic {topic!r}: replay: {detail}").message)


def resolve_version(topic: str, selection: Selection, commits: Sequence[tuple[int, int]]) -> int:
    """The bronze version a replay reads.

    Args:
        commits: bronze's history as (version, commit time in epoch milliseconds), any order.

    Raises:
        BadConfigError: a version beyond the table or older than its log keeps, a timestamp before
            the table's first commit, or a table without history.
    """
    if not commits:
        raise bad(topic, "the bronze table has no history: nothing to replay")
    ordered = sorted(commits)
    first, latest = ordered[0], ordered[-1]
    if selection.as_of_version is not None:
        version = selection.as_of_version
        if version > latest[0]:
            raise bad(topic, f"as_of_version {version} is beyond bronze's latest version {latest[0]}")
        if version < first[0]:
            raise bad(
                topic,
                f"as_of_version {version} is older than the oldest version bronze's log keeps ({first[0]})",
            )
        return version
    if selection.as_of_timestamp is not None:
        millis = int(selection.as_of_timestamp.timestamp() * 1000)
        before = [version for version, committed in ordered if committed <= millis]
        if not before:
            created = datetime.fromtimestamp(first[1] / 1000, UTC).isoformat()
            raise bad(
                topic,
                f"as_of_timestamp {selection.as_of_timestamp.isoformat()} is before bronze's first "
                f"commit (version {first[0]} at {created})",
            )
        return max(before)
    return latest[0]


@dataclass(frozen=True)
class Columns:
    """Where a table keeps a record's Kafka position and timestamp."""

    partition: str
    offset: str
    timestamp: str
    topic: str = "topic"


BRONZE_COLUMNS = Columns("partition", "offset", "kafka_timestamp")
PARSED_COLUMNS = Columns("_kafka.partition", "_kafka.offset", "_kafka.timestamp", "_kafka.topic")
DEAD_LETTER_COLUMNS = Columns("partition", "offset", "kafka_timestamp")


def window_predicate(
    max_offsets: Mapping[int, int] | Mapping[tuple[str, int], int], selection: Selection, columns: Columns
) -> str:
    """The SQL predicate of the replayed records: in the snapshot, and in the Kafka-timestamp range.

    Args:
        max_offsets: the snapshot's highest offset of each partition; a family's, of each
            (member, partition): its members share partition numbers.
    """
    if not max_offsets:
        return "FALSE"

    def spot(where: int | tuple[str, int], offset: int) -> str:
        if isinstance(where, tuple):
            # Kafka topic names are letters, digits, '.', '_' and '-': nothing to escape.
            member, partition = where
            return f"({columns.topic} = '{member}' AND {spot(partition, offset)[1:-1]})"
        return f"({columns.partition} = {where} AND {columns.offset} <= {offset})"

    items: list[tuple[int | tuple[str, int], int]] = sorted(max_offsets.items())
    spots = " OR ".join(spot(where, offset) for where, offset in items)
    terms = [f"({spots})"]
    # Epoch milliseconds: no time-zone parsing, whatever the session's zone.
    if selection.kafka_timestamp_from is not None:
        millis = int(selection.kafka_timestamp_from.timestamp() * 1000)
        terms.append(f"{columns.timestamp} >= timestamp_millis({millis})")
    if selection.kafka_timestamp_until is not None:
        millis = int(selection.kafka_timestamp_until.timestamp() * 1000)
        terms.append(f"{columns.timestamp} < timestamp_millis({millis})")
    return " AND ".join(terms)


@dataclass(frozen=True)
class ReplayResult:
    topic: str
    bronze_version: int
    predicate: str
    stats: RunStats
    #: The version each table's replay commit made, by table path.
    commits: Mapping[str, int] = field(default_factory=dict)

    def summary(self) -> str:
        if not self.commits:
            return f"topic {self.topic}: bronze version {self.bronze_version} holds no record to replay"
        stats = self.stats
        dead = ", ".join(f"{r}={n}" for r, n in sorted(stats.dead_letters.items())) or "none"
        tables = ", ".join(f"{path} v{version}" for path, version in self.commits.items())
        return (
            f"topic {self.topic}: re-parsed {stats.bronze_rows} records of bronze version "
            f"{self.bronze_version} ({self.predicate}): {stats.parsed_rows} parsed "
            f"({stats.rescued_rows} with _rescued_data), {stats.tombstones} tombstones; dead letters: "
            f"{dead}; new schema versions: {stats.schema_versions or 'none'}; one commit per table: {tables}"
        )


def replay(spark: SparkSession, topic: TopicConfig, selection: Selection | None = None) -> ReplayResult:
    """Re-parse the selected bronze records and replace their rows in the parsed tables.

    Raises:
        BadConfigError: a bronze-only topic, no bronze table, or a selection bronze cannot serve.
        IngestUnfinishedError: the last ingest left a micro-batch half written.
        CheckpointLockedError: an ingest (or another replay) of the topic is running.
        SchemaRejectedError, ExpectationFailedError: as in the ingest, for the replayed records.
    """
    from delta.tables import DeltaTable

    selection = selection or Selection()
    if problems := selection.problems():
        raise bad(topic.name, "; ".join(problems))
    if not topic.parsed.enabled:
        raise bad(topic.name, "the topic is bronze only (parsed: false): it has no parsed tables to rebuild")
    if not DeltaTable.isDeltaTable(spark, topic.path):
        raise bad(topic.name, f"no bronze table at {topic.path} yet: nothing to replay")
    with checkpoint_lock(topic.checkpoint_path):
        refuse_unfinished_batch(topic)
        return _replay(spark, topic, selection)


def refuse_unfinished_batch(topic: TopicConfig) -> None:
    try:
        state = read_checkpoint(topic.checkpoint_path, topic.name)
    except ValueError as err:
        # Whether the last ingest finished its batch is unknown; its next run rebuilds the position.
        detail = (
            f"topic {topic.name!r}: the checkpoint cannot be read ({err}), so whether the last ingest "
            "finished its micro-batch is unknown; let the DAG run once (it rebuilds the position from "
            "the table), then replay"
        )
        raise IngestUnfinishedError(failure(Kind.INGEST_UNFINISHED, detail).message) from None
    if state is not None and state.unfinished_batch:
        detail = (
            f"topic {topic.name!r}: the last ingest stopped in the middle of a micro-batch "
            f"(checkpoint {topic.checkpoint_path}); finish it before replaying"
        )
        raise IngestUnfinishedError(failure(Kind.INGEST_UNFINISHED, detail).message)


def _replay(spark: SparkSession, topic: TopicConfig, selection: Selection) -> ReplayResult:
    from pyspark.sql import functions as F

    commits = [
        (int(row[0]), int(row[1]))
        for row in _history(spark, topic.path).select("version", F.unix_millis("timestamp")).collect()
    ]
    version = resolve_version(topic.name, selection, commits)
    snapshot = spark.read.format("delta").option("versionAsOf", version).load(topic.path)
    max_offsets: dict[int, int] | dict[tuple[str, int], int]
    if topic.is_family:
        max_offsets = {
            (str(row[0]), int(row[1])): int(row[2])
            for row in snapshot.groupBy("topic", "partition").agg(F.max("offset")).collect()
            if row[2] is not None
        }
    else:
        max_offsets = {
            int(row[0]): int(row[1])
            for row in snapshot.groupBy("partition").agg(F.max("offset")).collect()
            if row[1] is not None
        }
    stats = RunStats()
    predicate = window_predicate(max_offsets, selection, BRONZE_COLUMNS)
    if not max_offsets:
        return ReplayResult(topic.name, version, predicate, stats)
    log.info(
        "topic %s: replaying %s: bronze version %d, %s", topic.name, selection.describe(), version, predicate
    )
    parser = topic_parser(spark, topic, stats)
    parsed = parser.parse(snapshot.where(predicate), f"replay of bronze version {version}")
    try:
        done = {
            topic.parsed_path: _replace(
                spark,
                topic,
                parse_columns.parsed_rows(parsed.frame),
                topic.parsed_path,
                window_predicate(max_offsets, selection, PARSED_COLUMNS),
                merge_schema=True,
            ),
        }
        kill_points.reached("replay:after_parsed_commit")
        done |= {
            topic.dead_letter_path: _replace(
                spark,
                topic,
                parse_columns.dead_letter_rows(parsed.frame),
                topic.dead_letter_path,
                window_predicate(max_offsets, selection, DEAD_LETTER_COLUMNS),
            ),
        }
        kill_points.reached("replay:after_dead_letter_commit")
        if topic.parsed.latest_by_key:
            done[topic.latest_path] = _rebuild_latest(spark, topic, parser, latest_bronze=max(commits)[0])
        if topic.parsed.debezium:
            # The change history (the parsed table, just replaced) replayed into the source's state.
            rebuild_current(
                spark.read.format("delta").load(topic.parsed_path), topic.current_path, topic.is_family
            )
            done[topic.current_path] = _committed_version(spark, topic.current_path)
        parser.add_stats(parsed.counts)
    finally:
        parsed.frame.unpersist()
    return ReplayResult(topic.name, version, predicate, stats, done)


def _history(spark: SparkSession, path: str) -> DataFrame:
    from delta.tables import DeltaTable

    return DeltaTable.forPath(spark, path).history()


def _committed_version(spark: SparkSession, path: str) -> int:
    return int(_history(spark, path).select("version").first()[0])


def _replace(
    spark: SparkSession,
    topic: TopicConfig,
    rows: DataFrame,
    path: str,
    predicate: str,
    merge_schema: bool = False,
) -> int:
    """Replace the rows matching ``predicate`` with ``rows`` in one commit; return its version."""
    from delta.tables import DeltaTable

    if DeltaTable.isDeltaTable(spark, path):
        writer = rows.write.format("delta").mode("overwrite").option("replaceWhere", predicate)
    else:
        # A topic parsed for the first time (it was bronze only): the replay creates the table, with
        # the catalog's partitioning and properties as an ingest would (a plain append made it
        # unpartitioned, and every later ingest then failed its partitioning check).

        table = next(t for t in topic_tables(topic) if t.location == path)
        kind = table.kind.replace("_", "-")
        create_table(spark, topic, table, rows.schema, f"Kafka topic {topic.name}: {kind} table, by a replay")
        writer = rows.write.format("delta").mode("append")
    if merge_schema:
        writer = writer.option("mergeSchema", "true")
    fence()
    writer.save(path)
    return _committed_version(spark, path)


def _rebuild_latest(spark: SparkSession, topic: TopicConfig, parser: TopicParser, latest_bronze: int) -> int:
    """The latest-row table from every parsed row plus every tombstone bronze holds, in one commit.

    ``latest_bronze``: bronze's version when the replay started; the lock keeps ingests out, so it
    is the version the parsed table matches.
    """
    from pyspark.sql import functions as F

    parsed = spark.read.format("delta").load(topic.parsed_path)
    rows = parsed.withColumn(parse_columns.REASON, F.lit(None).cast("string"))
    if topic.parsed.changelog:
        assert parser.schema is not None
        bronze = spark.read.format("delta").option("versionAsOf", latest_bronze).load(topic.path)
        tombstones = parse_columns.parse_batch(
            bronze.where(F.col("value").isNull()), parser.schema, topic.parsed
        )
        if topic.key_format is not None:
            # Keyed as the stream keys them: by the framed keys' payloads (registry_keys).
            kafka = F.col(parse_columns.KAFKA_COLUMN)
            payload = registry_keys.key_payload(kafka["key"], kafka["headers"], topic.key_format)
            tombstones = tombstones.withColumn(parse_columns.KAFKA_COLUMN, kafka.withField("key", payload))
        rows = rows.unionByName(
            tombstones.select(parse_columns.KAFKA_COLUMN, parse_columns.REASON), allowMissingColumns=True
        )
    rebuild_latest(rows, topic.latest_path)
    return _committed_version(spark, topic.latest_path)
