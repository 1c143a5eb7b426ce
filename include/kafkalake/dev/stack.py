"""The production-shaped stack on one machine, without Docker: ``make stack``.

make stack                      (or: python -m kafkalake.dev.stack --port 8080)

Starts, in the topology's order (:mod:`kafkalake.dev.topology`, the same as docker-compose.yml):
a private PostgreSQL (``.stack/postgres``), the local broker (127.0.0.1:9092, ``.kafka``, shared with
``make demo``), the Hive metastore service on PostgreSQL (:mod:`kafkalake.dev.metastore`; every Spark
job registers and reads tables through it instead of Derby), and Airflow as deployed: ``api-server``,
``scheduler``, ``dag-processor`` and ``triggerer`` as separate processes with the LocalExecutor on
PostgreSQL (:mod:`kafkalake.dev.deployed_airflow`), running this repository's DAGs on the same
catalog and lake as ``make demo``. Their logs are in ``.stack/logs``. Ctrl-C stops Airflow, the metastore and
PostgreSQL (the broker keeps running: ``make kafka-stop``); the databases are kept for the next start.

Log in at http://127.0.0.1:<port> as ``admin``: the password is in ``.stack/secrets/
airflow-users.json`` (0600, made new at each start and removed at stop, with the other secrets).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from kafkalake.core.paths import REPO_ROOT, catalog_path, lake_root
from kafkalake.dev import local_airflow
from kafkalake.dev.broker import LocalKafka
from kafkalake.dev.deployed_airflow import USERS_FILE, DeployedAirflow, deployed_environment, write_secrets
from kafkalake.dev.metastore import LocalMetastore
from kafkalake.dev.postgres import LocalPostgres
from kafkalake.dev.standalone_airflow import wait_for
from kafkalake.launch import jars
from kafkalake.launch.spark_conf import ENV_METASTORE_URI

log = logging.getLogger("kafkalake.dev.stack")

START_TIMEOUT = 300


def deployed_airflow(
    directory: Path, postgres: LocalPostgres, *, kafka_bootstrap: str, port: int, metastore_uri: str
) -> DeployedAirflow:
    """Airflow's components on ``postgres``'s ``airflow`` database, its state in ``directory``.

    Their Spark jobs use the metastore service at ``metastore_uri``.
    """
    secrets_dir = directory / "secrets"
    write_secrets(secrets_dir, postgres.database("airflow"))
    home = directory / "airflow"
    env = local_airflow.environment(
        home, kafka_bootstrap=kafka_bootstrap, catalog=catalog_path(), lake_root=lake_root()
    )
    env = deployed_environment(local_airflow.standalone_environment(env, port=port), secrets_dir)
    env[ENV_METASTORE_URI] = metastore_uri
    return DeployedAirflow(
        url=f"http://127.0.0.1:{port}", home=home, env=env, log=directory / "logs", secrets_dir=secrets_dir
    )


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8080, help="the Airflow UI's port on 127.0.0.1")
    parser.add_argument("--kafka-port", type=int, default=9092)
    parser.add_argument("--dir", default=str(REPO_ROOT / ".stack"), help="the stack's state")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    signal.signal(signal.SIGTERM, _raise_interrupt)  # `kill` stops it as cleanly as Ctrl-C

    directory = Path(args.dir).resolve()
    for group in jars.GROUPS:
        jars.prepare(group)
    postgres = LocalPostgres(directory / "postgres").start()
    broker = LocalKafka(REPO_ROOT / ".kafka", args.kafka_port, args.kafka_port + 1).start()
    (directory / "metastore").mkdir(parents=True, exist_ok=True)
    metastore = LocalMetastore(directory / "metastore", postgres.database("metastore", user="hive"))
    airflow = deployed_airflow(
        directory,
        postgres,
        kafka_bootstrap=broker.bootstrap_servers,
        port=args.port,
        metastore_uri=metastore.uri,
    )
    try:
        metastore.start()
        log.info("migrating Airflow's metadata DB on PostgreSQL %s:%d", postgres.host, postgres.port)
        airflow.init_db()
        airflow.start()
        wait_for(airflow.healthy, what="Airflow's components to be healthy", timeout=START_TIMEOUT, every=2)
        log.info("Airflow UI: %s (user admin; password in %s)", airflow.url, airflow.secrets_dir / USERS_FILE)
        log.info("catalog %s, lake %s, Kafka %s", catalog_path(), lake_root(), broker.bootstrap_servers)
        log.info(
            "Hive metastore %s; logs in %s and %s", metastore.uri, airflow.log, metastore.config.log_file
        )
        log.info("Ctrl-C stops Airflow, the metastore and PostgreSQL")
        while airflow.running():
            time.sleep(2)
        airflow.healthy()  # names the component that died, with its log
        return 1
    except KeyboardInterrupt:
        log.info("stopping")
        return 0
    finally:
        airflow.stop()
        metastore.stop()
        postgres.stop()


if __name__ == "__main__":
    sys.exit(main())
