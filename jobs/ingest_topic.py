"""spark-submit entry point: land everything new in one Kafka topic in its bronze Delta table.

    spark-submit --jars ... jobs/ingest_topic.py --topic orders

The topic's settings come from the catalog (``KAFKALAKE_CATALOG``, ``KAFKALAKE_LAKE_ROOT``); the
Kafka client settings, secrets included, from the private file named by
``KAFKALAKE_KAFKA_CONFIG_FILE`` — never from the command line.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from kafkalake.bronze import start_ingest
from kafkalake.catalog import load_catalog
from kafkalake.kafka_client import ENV_CLIENT_CONFIG_FILE, read_config_file
from kafkalake.paths import catalog_path, lake_root

log = logging.getLogger("kafkalake.ingest")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topic", required=True, help="topic name, as in the catalog")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    topic = load_catalog(catalog_path(), lake_root()).topic(args.topic)
    config_file = os.environ.get(ENV_CLIENT_CONFIG_FILE)
    if not config_file:
        parser.error(f"{ENV_CLIENT_CONFIG_FILE} must name the Kafka client settings file")
    client_config = read_config_file(config_file)

    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName(f"kafkalake-ingest-{topic.name}").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    log.info("ingesting topic %s into %s (checkpoint %s)", topic.name, topic.path, topic.checkpoint_path)
    query = start_ingest(spark, topic, client_config)
    query.awaitTermination()
    progress = query.recentProgress
    rows = sum(p.get("numInputRows", 0) for p in progress if isinstance(p, dict))
    log.info("done: %d rows in %d micro-batches", rows, len([p for p in progress if p]))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
