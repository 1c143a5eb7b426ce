"""What launches one of the project's Spark jobs: its ``spark-submit`` command and its environment.

The DAGs launch jobs through Airflow's Spark provider with :func:`job_environment`; the demo, the
tests and :mod:`kafkalake.cli.run_job` (a job by hand) use :func:`command` and :func:`environment`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from kafkalake.config.catalog import load_catalog
from kafkalake.core.paths import ENV_CATALOG, ENV_LAKE_ROOT, jobs_dir
from kafkalake.launch.jars import jar_files
from kafkalake.launch.spark_conf import for_run, topic_conf

JOBS = ("ingest_topic", "refresh_schema", "register_table", "maintain_table", "replay_topic", "show_table")


def command(
    job: str,
    topic_name: str,
    *,
    catalog: Path,
    lake: Path,
    master: str = "local[*]",
    extra_args: Sequence[str] = (),
    short_run: bool = False,
) -> list[str]:
    """``spark-submit`` of a job for a topic; ``short_run``: a run that reads few records, whose
    driver starts with the quick compiler (:func:`~kafkalake.launch.spark_conf.for_run`)."""
    topic = load_catalog(catalog, lake).topic(topic_name)
    cmd = [str(Path(sys.executable).parent / "spark-submit"), "--master", master]
    for key, value in for_run(topic_conf(topic, lake), short_run).items():
        cmd += ["--conf", f"{key}={value}"]
    jars = [*jar_files("spark"), *(jar_files("s3a") if topic.on_object_store else [])]
    cmd += ["--jars", ",".join(str(p) for p in jars)]
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
