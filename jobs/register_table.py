"""spark-submit entry point: make a topic's Delta table queryable by name (``bronze.<topic>``).

spark-submit --jars ... jobs/register_table.py --topic orders
"""

from __future__ import annotations

import contextlib
import logging
import sys

from kafkalake.core.paths import lake_root, metastore_dir
from kafkalake.lake.registry import registry_dir
from kafkalake.launch.spark_conf import metastore_uri
from kafkalake.spark.job_args import topic_from_args
from kafkalake.spark.job_session import job_session
from kafkalake.spark.registration import metastore_lock, register

log = logging.getLogger("kafkalake.register")


def main(argv: list[str] | None = None) -> int:
    topic = topic_from_args(__doc__, argv)
    # Derby admits one JVM at a time; a metastore service takes many at once, across machines.
    with (
        metastore_lock(metastore_dir(lake_root())) if metastore_uri() is None else contextlib.nullcontext(),
        job_session(f"kafkalake-register-{topic.name}", topic, hive=True) as job,
    ):
        for line in register(job.spark, topic, registry_dir(lake_root())):
            log.info(line)
    return job.exit_code()


if __name__ == "__main__":
    sys.exit(main())
