"""What the ingest job does after its stream, in the same Spark application: one JVM per DAG run.

A DAG run used to start up to four JVMs (ingest, refresh_schema, register_table, maintain_table),
each 20-30 s of start-up for a few seconds of work. The ingest's session is warm, so the schema
refresh and, when it is due, the table care (OPTIMIZE, VACUUM, properties) run here; their Airflow
tasks then only report what was done. A follow-up that fails here never fails the ingest (the
records have landed): it is left out of the result, and its own task runs it in a JVM of its own,
where it fails and retries visibly.

Registration is not done here: the embedded Derby metastore admits one JVM at a time, and the
ingest of another topic may run meanwhile. Its task skips the JVM when every table is already
registered (:mod:`kafkalake.lake.registry`).
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING

from kafkalake.config.topic import TopicConfig
from kafkalake.lake import care_due
from kafkalake.lake.checkpoint_lock import checkpoint_lock
from kafkalake.spark.schema_refresh import refresh
from kafkalake.spark.table_care import maintain

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

#: The task ids whose work the ingest job may do, as they appear in a topic's DAG.
REFRESH_SCHEMA = "refresh_schema"
MAINTAIN_TABLE = "maintain_table"
#: The prefix of each table's care report on stdout, which the task log shows line by line.
MAINTENANCE_REPORT = "kafkalake maintenance report:"


def run_follow_ups(spark: SparkSession, topic: TopicConfig) -> dict[str, str]:
    """Do the follow-ups that apply to the topic; {task id: summary} of those that succeeded."""
    done: dict[str, str] = {}
    if topic.parsed.enabled:
        try:
            done[REFRESH_SCHEMA] = refresh(spark, topic).summary(topic.name)
            log.info("%s", done[REFRESH_SCHEMA])
        except Exception as err:
            log.warning("schema refresh in the ingest job failed, its task will run it: %s", err)
    care = care_in_session(spark, topic)
    if care is not None:
        done[MAINTAIN_TABLE] = care
    return done


def care_in_session(spark: SparkSession, topic: TopicConfig) -> str | None:
    """Table care, when some is due, in this session: its summary; None when none was done here."""
    try:
        due, _lines = care_due.due_now(topic)
        if not due:
            return None
        # On an object store the care holds the topic's run lock, as its own job does.
        guard = checkpoint_lock(topic.checkpoint_path) if topic.on_object_store else contextlib.nullcontext()
        with guard:
            reports = maintain(spark, topic)
    except Exception as err:
        log.warning("table care in the ingest job failed, its task will run it: %s", err)
        return None
    for report in reports:
        print(f"{MAINTENANCE_REPORT} {report}", flush=True)
    return "; ".join(str(report) for report in reports) or "nothing to maintain"
