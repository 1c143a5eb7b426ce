"""Build and run the ``spark-submit`` command of one of the project's jobs, outside Airflow.

The DAGs launch jobs through Airflow's Spark provider; this is the same command for the demo, the
tests and for running a job by hand:

    python -m kafkalake.spark_jobs show_table --topic orders
    python -m kafkalake.spark_jobs ingest_topic --topic orders --bootstrap-servers 127.0.0.1:9092
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from kafkalake.catalog import load_catalog
from kafkalake.jars import jar_files
from kafkalake.kafka_client import ENV_CLIENT_CONFIG_FILE, config_file
from kafkalake.paths import ENV_CATALOG, ENV_LAKE_ROOT, catalog_path, jobs_dir, lake_root
from kafkalake.spark_config import topic_conf

JOBS = ("ingest_topic", "refresh_schema", "register_table", "maintain_table", "replay_topic", "show_table")


def command(
    job: str,
    topic_name: str,
    *,
    catalog: Path,
    lake: Path,
    master: str = "local[*]",
    extra_args: Sequence[str] = (),
) -> list[str]:
    topic = load_catalog(catalog, lake).topic(topic_name)
    cmd = [str(Path(sys.executable).parent / "spark-submit"), "--master", master]
    for key, value in topic_conf(topic, lake).items():
        cmd += ["--conf", f"{key}={value}"]
    cmd += ["--jars", ",".join(str(p) for p in jar_files("spark"))]
    return [*cmd, str(jobs_dir() / f"{job}.py"), "--topic", topic_name, *extra_args]


def job_environment(catalog: Path, lake: Path, path: str) -> dict[str, str]:
    """What a job's process needs on top of its parent's environment.

    The catalog and lake it serves, and spark-submit and the driver's Python from the environment
    this process runs in (``path``: the PATH to extend).
    """
    return {
        ENV_CATALOG: str(catalog),
        ENV_LAKE_ROOT: str(lake),
        "PATH": str(Path(sys.executable).parent) + os.pathsep + path,
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }


def environment(catalog: Path, lake: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    return {**env, **job_environment(catalog, lake, env.get("PATH", ""))}


@contextlib.contextmanager
def kafka_settings(bootstrap_servers: str | None, env: dict[str, str]) -> Iterator[dict[str, str]]:
    """Add the Kafka client settings file to ``env`` for the duration of a job."""
    if bootstrap_servers is None:
        yield env
        return
    with config_file({"bootstrap.servers": bootstrap_servers}) as path:
        yield {**env, ENV_CLIENT_CONFIG_FILE: str(path)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run one of the project's Spark jobs for one topic.")
    parser.add_argument("job", choices=JOBS)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--bootstrap-servers", help="Kafka brokers (the ingest job needs them)")
    args, rest = parser.parse_known_args(argv)
    catalog, lake = catalog_path(), lake_root()
    cmd = command(args.job, args.topic, catalog=catalog, lake=lake, master=args.master, extra_args=rest)
    with kafka_settings(args.bootstrap_servers, environment(catalog, lake)) as env:
        return subprocess.run(cmd, env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
