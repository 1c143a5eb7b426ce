"""A project's Spark job as a command line: its ``spark-submit`` command and its environment.

The demo, the tests and :mod:`kafkalake.cli.run_job` (a job by hand) run :func:`command` with
:func:`environment`; the DAGs' operators hand the same :func:`~kafkalake.launch.submit.submission`
to Airflow's Spark provider instead.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from kafkalake.config.catalog import load_catalog
from kafkalake.launch.submit import Submission, job_environment, submission

#: Where a job runs when nothing says otherwise: this machine's cores.
LOCAL_MASTER = "local[*]"
JOBS = ("ingest_topic", "refresh_schema", "register_table", "maintain_table", "replay_topic", "show_table")


def command(
    job: str,
    topic_name: str,
    *,
    catalog: Path,
    lake: Path,
    master: str = LOCAL_MASTER,
    extra_args: Sequence[str] = (),
    short_run: bool = False,
) -> list[str]:
    """``spark-submit`` of a job for a topic; ``short_run``: a run that reads few records, whose
    driver starts with the quick compiler (:func:`~kafkalake.launch.spark_conf.for_run`)."""
    built = topic_submission(
        job, topic_name, catalog=catalog, lake=lake, extra_args=extra_args, short_run=short_run
    )
    return built.command(master)


def topic_submission(
    job: str,
    topic_name: str,
    *,
    catalog: Path,
    lake: Path,
    extra_args: Sequence[str] = (),
    short_run: bool = False,
) -> Submission:
    """The submission :func:`command` renders, for a caller that hands it to a job host."""
    topic = load_catalog(catalog, lake).topic(topic_name)
    return submission(job, topic, catalog=catalog, lake=lake, args=extra_args, short_run=short_run)


def environment(catalog: Path, lake: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (by default this process's environment) with what a job's process needs on top."""
    env = dict(os.environ if base is None else base)
    return {**env, **job_environment(catalog, lake, env.get("PATH", ""), env)}
