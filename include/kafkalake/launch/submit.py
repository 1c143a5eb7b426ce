"""One spark-submit of a project's job: the application, its arguments, settings, jars and environment.

:func:`submission` is the one builder. The Airflow operators (:mod:`kafkalake.airflow.tasks`) hand
what it returns to the Spark provider's operator; :mod:`.jobs` renders it as a command line for the
demo, the tests and a job run by hand (:mod:`kafkalake.cli.run_job`). So what the tests launch is
what the DAGs launch. Nothing is looked up or started here: the caller reads connections, writes the
hand-over files (:mod:`.handover`) and submits.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kafkalake.config.topic import TopicConfig
from kafkalake.core.paths import ENV_CATALOG, ENV_LAKE_ROOT, jobs_dir
from kafkalake.core.run_metrics import ENV_METRICS_FILE
from kafkalake.lake.table_position import ENV_TOPIC_ID
from kafkalake.launch.handover import ENV_CLIENT_CONFIG_FILE
from kafkalake.launch.jars import jar_files
from kafkalake.launch.jvm_extension import loaded_by
from kafkalake.launch.spark_auth import AUTH_CONF, auth_file
from kafkalake.launch.spark_conf import for_run, topic_conf


@dataclass(frozen=True)
class Submission:
    """A job's spark-submit, in the Spark provider's operator's terms."""

    #: The job's file under ``jobs/``.
    application: Path
    #: The job's options (``--topic`` first).
    application_args: tuple[str, ...]
    #: Spark settings (``--conf``).
    conf: Mapping[str, str]
    #: Local files resolved at set-up (``--jars``): nothing is fetched at run time, no ``--packages``.
    jars: tuple[Path, ...]
    #: What the job's process needs on top of its parent's environment.
    env: Mapping[str, str]
    #: The Spark application's name (the operators' ``--name``).
    name: str
    #: ``--properties-file``: the cluster's file with Spark's shared secret (:mod:`.spark_auth`),
    #: when the cluster authenticates; its path only is on the command line.
    properties_file: Path | None = None

    def jars_arg(self) -> str:
        """``--jars``' value."""
        return ",".join(str(p) for p in self.jars)

    def command(self, master: str) -> list[str]:
        """The ``spark-submit`` command line on ``master`` (its environment: :attr:`env`)."""
        cmd = [spark_submit(), "--master", master]
        if self.properties_file is not None:
            cmd += ["--properties-file", str(self.properties_file)]
        for key, value in self.conf.items():
            cmd += ["--conf", f"{key}={value}"]
        cmd += ["--jars", self.jars_arg()]
        return [*cmd, str(self.application), *self.application_args]


def spark_submit() -> str:
    """The spark-submit of the environment this process runs in (pyspark's, beside this Python)."""
    return str(Path(sys.executable).parent / "spark-submit")


def application(job: str) -> Path:
    """The job's file: ``ingest_topic`` or ``ingest_topic.py`` → ``jobs/ingest_topic.py``."""
    return jobs_dir() / f"{Path(job).stem}.py"


def app_name(job: str, topic_name: str) -> str:
    return f"kafkalake-{Path(job).stem}-{topic_name}"


def topic_args(topic_name: str, args: Sequence[str] = ()) -> list[str]:
    """A job's options: the topic it serves, then ``args``."""
    return ["--topic", topic_name, *args]


def spark_jars(topic: TopicConfig, *, extension: bool | None = None) -> list[Path]:
    """The ``spark`` set (Delta, the Kafka connector, kafkalake's extension unless ``extension`` is
    False), for a topic whose tables are on an object store the ``s3a`` set, and for a topic in a
    schema registry's format the ``avro`` set (:mod:`.jars`)."""
    return [
        *jar_files("spark", extension=extension),
        *(jar_files("s3a") if topic.on_object_store else []),
        *(jar_files("avro") if topic.uses_registry else []),
    ]


#: spark-submit's own JVM (Spark's launcher, ``SPARK_LAUNCHER_OPTS``): it builds the driver's command
#: line and exits within a second, so Java's quick compiler and the serial collector are all it can
#: use. 5 launches, CPU-s: 1.35 / 1.39 by default, 0.89 / 0.94 with these.
LAUNCHER_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
ENV_LAUNCHER_OPTS = "SPARK_LAUNCHER_OPTS"


def job_environment(
    catalog: Path, lake: Path, path: str, inherited: Mapping[str, str] | None = None
) -> dict[str, str]:
    """What a job's process needs on top of its parent's environment (``inherited``, by default this
    process's).

    The catalog and lake it serves, spark-submit and the driver's Python from the environment
    this process runs in (``path``: the PATH to extend), and the launcher's JVM options unless the
    parent's environment has its own.
    """
    parent = os.environ if inherited is None else inherited
    return {
        ENV_CATALOG: str(catalog),
        ENV_LAKE_ROOT: str(lake),
        "PATH": str(Path(sys.executable).parent) + os.pathsep + path,
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        ENV_LAUNCHER_OPTS: parent.get(ENV_LAUNCHER_OPTS) or LAUNCHER_JAVA_OPTIONS,
    }


def submission(
    job: str,
    topic: TopicConfig,
    *,
    catalog: Path,
    lake: Path,
    args: Sequence[str] = (),
    conf: Mapping[str, str] | None = None,
    short_run: bool | None = None,
    kafka_settings: Path | None = None,
    metrics_file: Path | None = None,
    topic_id: str | None = None,
    env: Mapping[str, str] | None = None,
    path: str | None = None,
) -> Submission:
    """The spark-submit of ``job`` (``ingest_topic`` or ``ingest_topic.py``) for ``topic``.

    Args:
        job: the job's name under ``jobs/``.
        topic: the topic it serves, as the catalog at ``catalog`` and the lake at ``lake`` have it.
        args: the job's options after ``--topic``.
        conf: the job's settings as chosen before (a DAG's tasks take theirs at parse time: they
            show in the task's rendered fields); by default the topic's
            (:func:`~kafkalake.launch.spark_conf.topic_conf`).
        short_run: whether the run is short (its driver's compilers,
            :func:`~kafkalake.launch.spark_conf.for_run`); None leaves the settings as they are.
        kafka_settings: the private file of the Kafka client settings (:mod:`.handover`).
        metrics_file: where the job writes its run metrics.
        topic_id: Kafka's ID of the topic, which the job checks against its table's.
        env: more of the job's environment (the caller's own), under the three above.
        path: the PATH to extend with this Python's scripts; by default this process's.
    """
    settings = topic_conf(topic, lake) if conf is None else dict(conf)
    if short_run is not None:
        settings = for_run(settings, short_run)
    properties_file = auth_file()
    if properties_file is not None:
        settings = {**settings, **AUTH_CONF}
    # The settings decide (a DAG's were chosen at parse time): the extension's jar goes with its class.
    jars = spark_jars(topic, extension=loaded_by(settings.get("spark.sql.extensions", "")))
    handed = {
        **({ENV_TOPIC_ID: topic_id} if topic_id else {}),
        **({ENV_CLIENT_CONFIG_FILE: str(kafka_settings)} if kafka_settings is not None else {}),
        **({ENV_METRICS_FILE: str(metrics_file)} if metrics_file is not None else {}),
    }
    parent_path = os.environ.get("PATH", "") if path is None else path
    return Submission(
        application=application(job),
        application_args=tuple(topic_args(topic.name, args)),
        conf=settings,
        jars=tuple(jars),
        env={**job_environment(catalog, lake, parent_path), **(env or {}), **handed},
        name=app_name(job, topic.name),
        properties_file=properties_file,
    )
