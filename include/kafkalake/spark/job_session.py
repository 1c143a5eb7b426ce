"""The frame every Spark job shares: its session, its one failure line, its metrics, its stop.

Each file in ``jobs/`` is a short entry point::

    with job_session(f"kafkalake-schema-{topic.name}", topic) as job:
        log.info(refresh(job.spark, topic).summary(topic.name))
    return job.exit_code()

Inside the block, a typed error (:class:`~kafkalake.core.errors.KafkalakeError`), the object store
refusing or not answering, and a full disk end the job with their kind's failure line and exit
code (``kafkalake.core.errors.EXIT_CODES``), so Airflow decides retry-or-fail from that instead of
from a Java stack trace. Anything else is a crash and propagates (kind ``unknown`` to the task).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kafkalake.config.topic import TopicConfig
from kafkalake.core.errors import Failure, KafkalakeError, failure_of
from kafkalake.core.job_failures import classify_spark_error
from kafkalake.kafka import schema_registry
from kafkalake.lake import store_refusal_kinds
from kafkalake.spark import extension, s3a_session
from kafkalake.spark.job_args import report

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


@dataclass
class Job:
    """A running job: its session, and how it ends."""

    spark: SparkSession
    #: The failure that ends the job (set by :meth:`fail` or by the session's frame), or None.
    failed: Failure | None = None
    #: Called once the session has stopped, before the failure line: the job's metrics file.
    on_stop: Callable[[], None] | None = None

    def fail(self, failed: Failure) -> None:
        """End the job with ``failed`` (its line is printed last, after the session stopped)."""
        self.failed = failed

    def exit_code(self) -> int:
        """0, or the failure's kind's exit code after printing its line: call it once, last."""
        return 0 if self.failed is None else report(self.failed)


@contextlib.contextmanager
def job_session(
    app: str, topic: TopicConfig | None = None, *, hive: bool = False, log_level: str = "WARN"
) -> Iterator[Job]:
    """A Spark session for one job run, on the job's object store; stopped however the block ends.

    ``topic`` names the topic and its storage connection in the failures the block's errors map to.
    ``hive``: with the metastore (registration, the demo's table listing).
    """
    # pyspark is imported here, not at the top: the jobs' argument checks and the catalog's
    # refusals answer before a JVM (and pyspark's own import) is paid for.
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app)
    spark = (builder.enableHiveSupport() if hive else builder).getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    # Which way the run went, as its session has it (launch/jvm_extension's switch).
    log.info(
        "%s: kafkalake's JVM extension is %s (spark.sql.extensions=%s)",
        app,
        "on" if extension.loaded(spark) else "off: Spark's and Delta's public APIs only",
        spark.conf.get("spark.sql.extensions", ""),
    )
    job = Job(spark)
    name = topic.name if topic is not None else app
    try:
        s3a_session.configure(spark)
        # A topic in a registry format: the registry's settings its task handed over (read once).
        schema_registry.use_file_from_environment()
        with store_refusal_kinds.named(name, topic.storage_conn_id if topic is not None else None):
            yield job
    except KafkalakeError as err:
        job.fail(failure_of(err))
    except OSError as err:
        # A full disk outside Spark's own writes (the run lock, the schema history, the backlog
        # file): its kind, not an unknown crash that retries.
        if err.errno != errno.ENOSPC:
            raise
        log.error("%s failed: %s", app, err)
        job.fail(classify_spark_error(name, f"OSError: {err}"))
    finally:
        spark.stop()
        if job.on_stop is not None:
            job.on_stop()


def driver_peak_memory_bytes() -> int | None:
    """The driver JVM's peak resident memory so far (Linux's ``VmHWM``), or None.

    A PySpark job's Python process is started by the JVM spark-submit launched (its parent), which
    is the driver (and, in ``local[*]``, the executors too): that JVM's high-water mark, not this
    Python process's. None off Linux, or when the parent is not a JVM (the job run some other way).
    """
    parent = os.getppid()
    try:
        if Path(f"/proc/{parent}/comm").read_text().strip() != "java":
            return None
        status = Path(f"/proc/{parent}/status").read_text()
    except OSError:
        return None
    found = re.search(r"^VmHWM:\s+(\d+) kB$", status, re.MULTILINE)
    return int(found.group(1)) * 1024 if found else None
