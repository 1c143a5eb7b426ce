"""spark-submit entry point: make a topic's Delta table queryable by name (``bronze.<topic>``).

spark-submit --jars ... jobs/register_table.py --topic orders
"""

from __future__ import annotations

import contextlib
import logging
import sys

from kafkalake.config.spark_conf import metastore_dir, metastore_uri
from kafkalake.core.errors import KafkalakeError, failure_of
from kafkalake.core.paths import lake_root
from kafkalake.lake import store_refusals
from kafkalake.lake.registry import registry_dir
from kafkalake.spark import object_store
from kafkalake.spark.job_args import report, topic_from_args
from kafkalake.spark.registration import metastore_lock, register

log = logging.getLogger("kafkalake.register")


def main(argv: list[str] | None = None) -> int:
    topic = topic_from_args(__doc__, argv)

    from pyspark.sql import SparkSession

    # Derby admits one JVM at a time; a metastore service takes many at once, across machines.
    with metastore_lock(metastore_dir(lake_root())) if metastore_uri() is None else contextlib.nullcontext():
        spark = (
            SparkSession.builder.appName(f"kafkalake-register-{topic.name}").enableHiveSupport().getOrCreate()
        )
        spark.sparkContext.setLogLevel("WARN")
        object_store.configure(spark)
        try:
            with store_refusals.named(topic.name, topic.storage_conn_id):
                for line in register(spark, topic, registry_dir(lake_root())):
                    log.info(line)
        except KafkalakeError as err:
            return report(failure_of(err))
        finally:
            spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
