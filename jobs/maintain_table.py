"""spark-submit entry point: OPTIMIZE, VACUUM and table properties for one topic's tables.

    spark-submit --jars ... jobs/maintain_table.py --topic orders [--force]

What runs, and how, comes from the topic's ``maintenance`` block in the catalog. Each table's
report (files and bytes before and after) is logged. A configuration error (e.g. a Z-ORDER column
a table does not have) ends with a ``KAFKALAKE_FAILURE kind=bad_config`` line and exit code 78.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys

from kafkalake.config.catalog import load_topic
from kafkalake.core.errors import CatalogError, Kind, failure
from kafkalake.core.paths import catalog_path, lake_root
from kafkalake.lake.checkpoint_lock import checkpoint_lock
from kafkalake.spark.follow_ups import MAINTENANCE_REPORT
from kafkalake.spark.job_args import LOG_FORMAT, report
from kafkalake.spark.job_session import job_session
from kafkalake.spark.table_care import holds_run_lock, maintain

log = logging.getLogger("kafkalake.maintain")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topic", required=True, help="topic name, as in the catalog")
    parser.add_argument("--force", action="store_true", help="run every step, due or not")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    try:
        topic = load_topic(catalog_path(), lake_root(), args.topic)
    except CatalogError as err:
        return report(failure(Kind.BAD_CONFIG, f"topic {args.topic!r}: {err}"))
    # Locally Delta's log store refuses a second commit of one version, so OPTIMIZE may run beside
    # an ingest (a backfill run's table care does); on S3 it cannot, and a commit could be lost:
    # there the care holds the topic's run lock, as it does for a VACUUM below the 7-day guard.
    guard = checkpoint_lock(topic.checkpoint_path) if holds_run_lock(topic) else contextlib.nullcontext()
    with job_session(f"kafkalake-maintain-{topic.name}", topic) as job, guard:
        for table_report in maintain(job.spark, topic, force=args.force):
            # Also on stdout: the Airflow task log shows spark-submit's output line by line.
            print(f"{MAINTENANCE_REPORT} {table_report}", flush=True)
    return job.exit_code()


if __name__ == "__main__":
    sys.exit(main())
