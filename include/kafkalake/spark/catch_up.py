"""The parsed tables catch up from bronze after their side was parked (:mod:`kafkalake.lake.parsed_backlog`).

Reads bronze from the backlog's start offsets up to what bronze holds now, in chunks of at most
``max_offsets_per_trigger`` records (:func:`~kafkalake.kafka.windows.chunk_records`), and runs each
chunk through the stream's own parsing and writer.
It is safe to run again after a crash at any point: the parsed and dead-letter tables get only the
``(partition, offset)`` pairs they lack (an anti-join on each table as it is now), and the latest-row
table's MERGE replaces a key's row only with a later record, so a record merged twice changes
nothing. After each chunk the backlog's start moves past it; when all is parsed the backlog is removed.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from kafkalake.config.tables import topic_tables
from kafkalake.config.topic import TopicConfig
from kafkalake.core import kill_points
from kafkalake.kafka.windows import Window, chunk_records, chunks
from kafkalake.lake import parsed_backlog, table_position
from kafkalake.lake.checkpoint import Offsets
from kafkalake.lake.family_start import parsed_behind
from kafkalake.lake.txn_versions import first_txn_version
from kafkalake.spark.batch_writer import BatchWriter, in_member_ranges, in_ranges
from kafkalake.spark.topic_parser import RunStats

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)


class CatchUpWriter(BatchWriter):
    """The stream's writer for bronze rows already landed: parsed side only, only what is missing."""

    def __init__(self, spark: SparkSession, topic: TopicConfig, app_id: str) -> None:
        super().__init__(spark, topic)
        self.started(app_id)
        self.records_position = False
        self.can_park = False
        # Each table gets only the rows it lacks (only_missing), which the direct write does not ask.
        self.direct_parse = False

    def rows_for(self, tables: str, bronze: DataFrame) -> DataFrame | None:
        return None if tables == "bronze" else bronze

    def only_missing(self, rows: DataFrame, kind: str) -> DataFrame:
        from delta.tables import DeltaTable
        from pyspark.sql import functions as F

        path = self.topic.parsed_path if kind == "parsed" else self.topic.dead_letter_path
        if not DeltaTable.isDeltaTable(self.spark, path):
            return rows
        # Parsed rows keep Kafka's coordinates in the _kafka struct, dead letters as plain columns;
        # the topic too, as a family's members share partition numbers and offsets.
        where = F.col("_kafka") if kind == "parsed" else F.struct("topic", "partition", "offset")
        table = self.spark.read.format("delta").load(path)
        spot = ["_t", "_p", "_o"]
        present = table.select(
            where["topic"].alias("_t"), where["partition"].alias("_p"), where["offset"].alias("_o")
        )
        keyed = (
            rows.withColumn("_t", where["topic"])
            .withColumn("_p", where["partition"])
            .withColumn("_o", where["offset"])
        )
        return keyed.join(present, spot, "left_anti").drop(*spot)


@dataclass(frozen=True)
class CatchUp:
    records: int
    stats: RunStats

    def summary(self, topic: str) -> str:
        return f"topic {topic}: the parsed tables caught up on {self.records} bronze records"


def _bronze_ends(bronze: DataFrame, start: dict[int, int]) -> dict[int, int]:
    """Per partition of the backlog, one past the highest offset bronze holds."""
    from pyspark.sql import functions as F

    ranges = {p: (s, 2**62) for p, s in start.items()}
    found = bronze.where(in_ranges(ranges)).groupBy("partition").agg(F.max("offset").alias("last")).collect()
    ends = {int(r["partition"]): int(r["last"]) + 1 for r in found}
    return {p: ends.get(p, s) for p, s in start.items()}


def catch_up(spark: SparkSession, topic: TopicConfig, backlog: parsed_backlog.Backlog) -> CatchUp:
    """Parse what bronze holds from the backlog's start; raises what the parsed side raises."""
    bronze = spark.read.format("delta").load(topic.path)
    window = Window(topic.name, datetime.now(UTC), dict(backlog.start), _bronze_ends(bronze, backlog.start))
    log.info("topic %s: catching the parsed tables up from bronze: %s", topic.name, window.describe())
    writer = CatchUpWriter(spark, topic, f"kafkalake-catch-up:{topic.name}")
    # The anti-joins keep rows from landing twice; the versions only have to be new (txn_versions).
    first_version = first_txn_version([t.location for t in topic_tables(topic)[1:]], writer.app_id)
    current = backlog
    for number, piece in enumerate(chunks(window, chunk_records(topic.max_offsets_per_trigger))):
        writer(bronze.where(in_ranges(piece)), first_version + number)
        current = replace(current, start={**current.start, **{p: end for p, (_s, end) in piece.items()}})
        parsed_backlog.write(topic, current)
        kill_points.reached("catch_up:after_chunk")
    parsed_backlog.clear(topic)
    log.info("topic %s: the parsed tables are caught up (%s)", topic.name, writer.stats.summary())
    return CatchUp(window.records, writer.stats)


def catch_up_if_behind(spark: SparkSession, topic: TopicConfig, writer: BatchWriter) -> CatchUp | None:
    """After the stream: catch the parsed tables up if their side is behind (raises if it stays so).

    What the catch-up parsed is added to the stream writer's stats, so the run reports it.
    """
    if writer.backlog is None:
        return None
    done = catch_up(spark, topic, writer.backlog)
    writer.stats.merge_parsed(done.stats)
    writer.backlog = None
    log.info("%s", done.summary(topic.name))
    return done


def catch_up_family(spark: SparkSession, topic: TopicConfig, bronze_position: Mapping[str, Offsets]) -> int:
    """Before a family's stream starts under a new checkpoint (lost, or its members changed): parse
    the bronze rows the parsed side lacks, each table getting only the rows it does not hold.

    A run killed after a batch's bronze commit leaves that batch to the parsed side; a rerun under
    the same checkpoint replays it, but one under a new checkpoint starts after what bronze holds.
    Returns the records read from bronze (0: the parsed side was whole)."""
    parsed = (table_position.read_position(t.location) for t in topic_tables(topic)[1:])
    behind = parsed_behind(bronze_position, (p.members if p else None for p in parsed))
    if not behind:
        return 0
    spots = "; ".join(
        f"{member} partition {p} [{start}, {end})"
        for member, spans in sorted(behind.items())
        for p, (start, end) in sorted(spans.items())
    )
    log.warning("%s: the parsed tables lack bronze rows (%s): parsed from bronze first", topic.name, spots)
    bronze = spark.read.format("delta").load(topic.path)
    writer = CatchUpWriter(spark, topic, f"kafkalake-catch-up:{topic.name}")
    version = first_txn_version([t.location for t in topic_tables(topic)[1:]], writer.app_id)
    # In chunks of at most a batch, member by member: each chunk is cached as a stream batch is.
    now = datetime.now(UTC)
    for member, spans in sorted(behind.items()):
        window = Window(
            member, now, {p: s for p, (s, _e) in spans.items()}, {p: e for p, (_s, e) in spans.items()}
        )
        for piece in chunks(window, chunk_records(topic.max_offsets_per_trigger)):
            writer(bronze.where(in_member_ranges({member: piece})), version)
            version += 1
            kill_points.reached("catch_up:after_chunk")
    return sum(end - start for spans in behind.values() for start, end in spans.values())
