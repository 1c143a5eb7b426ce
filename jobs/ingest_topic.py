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
(``kafkalake.core.run_metrics.JobMetrics``), on success and on failure; its Airflow task reads it.

After a successful stream the job does the DAG's follow-ups in its warm Spark application
(:mod:`kafkalake.spark.follow_ups`: the schema refresh, and table care when it is due), so a DAG
run starts one JVM, not three or four; ``--no-follow-ups`` lands only.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from kafkalake.config.catalog import load_topic
from kafkalake.config.topic import TopicConfig
from kafkalake.core.errors import (
    CatalogError,
    KafkaConfigError,
    Kind,
    ReingestRefusedError,
    failure,
    failure_of,
)
from kafkalake.core.job_failures import classify_spark_error, exception_text
from kafkalake.core.paths import catalog_path, lake_root
from kafkalake.core.run_metrics import ENV_METRICS_FILE
from kafkalake.core.run_mode import parse_reingest_from
from kafkalake.lake.table_position import ENV_TOPIC_ID
from kafkalake.launch.handover import (
    ENV_CLIENT_CONFIG_FILE,
    ENV_KEEP_CLIENT_CONFIG_FILE,
    read_config_file,
)
from kafkalake.spark import reingest as landing_gaps
from kafkalake.spark.follow_ups import run_follow_ups
from kafkalake.spark.ingest_run import IngestRun
from kafkalake.spark.job_args import LOG_FORMAT, report
from kafkalake.spark.job_session import driver_peak_memory_bytes, job_session

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
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)

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
    if args.reingest_from is not None:
        return reingest(topic, client_config, args.reingest_from)
    return ingest(topic, client_config, started, follow_ups=not args.no_follow_ups)


def ingest(
    topic: TopicConfig, client_config: dict[str, str], started: float, *, follow_ups: bool = True
) -> int:
    """The stream (:class:`~kafkalake.spark.ingest_run.IngestRun`), then the follow-ups."""
    done: dict[str, str] = {}
    with job_session(f"kafkalake-ingest-{topic.name}", topic) as job:
        run = IngestRun(
            job.spark, topic, client_config, topic_id=os.environ.get(ENV_TOPIC_ID) or None, started=started
        )
        # Written however the run ends, once the session has stopped.
        job.on_stop = lambda: write_metrics(run, done)
        behind = run.execute()
        if behind is not None:
            job.fail(behind)
        elif follow_ups:
            done.update(run_follow_ups(job.spark, topic, run.writer.stats))
    return job.exit_code()


def reingest(topic: TopicConfig, client_config: dict[str, str], reingest_from: str) -> int:
    """The guarded re-ingest: Kafka from ``reingest_from`` to the checkpoint, only what tables lack."""
    from pyspark.errors.exceptions.captured import CapturedException

    try:
        since = parse_reingest_from(reingest_from, datetime.now(UTC))
    except ReingestRefusedError as err:
        return report(failure_of(err))
    with job_session(f"kafkalake-reingest-{topic.name}", topic) as job:
        try:
            if topic.is_family:
                outcomes = landing_gaps.reingest_family(job.spark, topic, client_config, since)
            else:
                outcomes = [landing_gaps.reingest(job.spark, topic, client_config, since)]
        except CapturedException as err:
            log.error("the re-ingest of topic %s failed: %s", topic.name, err)
            job.fail(classify_spark_error(topic.name, exception_text(err), topic.storage_conn_id))
        else:
            for outcome in outcomes:
                log.info("done: %s", outcome.summary())
    return job.exit_code()


def write_metrics(run: IngestRun, follow_ups: dict[str, str]) -> None:
    """Hand what the run landed to the Airflow task, in the file it named (if it named one)."""
    path = os.environ.get(ENV_METRICS_FILE)
    if path:
        metrics = replace(run.metrics(follow_ups), driver_peak_memory_bytes=driver_peak_memory_bytes())
        Path(path).write_text(metrics.to_json())


if __name__ == "__main__":
    sys.exit(main())
