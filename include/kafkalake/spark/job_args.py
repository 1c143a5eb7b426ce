"""The command line every per-topic Spark job shares: ``--topic NAME``, resolved in the catalog."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from kafkalake.config.catalog import load_topic
from kafkalake.config.topic import TopicConfig
from kafkalake.core.errors import Failure
from kafkalake.core.job_failures import exit_code, failure_line
from kafkalake.core.paths import catalog_path, lake_root

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def topic_from_args(doc: str, argv: Sequence[str] | None = None) -> TopicConfig:
    """Parse ``--topic``, set up logging, and return the topic's validated settings."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--topic", required=True, help="topic name, as in the catalog")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    return load_topic(catalog_path(), lake_root(), args.topic)


def report(failed: Failure) -> int:
    """Print a job's one failure line, last, and return its exit code.

    Last, so it lands in the log tail Airflow's error carries: spark-submit passes the driver's
    stderr on as its own stdout, with its other output.
    """
    print(failure_line(failed), file=sys.stderr, flush=True)
    return exit_code(failed.kind)
