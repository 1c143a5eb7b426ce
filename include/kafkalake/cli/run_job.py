"""Run one of the project's Spark jobs for one topic by hand, outside Airflow:

python -m kafkalake.cli.run_job show_table --topic orders
python -m kafkalake.cli.run_job ingest_topic --topic orders --bootstrap-servers 127.0.0.1:9092
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
from collections.abc import Iterator, Sequence

from kafkalake.config.catalog import load_catalog
from kafkalake.config.topic import TopicConfig
from kafkalake.core.paths import catalog_path, lake_root
from kafkalake.launch.handover import ENV_CLIENT_CONFIG_FILE, config_file
from kafkalake.launch.jobs import JOBS, command, environment

# kafkalake.airflow.connections (and with it Airflow, ~5 s to import) is imported only when a connection
# must be looked up: the CLI runs without it otherwise.


@contextlib.contextmanager
def kafka_settings(bootstrap_servers: str | None, env: dict[str, str]) -> Iterator[dict[str, str]]:
    """Add the Kafka client settings file to ``env`` for the duration of a job."""
    if bootstrap_servers is None:
        yield env
        return
    with config_file({"bootstrap.servers": bootstrap_servers}) as path:
        yield {**env, ENV_CLIENT_CONFIG_FILE: str(path)}


@contextlib.contextmanager
def object_store_settings(topic: TopicConfig) -> Iterator[dict[str, str]]:
    """The topic's storage connection for the job, when its tables are on an object store and it names one."""
    if not (topic.on_object_store and topic.storage_conn_id):
        yield {}
        return
    from kafkalake.airflow.connections import storage_settings_file

    with storage_settings_file(topic) as env:
        yield env


@contextlib.contextmanager
def registry_settings(topic: TopicConfig) -> Iterator[dict[str, str]]:
    """The topic's schema registry connection for the job, when its values are in a registry format."""
    if not topic.uses_registry:
        yield {}
        return
    from kafkalake.airflow.connections import registry_settings_file

    with registry_settings_file(topic) as env:
        yield env


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run one of the project's Spark jobs for one topic.")
    parser.add_argument("job", choices=JOBS)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--bootstrap-servers", help="Kafka brokers (the ingest job needs them)")
    args, rest = parser.parse_known_args(argv)
    catalog, lake = catalog_path(), lake_root()
    cmd = command(args.job, args.topic, catalog=catalog, lake=lake, master=args.master, extra_args=rest)
    topic = load_catalog(catalog, lake).topic(args.topic)
    with (
        kafka_settings(args.bootstrap_servers, environment(catalog, lake)) as env,
        object_store_settings(topic) as store_env,
        registry_settings(topic) as registry_env,
    ):
        return subprocess.run(cmd, env={**env, **store_env, **registry_env}, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
