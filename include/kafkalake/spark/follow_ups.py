"""What the ingest job does after its stream, in the same Spark application: one JVM per DAG run.

A DAG run used to start three JVMs (ingest, refresh_schema, register_table), each 20-30 s of
start-up for a few seconds of work. The ingest's session is warm, so the schema refresh runs here;
its Airflow task then only reports what was done. A follow-up that fails here never fails the
ingest (the records have landed): it is left out of the result, and its own task runs it in a
JVM of its own, where it fails and retries visibly.

Registration is not done here: the embedded Derby metastore admits one JVM at a time, and the
ingest of another topic may run meanwhile. Its task skips the JVM when every table is already
registered (:mod:`kafkalake.lake.registry`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from kafkalake.config.topic import TopicConfig
from kafkalake.spark.schema_refresh import refresh

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

#: The task ids whose work the ingest job may do, as they appear in a topic's DAG.
REFRESH_SCHEMA = "refresh_schema"


def run_follow_ups(spark: SparkSession, topic: TopicConfig) -> dict[str, str]:
    """Do the follow-ups that apply to the topic; {task id: summary} of those that succeeded."""
    done: dict[str, str] = {}
    if topic.parsed.enabled:
        try:
            done[REFRESH_SCHEMA] = refresh(spark, topic).summary(topic.name)
            log.info("%s", done[REFRESH_SCHEMA])
        except Exception as err:
            log.warning("schema refresh in the ingest job failed, its task will run it: %s", err)
    return done
