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
from kafkalake.lake.schema_history import SchemaHistory
from kafkalake.spark.parse_columns import with_catalog_hints
from kafkalake.spark.schema_refresh import refresh
from kafkalake.spark.table_care import maintain
from kafkalake.spark.topic_parser import RunStats

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

#: The task ids whose work the ingest job may do, as they appear in a topic's DAG.
REFRESH_SCHEMA = "refresh_schema"
MAINTAIN_TABLE = "maintain_table"
#: The prefix of each table's care report on stdout, which the task log shows line by line.
MAINTENANCE_REPORT = "kafkalake maintenance report:"


def run_follow_ups(spark: SparkSession, topic: TopicConfig, stats: RunStats | None = None) -> dict[str, str]:
    """Do the follow-ups that apply to the topic; {task id: summary} of those that succeeded.

    ``stats``: what the run's stream parsed, which may show that a schema refresh has nothing to find.
    """
    done: dict[str, str] = {}
    if topic.parsed.enabled:
        try:
            done[REFRESH_SCHEMA] = schema_current(topic, stats) or refresh(spark, topic).summary(topic.name)
            log.info("%s", done[REFRESH_SCHEMA])
        except Exception as err:
            log.warning("schema refresh in the ingest job failed, its task will run it: %s", err)
    care = care_in_session(spark, topic)
    if care is not None:
        done[MAINTAIN_TABLE] = care
    return done


def fit_whole(evolution: str, stats: RunStats) -> bool:
    """Whether every record the run parsed fit the schema whole, under a mode whose batches add the
    new fields they meet: ``addNewColumns`` adds a batch's new fields before the batch is written,
    so a record that still has something in ``_rescued_data`` is one the schema could not take (a
    type conflict, a field past ``max_columns`` or outside the evolution's sample). None of those
    means none of the run's records has anything for a refresh to add.

    Not under the other modes: ``none`` ignores unknown fields without rescuing them and ``rescue``
    keeps them rescued, so the refresh is their only report of drift.
    """
    return evolution == "addNewColumns" and stats.parsed_rows > 0 and stats.rescued_rows == 0


def schema_current(topic: TopicConfig, stats: RunStats | None) -> str | None:
    """The refresh's summary when the run shows it would find nothing (no sample is read then);
    None when the refresh must run.

    It would find nothing when every record the run parsed fit the schema whole (:func:`fit_whole`)
    and the current version already has the catalog's type hints (a hint changed in the catalog is
    written by the refresh). The window's earlier records fit too, or their own runs refreshed.
    Measured: the refresh took ~1.3 s of a one-batch run's ~9 s after start-up (bench, 2,000 events).
    """
    if stats is None or not fit_whole(topic.parsed.evolution, stats):
        return None
    current = SchemaHistory(topic.schema_dir).current()
    if current is None or with_catalog_hints(current.schema, topic.parsed, current.schema) != current.schema:
        return None
    written = f"; versions written by its batches: {stats.schema_versions}" if stats.schema_versions else ""
    return (
        f"topic {topic.name}: schema version {current.version} current, no sample read: the run's "
        f"{stats.parsed_rows} parsed records fit it whole (addNewColumns){written}"
    )


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
