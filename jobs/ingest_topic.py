"""spark-submit entry point: land everything new in one Kafka topic in its bronze Delta table.

    spark-submit --jars ... jobs/ingest_topic.py --topic orders
    spark-submit --jars ... jobs/ingest_topic.py --topic orders --reingest-from 2026-05-01T10:00:00Z

With ``--reingest-from`` the job does not stream: it re-reads Kafka from that time up to the
checkpoint as a batch and lands only what the tables lack (:mod:`kafkalake.spark.reingest`).

The topic's settings come from the catalog (``KAFKALAKE_CATALOG``, ``KAFKALAKE_LAKE_ROOT``); the
Kafka client settings, secrets included, from the private file named by
``KAFKALAKE_KAFKA_CONFIG_FILE`` — never from the command line — which the job deletes once read.

A failure the job can name (Kafka's data-loss check, bad configuration, a missing topic, a broker
that does not answer) ends with one line ``KAFKALAKE_FAILURE kind=<kind> <what to do>`` and the
kind's exit code (``kafkalake.core.errors.EXIT_CODES``), so Airflow decides retry-or-fail from that
instead of from a Java stack trace.

When ``KAFKALAKE_METRICS_FILE`` names a file, the job writes what it landed there as JSON
(``kafkalake.core.metrics.JobMetrics``), on success and on failure; its Airflow task reads it.

After a successful stream the job does the DAG's follow-ups in its warm Spark application
(:mod:`kafkalake.spark.follow_ups`: the schema refresh, and table care when it is due), so a DAG
run starts one JVM, not three or four; ``--no-follow-ups`` lands only.
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import sys
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from kafkalake.config.catalog import load_topic
from kafkalake.config.topic import TopicConfig
from kafkalake.core.errors import (
    CatalogError,
    Failure,
    KafkaConfigError,
    KafkalakeError,
    Kind,
    ReingestRefusedError,
    failure,
    failure_of,
)
from kafkalake.core.job_failures import (
    classify_spark_error,
    exception_text,
    exit_code,
    failure_line,
    store_failure,
)
from kafkalake.core.metrics import ENV_METRICS_FILE
from kafkalake.core.paths import catalog_path, lake_root
from kafkalake.core.run_mode import parse_reingest_from
from kafkalake.kafka.client_config import (
    ENV_CLIENT_CONFIG_FILE,
    ENV_KEEP_CLIENT_CONFIG_FILE,
    read_config_file,
)
from kafkalake.lake import parsed_backlog
from kafkalake.lake.checkpoint_lock import checkpoint_lock
from kafkalake.lake.table_guard import check_safe_to_start, plan_start
from kafkalake.lake.table_position import ENV_TOPIC_ID
from kafkalake.spark import object_store
from kafkalake.spark import reingest as landing_gaps
from kafkalake.spark.batch_writer import BatchWriter
from kafkalake.spark.catch_up import catch_up_if_behind
from kafkalake.spark.follow_ups import run_follow_ups
from kafkalake.spark.latest import settle_after_run
from kafkalake.spark.recovery import apply_start_plan
from kafkalake.spark.stream import ensure_table, start_ingest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("kafkalake.ingest")


def main(argv: list[str] | None = None) -> int:
    started = time.monotonic()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topic", required=True, help="topic name, as in the catalog")
    parser.add_argument("--reingest-from", help="ISO timestamp: re-ingest the gap repair from then")
    parser.add_argument(
        "--no-follow-ups",
        action="store_true",
        help="land only: leave the schema refresh and due table care to their own tasks' jobs",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    config_file = os.environ.get(ENV_CLIENT_CONFIG_FILE)
    if not config_file:
        parser.error(f"{ENV_CLIENT_CONFIG_FILE} must name the Kafka client settings file")
    try:
        topic = load_topic(catalog_path(), lake_root(), args.topic)
        # Read once and deleted at once: no copy of the secrets outlives this line, even if the
        # job or the task that wrote the file is killed later (KAFKALAKE_KEEP_KAFKA_CONFIG_FILE=1
        # keeps it, for a hand-written file run more than once).
        client_config = read_config_file(
            config_file, remove=os.environ.get(ENV_KEEP_CLIENT_CONFIG_FILE) != "1"
        )
    except (CatalogError, KafkaConfigError) as err:
        return report(failure(Kind.BAD_CONFIG, f"topic {args.topic!r}: {err}"))
    try:
        if args.reingest_from is not None:
            return reingest(topic, client_config, args.reingest_from)
        return ingest(topic, client_config, started, follow_ups=not args.no_follow_ups)
    except Exception as err:
        # The object store refusing the credentials, the access or the bucket, wherever it is met
        # (delta-rs or pyarrow before the stream, S3A in Spark), and a full disk outside Spark's
        # own writes (the run lock, the schema history, the backlog file): their kinds, not an
        # unknown crash that retries.
        refused = store_failure(topic.name, exception_text(err), topic.storage_conn_id)
        if refused is None and not (isinstance(err, OSError) and err.errno == errno.ENOSPC):
            raise
        log.error("the ingest of topic %s failed: %s", topic.name, err)
        return report(refused or classify_spark_error(topic.name, f"OSError: {err}"))


def ingest(
    topic: TopicConfig, client_config: dict[str, str], started: float, *, follow_ups: bool = True
) -> int:
    from pyspark.errors.exceptions.captured import CapturedException
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName(f"kafkalake-ingest-{topic.name}").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    object_store.configure(spark)
    log.info("ingesting topic %s into %s (checkpoint %s)", topic.name, topic.path, topic.checkpoint_path)
    writer = BatchWriter(spark, topic)
    streaming = None
    try:
        # Refuse to start when table and checkpoint disagree (a deleted table would otherwise be
        # re-created empty, a deleted checkpoint re-read Kafka): before the table is created.
        writer.topic_id = os.environ.get(ENV_TOPIC_ID) or None
        if not topic.fail_on_data_loss:
            writer.loss_client_config = client_config
        plan = plan_start(topic, writer.topic_id)
        if plan.rebuild_from is None:
            check_safe_to_start(topic)
        # The table first: the run lock's file lives in the table's folder, and Delta creates a
        # table only in a folder that is empty or already a table. Tables partitioned otherwise
        # than the catalog says fail here (bad_config), before anything is written.
        writer.tables_exist(ensure_table(spark, topic))
        # Two runs of one topic never share the checkpoint, whatever started them.
        with checkpoint_lock(topic.checkpoint_path):
            # Decided again under the lock: a run that held it meanwhile may have moved things on.
            plan = plan_start(topic, writer.topic_id)
            writer.recovered = apply_start_plan(topic, plan, writer)
            writer.resume_backlog()
            query = start_ingest(spark, topic, client_config, writer, plan.rebuild_from)
            streaming = time.monotonic()
            query.awaitTermination()
            settle_after_run(spark, topic, writer.run_started, writer.latest_batches)
            behind = catch_up_parsed(spark, topic, writer)
    except KafkalakeError as err:
        # Raised by the driver itself, not by a batch: a refusal before the stream, or the run lock.
        spark.stop()
        write_metrics(writer, started, streaming)
        return report(failure_of(err))
    except CapturedException as err:
        if isinstance(writer.failure, KafkalakeError):
            # A batch stopped the run on purpose (a rejected schema, a failed expectation): its own
            # message says what to do; Spark's wrapped copy of it would only bury that.
            failed = failure(writer.failure.kind, str(writer.failure))
        else:
            # The query's own failure, as Spark raised it: classified here, where its error class
            # and message are at hand, rather than from a log tail.
            failed = classify_spark_error(topic.name, exception_text(err), topic.storage_conn_id)
        log.error("the ingest of topic %s failed: %s", topic.name, err)
        log.info("landed before the failure: %s", writer.stats.summary())
        spark.stop()
        write_metrics(writer, started, streaming)
        return report(failed)
    log.info("done: %s", writer.stats.summary())
    stream_done = time.monotonic()
    if behind is not None:
        # Bronze is current; the parsed side is not. The run fails with the parsed side's kind so
        # on-call sees it, and the metrics still report what bronze landed.
        spark.stop()
        write_metrics(writer, started, streaming, stream_done)
        return report(behind)
    done = run_follow_ups(spark, topic, writer.stats) if follow_ups else {}
    spark.stop()
    write_metrics(writer, started, streaming, stream_done, done)
    return 0


def catch_up_parsed(spark: SparkSession, topic: TopicConfig, writer: BatchWriter) -> Failure | None:
    """Catch the parsed tables up from bronze when their side is behind; the failure if it stays so."""
    from pyspark.errors.exceptions.captured import CapturedException

    backlog = writer.backlog
    try:
        catch_up_if_behind(spark, topic, writer)
    except (KafkalakeError, CapturedException, ValueError) as err:
        backlog = parsed_backlog.read(topic) or backlog
        assert backlog is not None
        kind = err.kind if isinstance(err, KafkalakeError) else Kind(backlog.kind)
        if isinstance(err, CapturedException) and kind is Kind.UNKNOWN:
            kind = classify_spark_error(topic.name, exception_text(err), topic.storage_conn_id).kind
        log.error("the parsed tables of topic %s could not catch up: %s", topic.name, err)
        cause = str(err).splitlines()[0] if str(err) else type(err).__name__
        return failure(
            kind,
            f"topic {topic.name!r}: bronze landed every record read this run ({writer.stats.bronze_rows} "
            f"rows) and keeps landing; the parsed tables are behind bronze {backlog.describe()}. "
            f"Cause: {cause}. Once it is fixed, the next run (or clearing this task) catches them up "
            "from bronze, exactly once",
        )
    return None


def reingest(topic: TopicConfig, client_config: dict[str, str], reingest_from: str) -> int:
    """The guarded re-ingest: Kafka from ``reingest_from`` to the checkpoint, only what tables lack."""
    from pyspark.errors.exceptions.captured import CapturedException
    from pyspark.sql import SparkSession

    try:
        since = parse_reingest_from(reingest_from, datetime.now(UTC))
    except ReingestRefusedError as err:
        return report(failure_of(err))
    spark = SparkSession.builder.appName(f"kafkalake-reingest-{topic.name}").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    object_store.configure(spark)
    try:
        outcome = landing_gaps.reingest(spark, topic, client_config, since)
    except KafkalakeError as err:
        return report(failure_of(err))
    except CapturedException as err:
        log.error("the re-ingest of topic %s failed: %s", topic.name, err)
        return report(classify_spark_error(topic.name, exception_text(err), topic.storage_conn_id))
    finally:
        spark.stop()
    log.info("done: %s", outcome.summary())
    return 0


def write_metrics(
    writer: BatchWriter,
    started: float,
    streaming: float | None,
    done: float | None = None,
    follow_ups: dict[str, str] | None = None,
) -> None:
    """Hand what the run landed to the Airflow task, in the file it named (if it named one)."""
    path = os.environ.get(ENV_METRICS_FILE)
    if not path:
        return
    done = done or time.monotonic()
    # A run that failed before its stream started spent all its time starting up.
    startup = (streaming if streaming is not None else done) - started
    metrics = writer.stats.job_metrics(startup_seconds=startup, processing_seconds=done - (streaming or done))
    Path(path).write_text(replace(metrics, follow_ups=follow_ups or {}, recovered=writer.recovered).to_json())


def report(failed: Failure) -> int:
    """Print the one failure line, last, so it lands in the log tail Airflow's error carries.

    spark-submit passes the driver's stderr on as its own stdout, with its other output.
    """
    print(failure_line(failed), file=sys.stderr, flush=True)
    return exit_code(failed.kind)


if __name__ == "__main__":
    sys.exit(main())
