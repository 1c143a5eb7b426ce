"""One ingest run of a topic: the sequence the ingest job runs, and the integration tests with it.

1. Refuse to start when the tables and the checkpoint disagree (a deleted table would otherwise be
   re-created empty, a deleted checkpoint re-read Kafka), or plan the rebuild of a lost checkpoint.
2. Create the tables (partitioned as the catalog says, or refused with ``bad_config``).
3. Under the topic's run lock: decide the start again, apply it, pick up a parsed-side backlog,
   stream everything new (``availableNow``), settle the latest table's tombstones, and catch the
   parsed tables up from bronze when they fell behind.

:meth:`IngestRun.land` raises what stopped the run; :meth:`IngestRun.execute` turns that into the
job's on-call failure. Both report the run's figures (:meth:`IngestRun.metrics`).
"""

from __future__ import annotations

import errno
import logging
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from kafkalake.config.family import resolve_members
from kafkalake.config.topic import TopicConfig
from kafkalake.core.errors import Failure, KafkalakeError, Kind, TopicMissingError, failure, failure_of
from kafkalake.core.job_failures import classify_spark_error, exception_text
from kafkalake.core.run_metrics import JobMetrics
from kafkalake.lake import parsed_backlog
from kafkalake.lake.checkpoint_lock import checkpoint_lock
from kafkalake.lake.family_start import FamilyStart, known_members, plan_family_start
from kafkalake.lake.start_plan import StartPlan, check_safe_to_start, plan_start
from kafkalake.spark import debezium, driver_kafka
from kafkalake.spark.batch_writer import BatchWriter
from kafkalake.spark.catch_up import catch_up_family, catch_up_if_behind
from kafkalake.spark.latest import settle_after_run
from kafkalake.spark.recovery import apply_start_plan
from kafkalake.spark.stream import ensure_table, start_ingest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger("kafkalake.ingest")


