"""The end-to-end demo: broker, sample events, one DAG run through Airflow, the table read back.

make demo        (or: python -m kafkalake.dev.demo)
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from kafkalake.config.catalog import load_catalog
from kafkalake.core.paths import REPO_ROOT, catalog_path, lake_root
from kafkalake.dev import local_airflow, producer
from kafkalake.dev.broker import LocalKafka
from kafkalake.launch import jars, jobs

log = logging.getLogger("kafkalake.dev.demo")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topic", default="orders", help="a topic of the catalog")
    parser.add_argument("--events", type=int, default=1000)
    parser.add_argument("--port", type=int, default=9092)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    started = time.monotonic()
    # Everything runs on this machine: keep Spark off the network interfaces.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

    catalog, lake = catalog_path(), lake_root()
    broker = LocalKafka(REPO_ROOT / ".kafka", args.port, args.port + 1)

    def airflow_env() -> dict[str, str]:
        return local_airflow.environment(
            REPO_ROOT / ".airflow", kafka_bootstrap=broker.bootstrap_servers, catalog=catalog, lake_root=lake
        )

    # On a fresh clone the set-up is most of the demo's time: Airflow's metadata DB migrates (~30 s
    # of CPU) while the jars download, and kafkalake's JVM extension compiles while the broker starts.
    with ThreadPoolExecutor(max_workers=2) as pool:
        # The migration reads no Kafka setting: the broker's final address goes into the DAG run's.
        migrated = pool.submit(local_airflow.init_db, airflow_env())
        jars.resolve()
        built = pool.submit(jars.prepare)
        broker.start()
        topic = load_catalog(catalog, lake).topic(args.topic)
        if producer.create_topic(broker.bootstrap_servers, topic.name, partitions=3):
            log.info("created topic %s with 3 partitions", topic.name)
        samples = producer.sample_orders(args.events)
        sent = len(producer.produce(broker.bootstrap_servers, topic.name, samples))
        log.info("produced %d sample events to %s (a few malformed, a few not UTF-8)", sent, topic.name)
        built.result()
        migrated.result()
    env = airflow_env()
    log.info("running DAG %s through Airflow (airflow dags test)...", topic.dag_id)
    run = local_airflow.test_dag(env, topic.dag_id)
    log.info("DAG run %s: %s, tasks %s", run.run_id, run.state, run.task_states)

    log.info("reading %s back by name from the catalog:", topic.qualified_table)
    cmd = jobs.command("show_table", topic.name, catalog=catalog, lake=lake)
    shown = subprocess.run(cmd, env=jobs.environment(catalog, lake), capture_output=True, text=True)
    if shown.returncode != 0:
        print(shown.stderr[-4000:], file=sys.stderr)
        return shown.returncode
    print(shown.stdout)
    log.info(
        "demo done in %.0fs. The broker keeps running at %s; stop it with `make kafka-stop`.",
        time.monotonic() - started,
        broker.bootstrap_servers,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
