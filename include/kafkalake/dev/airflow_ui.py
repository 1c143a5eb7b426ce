"""Airflow's real UI on this project's DAGs: the local broker, then ``airflow standalone``.

make airflow                    (or: python -m kafkalake.dev.airflow_ui --port 8080)

Starts (or reuses) the local broker on 127.0.0.1:9092, then runs ``airflow standalone`` in the
foreground with the same environment as ``make demo`` (catalog, lake, Kafka connection) and its own
AIRFLOW_HOME (``.airflow-ui/``). Open http://127.0.0.1:<port>, log in as ``admin`` with the password
printed here; Ctrl-C stops Airflow (the broker keeps running: ``make kafka-stop``).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from kafkalake.core.paths import REPO_ROOT, catalog_path, lake_root
from kafkalake.dev import local_airflow
from kafkalake.dev.broker import LocalKafka
from kafkalake.launch import jars

log = logging.getLogger("kafkalake.dev.airflow_ui")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8080, help="the UI's port on 127.0.0.1")
    parser.add_argument("--kafka-port", type=int, default=9092)
    parser.add_argument("--home", default=str(REPO_ROOT / ".airflow-ui"), help="AIRFLOW_HOME")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

    jars.prepare()
    broker = LocalKafka(REPO_ROOT / ".kafka", args.kafka_port, args.kafka_port + 1).start()
    home = Path(args.home).resolve()
    env = local_airflow.environment(
        home,
        kafka_bootstrap=broker.bootstrap_servers,
        catalog=catalog_path(),
        lake_root=lake_root(),
    )
    env = local_airflow.standalone_environment(env, port=args.port)
    # The metadata DB with the Spark pool: without it the scheduler leaves every Spark task queued.
    local_airflow.init_db(env)
    log.info("Airflow UI: http://127.0.0.1:%d (user admin; password: standalone prints it)", args.port)
    log.info("catalog %s, lake %s, Kafka %s", catalog_path(), lake_root(), broker.bootstrap_servers)
    # Airflow does not support creating backfills on SQLite beside a running scheduler (RUNBOOK.md).
    log.info("metadata DB: SQLite; for backfills use `make stack` (PostgreSQL)")
    command = local_airflow.airflow_command("standalone")
    os.execve(command[0], command, env)  # Airflow in the foreground: Ctrl-C stops all its parts


if __name__ == "__main__":
    sys.exit(main())
