"""spark-submit entry point: rebuild a topic's parsed tables from bronze as of a version or a time.

    spark-submit --jars ... jobs/replay_topic.py --topic orders [--as-of-version 12 | --as-of-timestamp
        2026-11-22T10:00:00Z] [--kafka-timestamp-from T] [--kafka-timestamp-until T]

Re-parses, with today's code, schema history and catalog settings, every record of the bronze
snapshot (default: its latest version) and replaces their rows in the parsed and dead-letter tables,
one commit each; rebuilds the latest-row table. Bronze and the checkpoint are never written
(``kafkalake.spark.replay``). Empty option values mean "not given", so a DAG passes its params as they are.

A failure the job can name ends with one line ``KAFKALAKE_FAILURE kind=<kind> <what to do>`` and the
kind's exit code: ``bad_config`` (a bronze-only topic, a version beyond the table, a timestamp
before it), ``ingest_unfinished``, ``checkpoint_locked`` (an ingest is running: retried),
``schema_rejected`` and ``expectation_failed``.
"""

from __future__ import annotations

import argparse
import logging
import sys

from kafkalake.config.catalog import load_topic
from kafkalake.core.errors import CatalogError, KafkalakeError, Kind, failure, failure_of
from kafkalake.core.paths import catalog_path, lake_root
from kafkalake.spark.job_args import LOG_FORMAT, report
from kafkalake.spark.job_session import job_session
from kafkalake.spark.replay import replay, selection_from

log = logging.getLogger("kafkalake.spark.replay")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topic", required=True, help="topic name, as in the catalog")
    parser.add_argument("--as-of-version", default="", help="bronze version to replay (default: latest)")
    parser.add_argument("--as-of-timestamp", default="", help="or: the last bronze version at this time")
    parser.add_argument("--kafka-timestamp-from", default="", help="only records from this Kafka time")
    parser.add_argument("--kafka-timestamp-until", default="", help="only records before this Kafka time")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    try:
        topic = load_topic(catalog_path(), lake_root(), args.topic)
        selection = selection_from(
            topic.name,
            args.as_of_version,
            args.as_of_timestamp,
            args.kafka_timestamp_from,
            args.kafka_timestamp_until,
        )
    except CatalogError as err:
        return report(failure(Kind.BAD_CONFIG, f"topic {args.topic!r}: {err}"))
    except KafkalakeError as err:
        return report(failure_of(err))
    with job_session(f"kafkalake-replay-{topic.name}", topic) as job:
        result = replay(job.spark, topic, selection)
        # Also on stdout: the Airflow task log shows spark-submit's output line by line.
        print(f"kafkalake replay: {result.summary()}", flush=True)
    return job.exit_code()


if __name__ == "__main__":
    sys.exit(main())
