"""spark-submit entry point: read a topic's table *by name* from the catalog and print a summary.

    spark-submit --jars ... jobs/show_table.py --topic orders [--rows 5]

Prints ``rows=<count>`` on a line of its own, then a few rows with keys and values decoded for
reading (bytes that are not UTF-8 shown as hex).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import TYPE_CHECKING

from kafkalake.config.catalog import load_catalog
from kafkalake.config.topic import TopicConfig
from kafkalake.core.paths import catalog_path, lake_root, metastore_dir
from kafkalake.launch.spark_conf import metastore_uri
from kafkalake.spark.job_session import job_session
from kafkalake.spark.registration import metastore_lock

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topic", required=True)
    parser.add_argument("--rows", type=int, default=5)
    args = parser.parse_args(argv)
    topic = load_catalog(catalog_path(), lake_root()).topic(args.topic)

    from pyspark.sql import functions as F

    # Derby admits one JVM at a time; a metastore service takes many at once, across machines.
    with (
        metastore_lock(metastore_dir(lake_root())) if metastore_uri() is None else contextlib.nullcontext(),
        job_session(f"kafkalake-show-{topic.name}", topic, hive=True, log_level="ERROR") as job,
    ):
        spark = job.spark
        table = spark.table(topic.qualified_table)
        print(f"table={topic.qualified_table}")
        print(f"rows={table.count()}")

        def readable(column: str) -> F.Column:
            text = F.col(column).cast("string")
            # A round trip through UTF-8 that changes the bytes means they were not UTF-8.
            return (
                F.when(F.encode(text, "UTF-8") == F.col(column), text)
                .otherwise(F.concat(F.lit("0x"), F.hex(column)))
                .alias(column)
            )

        sample = table.orderBy("partition", "offset").select(
            "partition", "offset", readable("key"), readable("value"), "kafka_timestamp"
        )
        sample.show(args.rows, truncate=60)
        if topic.parsed.enabled and spark.catalog.tableExists(topic.parsed_table):
            show_parsed(spark, topic, args.rows)
    return job.exit_code()


def show_parsed(spark: SparkSession, topic: TopicConfig, rows: int) -> None:
    from pyspark.sql import functions as F

    parsed = spark.table(topic.parsed_table)
    print(f"table={topic.parsed_table}")
    print(f"rows={parsed.count()}")
    from kafkalake.spark.table_settings import quote_identifier

    columns = [F.col(quote_identifier(c)) for c in parsed.columns if c != "_kafka"]
    parsed.orderBy("_kafka.partition", "_kafka.offset").select(*columns).show(rows, truncate=40)
    if spark.catalog.tableExists(topic.dead_letter_table):
        dead = spark.table(topic.dead_letter_table)
        print(f"table={topic.dead_letter_table}")
        print(f"rows={dead.count()}")
        dead.groupBy("reason").agg(F.count(F.lit(1)).alias("records")).orderBy("reason").show(truncate=False)
    if topic.parsed.latest_by_key and spark.catalog.tableExists(topic.latest_table):
        print(f"table={topic.latest_table}")
        print(f"rows={spark.table(topic.latest_table).count()} (one per Kafka key)")


if __name__ == "__main__":
    sys.exit(main())
