"""spark-submit entry point: make a topic's Delta table queryable by name (``bronze.<topic>``).

spark-submit --jars ... jobs/register_table.py --topic orders
"""

from __future__ import annotations

import argparse
import logging
import sys

from kafkalake.catalog import load_catalog
from kafkalake.paths import catalog_path, lake_root
from kafkalake.registration import metastore_lock, register
from kafkalake.spark_config import metastore_dir

log = logging.getLogger("kafkalake.register")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topic", required=True, help="topic name, as in the catalog")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    topic = load_catalog(catalog_path(), lake_root()).topic(args.topic)

    from pyspark.sql import SparkSession

    with metastore_lock(metastore_dir(lake_root())):
        spark = (
            SparkSession.builder.appName(f"kafkalake-register-{topic.name}").enableHiveSupport().getOrCreate()
        )
        spark.sparkContext.setLogLevel("WARN")
        log.info(register(spark, topic))
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
