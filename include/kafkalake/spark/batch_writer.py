"""One micro-batch of Kafka records into every table of its topic, exactly once.

The stream reads Kafka once, under one checkpoint; each micro-batch is written by
:class:`BatchWriter` (``foreachBatch``) to bronze, then the parsed, dead-letter and latest-row
tables. Every write is idempotent: Delta records ``(txnAppId, txnVersion)`` = (the streaming
query's id, the batch id) in the commit and skips a write it has already committed
(:func:`write_idempotent`). A batch replayed after a crash or a retry therefore fills in only the
tables it had not reached. The query id is the one stored in the checkpoint, as Delta's own
streaming sink uses: a new checkpoint is a new id, so its batch 0 is never mistaken for an old one.

The parsed table is written straight from the parse when nothing in the batch needs deciding first
(:meth:`BatchWriter._write_direct`); a batch with dead letters, records to rescue while the schema
may evolve, or a broken ``fail`` expectation takes the checked path: parse into a cache, count,
then write each table from the cache.

Bronze is written first and never waits for the parsed side. When parsing or writing a batch's
parsed tables fails (a rejected schema, a failing expectation, anything), the batch still succeeds:
its bronze rows are committed, the checkpoint moves on, and the parsed side is *parked*: where it
stopped is recorded (:mod:`kafkalake.lake.parsed_backlog`), later batches land bronze only, and the
parsed tables catch up from bronze afterwards (:mod:`kafkalake.spark.catch_up`).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from functools import reduce
from typing import TYPE_CHECKING

from kafkalake.config.tables import topic_tables
from kafkalake.config.topic import TopicConfig
from kafkalake.core import kill_points
from kafkalake.core.errors import Kind
from kafkalake.kafka import gaps
from kafkalake.lake import parsed_backlog, table_position
from kafkalake.lake.checkpoint import (
    Offsets,
    batch_end_offsets,
    family_batch_end_offsets,
    family_starting_offsets,
    starting_offsets,
)
from kafkalake.lake.checkpoint_lock import fence
from kafkalake.spark import data_loss, debezium, driver_kafka, parse_columns
from kafkalake.spark.batch_cache import cached
from kafkalake.spark.extension import resolve as resolve_extension
from kafkalake.spark.latest import latest_schema, merge_latest
from kafkalake.spark.registry_parser import topic_parser
from kafkalake.spark.table_settings import create_table
from kafkalake.spark.topic_parser import RunStats, observed, write_measured

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)


def write_idempotent(
    frame: DataFrame,
    path: str,
    app_id: str,
    batch_id: int,
    merge_schema: bool = False,
    metadata: str | None = None,
    *,
    use_extension: bool | None = None,
) -> bool:
    """Append ``frame`` to the Delta table at ``path`` unless it holds batch ``batch_id`` of
    ``app_id`` already; True when this call committed the rows.

    Delta's own idempotent append (the writer's ``txnAppId``/``txnVersion`` options), with the
    look-up of what the table has committed read from the version's checksum instead of a full
    state reconstruction (``spark/jvm/IdempotentAppend.scala``): the commit, its ``txn`` action and
    Delta's conflict check on the app id are the same. A session without kafkalake's JVM extension
    (``use_extension``: None asks the session, :mod:`kafkalake.spark.extension`) writes with Delta's
    public writer itself (:func:`_delta_append`).
    """
    fence()
    options = {"txnAppId": app_id, "txnVersion": str(batch_id)}
    if merge_schema:
        options["mergeSchema"] = "true"
    if metadata is not None:
        # The Kafka offsets the table holds through this commit (lake/table_position).
        options["userMetadata"] = metadata
    if not resolve_extension(use_extension, frame.sparkSession):
        return _delta_append(frame, path, options)
    append = frame.sparkSession.sparkContext._jvm.org.apache.spark.sql.delta.kafkalake.IdempotentAppend
    return bool(append.save(frame._jdf, path, options))


def _delta_append(frame: DataFrame, path: str, options: Mapping[str, str]) -> bool:
    """``frame.write.format("delta").mode("append").options(**options).save(path)``; True when it
    committed.

    Delta skips a ``txnVersion`` its table has committed for the ``txnAppId`` without a word, and
    before it runs the frame's plan: the frame goes with an ``Observation``, which Spark fills in
    only when the plan ran. A write that ran it commits (its ``txn`` action is always in the commit,
    rows or none) or raises (a concurrent commit of the same app id: Delta's conflict check), so a
    filled observation is exactly "this call committed the rows", with no look-up of the table.
    """
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    observation = Observation()
    observed_frame = frame.observe(observation, F.count(F.lit(1)).alias("rows"))
    observed_frame.write.format("delta").mode("append").options(**options).save(path)
    return observed(observation) is not None


def in_member_ranges(ranges: Mapping[str, Mapping[int, tuple[int, int]]]) -> Column:
    """Bronze rows of a family whose offset lies in ``[start, end)`` of their member's partition."""
    from pyspark.sql import functions as F

    condition = F.lit(False)
    for topic, spans in sorted(ranges.items()):
        condition = condition | ((F.col("topic") == topic) & in_ranges(spans))
    return condition


def in_ranges(
    ranges: Mapping[int, tuple[int, int]], partition: Column | None = None, offset: Column | None = None
) -> Column:
    """Rows whose offset lies in ``[start, end)`` of their partition's range (others: none); by
    default of bronze's ``partition`` and ``offset`` columns."""
    from pyspark.sql import functions as F

    partition = F.col("partition") if partition is None else partition
    offset = F.col("offset") if offset is None else offset
    condition = F.lit(False)
    for p, (start, end) in sorted(ranges.items()):
        condition = condition | ((partition == p) & (offset >= start) & (offset < end))
    return condition


def position_carrier(latest_by_key: bool, dead_letters: int, current: bool = False) -> str:
    """The parsed-side table whose commit records the batch's Kafka position: the batch's last write
    (the latest-row or current-state MERGE, else the dead letters when there are any, else the
    parsed rows).

    Only the last: a run killed between two of the batch's commits must not leave a table claiming
    the batch whole. The position rebuilt after a lost checkpoint is the parsed side's furthest
    (:func:`kafkalake.lake.table_position.furthest`); had the parsed rows' commit recorded it, the
    dead letters the kill kept from their table would never be written. As it is, the rebuild parses
    the batch again from bronze, and each table takes only the rows it lacks.
    """
    if current:
        return "current"
    if latest_by_key:
        return "latest"
    return "dead_letter" if dead_letters else "parsed"


class BatchWriter:
    """The ``foreachBatch`` function of a topic's stream; keeps the run's stats and its failure."""

    def __init__(
        self,
        spark: SparkSession,
        topic: TopicConfig,
        *,
        topic_id: str | None = None,
        loss_client_config: Mapping[str, str] | None = None,
    ) -> None:
        self.spark = spark
        self.topic = topic
        self.config = topic.parsed
        self.parser = topic_parser(spark, topic)
        #: The typed error a batch raised, kept because Spark hands the caller only a wrapped copy.
        self.failure: Exception | None = None
        #: When the run began (bronze's ingested_at of its rows is later), and how many batches
        #: MERGEd into the latest or current-state table (latest/debezium.settle_after_run).
        self.run_started = datetime.now(UTC) - timedelta(seconds=1)
        self.latest_batches = 0
        self._query_id: str | None = None
        self._started = threading.Event()
        #: Seconds per step of the batch being written (bronze, parse, parsed, ...).
        self._steps: dict[str, float] = {}
        #: Kinds of table (tables.Table.kind) known to exist in this run.
        self._created: set[str] = set()
        #: The parsed side's backlog while it is behind bronze (read at the start of the run).
        self.backlog: parsed_backlog.Backlog | None = None
        #: Whether a failing parsed side parks (the stream) or fails the batch (the catch-up itself).
        #: A family's never parks: the backlog and its catch-up are kept per partition, and a
        #: family's partitions are (topic, partition). Its batch fails instead, after bronze's
        #: commit; the retry replays it under the same checkpoint, bronze's write is skipped as
        #: done, and the parsed side is written then (docs/catalog.md).
        self.can_park = self.config.enabled and not topic.is_family
        #: The error that parked the parsed side during this run, for the job's report.
        self.parked_by: Exception | None = None
        #: Whether commits record the Kafka offsets they hold (the stream's; not a re-ingest's or
        #: a catch-up's, whose rows are older than the table's position).
        self.records_position = True
        #: The current batch's commit metadata (table_position.commit_metadata), or None.
        self._metadata: str | None = None
        #: Offsets the parsed side's tables hold already (bronze was rebuilt behind them): records
        #: below these are not parsed again.
        self.parsed_skip_below: dict[int, int] | None = None
        #: How the run's start position was rebuilt from the tables ("" when the checkpoint held).
        self.recovered = ""
        #: Kafka's ID of the topic, recorded with the offsets (None when the task did not say).
        self.topic_id = topic_id
        #: A family's: the offsets and IDs the table records of every member it holds (carried into
        #: each commit, so a member not read this run keeps its record), and the IDs of the members
        #: read this run, as Kafka said them at start.
        self.family_known: dict[str, dict[int, int]] = {}
        self.family_ids: dict[str, str] = {}
        #: Whether a batch's parsed rows are first written straight from the parse (_write_direct);
        #: not for a latest-row or current-state table, whose MERGE reads the cached parse.
        self.direct_parse = not (self.config.latest_by_key or self.config.debezium)
        #: Offsets the current-state table holds (its recorded position), per member topic (a
        #: single topic's under its name), read at the run's first batch: events below them are
        #: never applied again.
        self._current_holds: dict[str, dict[int, int]] | None = None
        #: The Java Kafka settings, when the topic accepts data loss: each batch then looks for
        #: offsets Kafka deleted before it read them, and records them (never silent).
        self.loss_client_config = loss_client_config

    def resume_backlog(self) -> None:
        """Pick up a backlog an earlier run left: until it is caught up, batches land bronze only."""
        if self.can_park:
            self.backlog = parsed_backlog.read(self.topic)
            if self.backlog is not None:
                log.warning(
                    "topic %s: the parsed tables are behind bronze %s; this run lands bronze and then "
                    "catches them up",
                    self.topic.name,
                    self.backlog.describe(),
                )

    def tables_exist(self, kinds: Iterable[str]) -> None:
        """Kinds of the topic's tables known to exist (what :func:`kafkalake.spark.stream.ensure_table`
        returns): the batches write to them without looking for them first."""
        self._created.update(kinds)

    @property
    def stats(self) -> RunStats:
        return self.parser.stats

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
        self._steps = {}
        started = time.monotonic()
        try:
            self._write(batch, batch_id)
            # Spark commits the batch to the checkpoint when this returns: that commit is fenced too.
            fence()
        except Exception as err:
            self.failure = err
            raise
        took = time.monotonic() - started
        steps = ", ".join(f"{step} {seconds:.1f}s" for step, seconds in self._steps.items())
        log.info("topic %s: batch %d written in %.1fs (%s)", self.topic.name, batch_id, took, steps)

    @contextlib.contextmanager
    def _step(self, name: str) -> Iterator[None]:
        """Time one step of the batch, for its log line: where a slow batch spends its time."""
        started = time.monotonic()
        try:
            yield
        finally:
            self._steps[name] = self._steps.get(name, 0.0) + time.monotonic() - started

    def _position_metadata(self, batch_id: int, app_id: str) -> str | None:
        """The batch's end offsets from the checkpoint's offset log (planned before the batch ran)."""
        if not self.records_position:
            return None
        if self.topic.is_family:
            ends = family_batch_end_offsets(self.topic.checkpoint_path, batch_id)
            if ends is None:
                return None
            return table_position.family_commit_metadata(
                {**self.family_known, **ends}, self.family_ids, batch_id, app_id
            )
        end = batch_end_offsets(self.topic.checkpoint_path, self.topic.name, batch_id)
        if end is None:
            return None
        return table_position.commit_metadata(end, batch_id, app_id, self.topic_id)

    def _write(self, batch: DataFrame, batch_id: int) -> None:
        app_id = self.app_id
        # On an object store the run lock is a lease: a run that stalled past it lost the lock to
        # another run, and must not write behind it (each commit checks again: :func:`fence`).
        fence()
        self._metadata = self._position_metadata(batch_id, app_id)
        self._record_lost(batch, batch_id, app_id)
        if not self.config.enabled:
            self._write_bronze(batch, batch_id, app_id)
            return
        # One read of Kafka per batch: the bronze rows are cached, and every table is written from them.
        bronze = cached(batch)
        try:
            to_bronze = self.rows_for("bronze", bronze)
            if to_bronze is not None:
                kill_points.reached("ingest:before_bronze_commit")
                with self._step("bronze"):
                    write_idempotent(to_bronze, self.topic.path, app_id, batch_id, metadata=self._metadata)
                kill_points.reached("ingest:after_bronze_commit")
            self.stats.batches += 1
            to_parse = self.rows_for("parsed", bronze)
            if to_parse is None:
                return
            if self.parsed_skip_below:
                to_parse = to_parse.where(~in_ranges({p: (0, o) for p, o in self.parsed_skip_below.items()}))
            if self.backlog is not None:
                self._extend_backlog(to_parse, batch_id)
                return
            try:
                self._write_parsed(to_parse, batch_id, app_id)
            except Exception as err:
                if not self.can_park:
                    raise
                self._park(to_parse, batch_id, err)
            kill_points.reached("ingest:after_parsed_commits")
        finally:
            bronze.unpersist()

    def _record_lost(self, batch: DataFrame, batch_id: int, app_id: str) -> None:
        """Offsets this batch was planned to read that Kafka deleted first, into the gaps table.

        Before bronze's commit, so a kill after it still finds them recorded; idempotent like every
        table write of the batch. One Kafka ask per batch (per member, for a family); a read of the
        batch only when a partition starts below Kafka's earliest offset.
        """
        if self.loss_client_config is None or not self.records_position:
            return
        checkpoint = self.topic.checkpoint_path
        if self.topic.is_family:
            ends = family_batch_end_offsets(checkpoint, batch_id) or {}
            starts = (
                family_batch_end_offsets(checkpoint, batch_id - 1)
                if batch_id
                else family_starting_offsets(checkpoint)
            ) or {}
            spans: list[tuple[str, str | None, Offsets | None, Offsets | None]] = [
                (t, self.family_ids.get(t), starts.get(t), end) for t, end in sorted(ends.items())
            ]
        else:
            name = self.topic.name
            start = (
                batch_end_offsets(checkpoint, name, batch_id - 1)
                if batch_id
                else starting_offsets(checkpoint, name)
            )
            spans = [(name, self.topic_id, start, batch_end_offsets(checkpoint, name, batch_id))]
        found = [
            (topic, topic_id, lost)
            for topic, topic_id, start, end in spans
            if start is not None and end is not None and (lost := self._lost(batch, topic, start, end))
        ]
        if not found:
            return
        rows = reduce(
            lambda a, b: a.unionByName(b),
            (data_loss.gap_rows(self.spark, t, i, lost, batch_id) for t, i, lost in found),
        )
        write_idempotent(rows, self.topic.gaps_path, app_id, batch_id)
        for topic, _id, lost in found:
            count = sum(g.offsets for g in lost)
            self.stats.lost_offsets += count
            log.warning(
                "topic %s: batch %d: LOST %d offsets that Kafka deleted before they were read "
                "(fail_on_data_loss is false; recorded in %s): %s",
                topic,
                batch_id,
                count,
                self.topic.gaps_path,
                "; ".join(g.describe() for g in lost),
            )

    def _lost(self, batch: DataFrame, topic: str, start: Offsets, end: Offsets) -> list[gaps.Gap]:
        """What Kafka deleted of ``topic``'s part of the batch before it was read."""
        assert self.loss_client_config is not None
        earliest = driver_kafka.earliest_offsets(self.spark, self.loss_client_config, topic, end)
        risky = gaps.at_risk(start, end, earliest)
        if not risky:
            return []
        from pyspark.sql import functions as F

        rows = batch.where(F.col("partition").isin(sorted(risky)))
        if self.topic.is_family:
            rows = rows.where(F.col("topic") == topic)
        firsts = self._first_offsets(rows)
        return gaps.lost_ranges(start, {p: end[p] for p in risky}, earliest, firsts)

    def _first_offsets(self, rows: DataFrame) -> dict[int, int]:
        from pyspark.sql import functions as F

        firsts = rows.groupBy("partition").agg(F.min("offset").alias("first")).collect()
        return {int(r["partition"]): int(r["first"]) for r in firsts}

    def _park(self, rows: DataFrame, batch_id: int, err: Exception) -> None:
        """The parsed side failed on this batch: record where it stopped, and let bronze go on."""
        kind = getattr(err, "kind", Kind.UNKNOWN)
        self.backlog = parsed_backlog.Backlog(
            start=self._first_offsets(rows),
            since=datetime.now(UTC).isoformat(timespec="seconds"),
            kind=str(kind),
            reason=str(err).splitlines()[0][:2000] if str(err) else type(err).__name__,
        )
        parsed_backlog.write(self.topic, self.backlog)
        self.parked_by = err
        log.error(
            "topic %s: the parsed side failed on batch %d and is parked; bronze keeps landing and the "
            "parsed tables catch up from bronze (%s): %s",
            self.topic.name,
            batch_id,
            self.backlog.describe(),
            err,
        )

    def _extend_backlog(self, rows: DataFrame, batch_id: int) -> None:
        """A batch while the parsed side is parked: bronze only; note partitions new to the backlog."""
        assert self.backlog is not None
        log.info("topic %s: batch %d landed in bronze only (parsed side parked)", self.topic.name, batch_id)
        new = {p: o for p, o in self._first_offsets(rows).items() if p not in self.backlog.start}
        if new:
            self.backlog = replace(self.backlog, start={**self.backlog.start, **new})
            parsed_backlog.write(self.topic, self.backlog)

    def _write_bronze(self, batch: DataFrame, batch_id: int, app_id: str) -> None:
        """Bronze only: the batch streams from Kafka into bronze once, nothing cached; what landed
        is measured during the write. (The parsed path folds the same figures into the aggregate
        it runs anyway.)"""
        to_bronze = self.rows_for("bronze", batch)
        if to_bronze is not None:
            kill_points.reached("ingest:before_bronze_commit")
            with self._step("bronze"):
                landed = write_measured(
                    to_bronze,
                    lambda rows: write_idempotent(
                        rows, self.topic.path, app_id, batch_id, metadata=self._metadata
                    ),
                )
            kill_points.reached("ingest:after_bronze_commit")
            self.stats.add_landed(landed)
        self.stats.batches += 1

    def rows_for(self, tables: str, bronze: DataFrame) -> DataFrame | None:
        """The batch's rows to write to ``tables`` ("bronze", or "parsed": parsed, dead-letter and
        latest); None: nothing to write there. The stream writes every row everywhere; a re-ingest
        (:class:`kafkalake.spark.reingest.GapWriter`) only the rows a table lacks.
        """
        return bronze

    def only_missing(self, rows: DataFrame, kind: str) -> DataFrame:
        """The rows to append to the ``kind`` table; all of them here. A catch-up
        (:class:`kafkalake.spark.catch_up.CatchUpWriter`) leaves out those the table holds."""
        return rows

    def _write_parsed(self, bronze: DataFrame, batch_id: int, app_id: str) -> None:
        if self.direct_parse and self._write_direct(bronze, batch_id, app_id):
            return
        with self._step("parse"):
            parsed = self.parser.parse(bronze, f"batch {batch_id}")
        frame = parsed.frame
        try:
            rows, dead = parse_columns.parsed_rows(frame), parse_columns.dead_letter_rows(frame)
            rows, dead = self.only_missing(rows, "parsed"), self.only_missing(dead, "dead_letter")
            self._create_once("parsed", rows.schema)
            self._create_once("dead_letter", dead.schema)
            # A table with no rows from this batch gets no commit: an empty write still costs a
            # scan of the cached frame and a Delta commit (bench: ~2 s of a 25 s batch with no dead
            # letters). The counts are the batch's own, so a replayed batch skips the same writes.
            last = position_carrier(self.config.latest_by_key, parsed.dead_letters, self.config.debezium)
            if parsed.parsed_rows:
                # mergeSchema: the history decides the schema (new fields added, or accepted); the
                # table follows.
                with self._step("parsed"):
                    write_idempotent(
                        rows, self.topic.parsed_path, app_id, batch_id, True, self._carried("parsed", last)
                    )
            if parsed.dead_letters:
                with self._step("dead letters"):
                    write_idempotent(
                        dead,
                        self.topic.dead_letter_path,
                        app_id,
                        batch_id,
                        metadata=self._carried("dead_letter", last),
                    )
            if self.config.latest_by_key:
                self._create_once("latest", latest_schema(frame))
                self.latest_batches += 1
                with self._step("latest"):
                    merge_latest(
                        self.spark,
                        frame,
                        self.topic.latest_path,
                        app_id,
                        batch_id,
                        self._carried("latest", last),
                    )
            if self.config.debezium:
                self._merge_current(frame, batch_id, app_id, self._carried("current", last))
            self.parser.add_stats(parsed.counts)
        finally:
            frame.unpersist()

    def _merge_current(self, frame: DataFrame, batch_id: int, app_id: str, metadata: str | None) -> None:
        """The batch's events into the current-state table, those it holds already left out."""
        from pyspark.sql import functions as F

        family = self.topic.is_family
        if self._current_holds is None:
            held = table_position.read_position(self.topic.current_path)
            if held is None:
                self._current_holds = {}
            elif held.members is not None:
                self._current_holds = {t: dict(o) for t, o in held.members.items()}
            else:
                self._current_holds = {self.topic.name: dict(held.end)}
        kafka = F.col(parse_columns.KAFKA_COLUMN)
        held_rows = F.lit(False)
        for member, ends in sorted(self._current_holds.items()):
            below = in_ranges({p: (0, o) for p, o in ends.items()}, kafka["partition"], kafka["offset"])
            held_rows = held_rows | ((kafka["topic"] == member) & below if family else below)
        events = frame.where(~held_rows)
        self._create_once("current", debezium.current_schema(frame, by_topic=family))
        self.latest_batches += 1
        kill_points.reached("ingest:before_current_commit")
        with self._step("current"):
            debezium.merge_current(
                self.spark, events, self.topic.current_path, app_id, batch_id, metadata, by_topic=family
            )

    def _carried(self, kind: str, last: str) -> str | None:
        """The batch's position metadata for the ``kind`` table's commit, if it carries it."""
        return self._metadata if kind == last else None

    def _write_direct(self, bronze: DataFrame, batch_id: int, app_id: str) -> bool:
        """The parsed table written straight from the parse (:meth:`TopicParser.direct`); False when
        the batch needs the checked path instead, which then writes it.

        The checked path parses into a cache, counts it, and writes the tables from the cache: one
        more pass over the batch, there to decide before anything is written whether the schema
        evolves, an expectation stops the batch, and what goes to the dead letters. A batch that
        needs none of that (most) is written in one pass. The first batch that needs it stops the
        direct write before its commit (its files are left for VACUUM) and turns it off for the
        rest of the run, so a topic whose every batch has a dead letter pays for one stopped
        write a run.
        """
        with self._step("parse"):
            self.parser.ensure_schema(bronze, f"batch {batch_id}")
            direct = self.parser.direct(bronze)
            self._create_once("parsed", direct.table_schema)
            self._create_once("dead_letter", direct.dead_letter_schema)
        try:
            with self._step("parsed"):
                write_idempotent(direct.rows, self.topic.parsed_path, app_id, batch_id, True, self._metadata)
        except Exception as err:
            if not parse_columns.needed_checked_path(err):
                raise
            self.direct_parse = False
            log.info(
                "topic %s: batch %d has records the parsed side must check before writing (dead letters, "
                "records to rescue, a fail expectation); it and the rest of this run take the checked path",
                self.topic.name,
                batch_id,
            )
            return False
        counts = direct.counts()
        if counts is None:
            # Delta skipped the write, committed by an earlier attempt: the checked path counts the
            # batch, and its writes are skipped the same way.
            return False
        self.parser.add_stats(counts)
        return True

    def _create_once(self, kind: str, schema: StructType) -> None:
        """Create a parsed table with the catalog's partitioning and properties before its first write.

        Checked once per run: later batches find it there.
        """
        if kind in self._created:
            return

        table = next(t for t in topic_tables(self.topic) if t.kind == kind)
        create_table(
            self.spark,
            self.topic,
            table,
            schema,
            f"Kafka topic {self.topic.name}: {kind.replace('_', '-')} table, as landed by kafkalake",
        )
        self._created.add(kind)
