"""spark-submit entry point: infer a topic's JSON schema from recent bronze rows and persist it.

spark-submit --jars ... jobs/refresh_schema.py --topic orders
"""

from __future__ import annotations

import logging
import sys

from kafkalake.core.errors import KafkalakeError, failure_of
from kafkalake.lake import store_refusals
from kafkalake.spark import object_store
from kafkalake.spark.job_args import report, topic_from_args
from kafkalake.spark.schema_refresh import refresh

log = logging.getLogger("kafkalake.schema")


def main(argv: list[str] | None = None) -> int:
    topic = topic_from_args(__doc__, argv)
    if not topic.parsed.enabled:
        log.info("topic %s is bronze only (parsed: false): no schema to refresh", topic.name)
        return 0

    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName(f"kafkalake-schema-{topic.name}").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    object_store.configure(spark)
    try:
        with store_refusals.named(topic.name, topic.storage_conn_id):
            log.info(refresh(spark, topic).summary(topic.name))
    except KafkalakeError as err:
        return report(failure_of(err))
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