class IngestRun:
    """One availableNow run of a topic's stream into its tables.

    ``client_config``: the Java Kafka client's settings (secrets included; never logged).
    ``topic_id``: Kafka's ID of the topic as the task read it, recorded with the offsets and checked
    against the tables'. When the task did not say (a job run by hand), the run asks Kafka itself.
    """

    def __init__(
        self,
        spark: SparkSession,
        topic: TopicConfig,
        client_config: Mapping[str, str],
        *,
        topic_id: str | None = None,
        started: float | None = None,
    ) -> None:
        self.spark = spark
        self.topic = topic
        self.client_config = client_config
        self.writer = BatchWriter(
            spark,
            topic,
            topic_id=topic_id,
            # A topic that accepts data loss looks for offsets Kafka deleted before it read them.
            loss_client_config=None if topic.fail_on_data_loss else client_config,
        )
        #: time.monotonic() when the job started, when the stream started, when it was done.
        self.started = time.monotonic() if started is None else started
        self.streaming: float | None = None
        self.stream_done: float | None = None
        #: Why the parsed tables could not catch up from bronze (bronze is current), as raised.
        self.catch_up_error: Exception | None = None
        #: A family's: its members' IDs as Kafka said them at start (the members read), the members
        #: read for the first time, and those Kafka does not have.
        self.member_ids: dict[str, str | None] = {}
        self.new_members: list[str] = []
        self.missing_members: list[str] = []

    def land(self) -> Failure | None:
        """Run the sequence; the parsed side's failure when it stays behind bronze, else None.

        Raises:
            KafkalakeError: a refusal before the stream, the run lock, or a batch that stopped
                the run on purpose (a rejected schema, a failed expectation).
            CapturedException: the streaming query's own failure, as Spark raised it.
        """
        from pyspark.errors.exceptions.captured import CapturedException

        topic, writer = self.topic, self.writer
        log.info(
            "ingesting %s into %s (checkpoint %s)", topic.kafka_source, topic.path, topic.checkpoint_path
        )
        if topic.is_family:
            family = self._family_plan()
            if family.rebuild_from is None:
                check_safe_to_start(topic)
        else:
            if writer.topic_id is None:
                writer.topic_id = driver_kafka.topic_id(self.spark, self.client_config, topic.name)
            plan = plan_start(topic, writer.topic_id)
            if plan.rebuild_from is None:
                check_safe_to_start(topic)
        # The table first: the run lock's file lives in the table's folder, and Delta creates a
        # table only in a folder that is empty or already a table.
        writer.tables_exist(ensure_table(self.spark, topic))
        # Two runs of one topic never share the checkpoint, whatever started them.
        with checkpoint_lock(topic.checkpoint_path):
            # Decided again under the lock: a run that held it meanwhile may have moved things on.
            if topic.is_family:
                query = self._start_family()
            else:
                plan = plan_start(topic, writer.topic_id)
                writer.recovered = apply_start_plan(topic, plan, writer)
                writer.resume_backlog()
                query = start_ingest(self.spark, topic, self.client_config, writer, plan.rebuild_from)
            self.streaming = time.monotonic()
            try:
                query.awaitTermination()
            except CapturedException:
                if isinstance(writer.failure, KafkalakeError):
                    # Its own message says what to do; Spark's wrapped copy of it would bury that.
                    raise writer.failure from None
                raise
            settle_after_run(self.spark, topic, writer.run_started, writer.latest_batches)
            debezium.settle_after_run(self.spark, topic, writer.run_started, writer.latest_batches)
            behind = self._catch_up()
        log.info("done: %s", writer.stats.summary())
        self.stream_done = time.monotonic()
        return behind

    def _family_plan(self) -> FamilyStart:
        """A family's members as Kafka has them now, their IDs, and where its stream starts.

        Raises:
            TopicMissingError: Kafka has none of the members.
        """
        topic = self.topic
        members = resolve_members(
            topic.members,
            topic.topic_pattern,
            driver_kafka.topic_names(self.spark, self.client_config),
            known_members(topic),
        )
        self.missing_members = list(members.missing)
        if members.missing:
            log.warning(
                "%s: members %s are not in Kafka (deleted, or not created yet): their rows stay in the "
                "table, the other members are read",
                topic.name,
                ", ".join(members.missing),
            )
        if not members.present:
            detail = f"entry {topic.name!r}: Kafka has none of its {topic.kafka_source}"
            raise TopicMissingError(failure(Kind.TOPIC_MISSING, detail).message)
        self.member_ids = driver_kafka.topic_ids(self.spark, self.client_config, members.present)
        return plan_family_start(topic, members.present, self.member_ids)

    def _start_family(self) -> StreamingQuery:
        """Under the run lock: plan the family's start again, apply it, start its stream."""
        topic, writer = self.topic, self.writer
        plan = plan_family_start(topic, list(self.member_ids), self.member_ids)
        writer.family_known = plan.known
        writer.family_ids = {**plan.known_ids, **{t: i for t, i in self.member_ids.items() if i}}
        if plan.rebuild_from is not None:
            writer.recovered = apply_start_plan(topic, StartPlan(rebuild_from={}, reason=plan.reason), writer)
            if topic.parsed.enabled:
                # The new checkpoint starts after what bronze holds; a batch a kill left to the
                # parsed side would never be replayed to it.
                catch_up_family(self.spark, topic, plan.known)
        self.new_members = list(plan.new)
        for member in plan.new:
            log.warning(
                "%s: new member %s, read from the entry's starting_offsets (%s)",
                topic.name,
                member,
                topic.starting_offsets,
            )
        return start_ingest(
            self.spark,
            topic,
            self.client_config,
            writer,
            members=plan.members,
            family_start=plan.rebuild_from,
        )

    def execute(self) -> Failure | None:
        """:meth:`land`, with what stopped it as the job's on-call failure (None: all landed)."""
        from pyspark.errors.exceptions.captured import CapturedException

        try:
            return self.land()
        except KafkalakeError as err:
            return failure_of(err)
        except CapturedException as err:
            log.error("the ingest of topic %s failed: %s", self.topic.name, err)
            log.info("landed before the failure: %s", self.writer.stats.summary())
            # Classified here, where its error class and message are at hand, not from a log tail.
            return classify_spark_error(self.topic.name, exception_text(err), self.topic.storage_conn_id)

    def _catch_up(self) -> Failure | None:
        """Catch the parsed tables up from bronze when their side is behind; the failure if it stays so.

        Any error, not only Spark's: the parsed side must never crash the run whose bronze landed
        (a JVM error such as a StackOverflowError reaches Python as py4j's, not as a captured one).
        One of no transient kind is ``parsed_unwritable``, not retried: these records failed in the
        stream (or an earlier run) and again here, and a retry reads the same records.
        """
        topic, writer = self.topic, self.writer
        try:
            catch_up_if_behind(self.spark, topic, writer)
        except Exception as err:
            self.catch_up_error = err
            backlog = parsed_backlog.read(topic) or writer.backlog
            if backlog is None or (isinstance(err, OSError) and err.errno == errno.ENOSPC):
                # Not a catch-up's failure; or a full disk, which the job reports as such, naming
                # the file it could not write (job_session).
                raise
            kind = err.kind if isinstance(err, KafkalakeError) else Kind(backlog.kind)
            if kind is Kind.UNKNOWN:
                kind = classify_spark_error(topic.name, exception_text(err), topic.storage_conn_id).kind
            if kind is Kind.UNKNOWN:
                kind = Kind.PARSED_UNWRITABLE
            log.error("the parsed tables of topic %s could not catch up: %s", topic.name, err)
            cause = str(err).splitlines()[0] if str(err) else type(err).__name__
            # Bronze is current; the parsed side is not. The run fails with the parsed side's kind
            # so on-call sees it, and the metrics still report what bronze landed.
            return failure(
                kind,
                f"topic {topic.name!r}: bronze landed every record read this run ({writer.stats.bronze_rows} "
                f"rows) and keeps landing; the parsed tables are behind bronze {backlog.describe()}. "
                f"Cause: {cause}. Once it is fixed, the next run (or clearing this task) catches them up "
                "from bronze, exactly once",
            )
        return None

    def metrics(self, follow_ups: Mapping[str, str] | None = None) -> JobMetrics:
        """What the run landed and how long its parts took, for its Airflow task."""
        done = self.stream_done or time.monotonic()
        # A run that failed before its stream started spent all its time starting up.
        startup = (self.streaming if self.streaming is not None else done) - self.started
        metrics = self.writer.stats.job_metrics(
            startup_seconds=startup, processing_seconds=done - (self.streaming or done)
        )
        metrics = replace(metrics, follow_ups=dict(follow_ups or {}), recovered=self.writer.recovered)
        if self.topic.is_family:
            metrics = replace(metrics, new_members=self.new_members, missing_members=self.missing_members)
        return metrics
