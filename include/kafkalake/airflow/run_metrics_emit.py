"""Run metrics in Airflow: measured around the ingest job, then logged, pushed to XCom and sent
through Airflow's own metrics layer (StatsD or OpenTelemetry, as its ``[metrics]`` settings say).

The numbers and their names are :mod:`kafkalake.core.run_metrics`; this module is its I/O edge: Kafka's
offsets and the checkpoint for the lag, the Delta log for the newest timestamp, Airflow for the rest.
None of it needs a JVM.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from kafkalake.config.family import resolve_members
from kafkalake.config.topic import TopicConfig
from kafkalake.core.errors import KafkalakeError
from kafkalake.core.run_metrics import (
    XCOM_KEY,
    PartitionLag,
    RunMetrics,
    family_lag,
    metric_points,
    partition_lag,
)
from kafkalake.kafka import offsets
from kafkalake.lake import store_settings
from kafkalake.lake.checkpoint import CheckpointState, read_checkpoint, read_family_checkpoint

# Imported inside the functions that use them: confluent_kafka (the lag is measured when a task runs, never
# when the DAG file is parsed) and Airflow's metrics backend (set up at run time, see _airflow_stats).

log = logging.getLogger(__name__)

#: The bronze column whose Delta statistics (max per file) give the newest Kafka timestamp landed.
TIMESTAMP_COLUMN = "kafka_timestamp"


#: Kafka's (earliest, end) offsets per topic and partition, as the lag was measured from.
Marks = dict[str, dict[int, tuple[int, int]]]


def lag_now(client_config: Mapping[str, str], topic: TopicConfig) -> PartitionLag | None:
    """Records Kafka holds that the table does not, per partition; None when Kafka does not answer.

    A metric must never fail a run that landed its data: an unanswered question is logged and the
    lag reported as unknown.
    """
    return lag_and_marks(client_config, topic)[0]


def lag_and_marks(client_config: Mapping[str, str], topic: TopicConfig) -> tuple[PartitionLag | None, Marks]:
    """:func:`lag_now`, and the watermarks it was measured from ({} when Kafka did not answer)."""
    from confluent_kafka import KafkaException

    if topic.is_family:
        return _family_lag_now(client_config, topic)
    try:
        marks = offsets.watermarks(client_config, topic.name)
    except (KafkaException, KafkalakeError) as err:
        log.warning("topic %s: lag unknown, Kafka's offsets could not be read: %s", topic.name, err)
        return None, {}
    try:
        checkpoint = read_checkpoint(topic.checkpoint_path, topic.name)
    except ValueError as err:  # corrupt: the job rebuilds it from the table
        log.warning("topic %s: lag unknown, the checkpoint cannot be read: %s", topic.name, err)
        return None, {topic.name: marks}
    return lag_of(marks, checkpoint, topic), {topic.name: marks}


def _family_lag_now(
    client_config: Mapping[str, str], topic: TopicConfig
) -> tuple[PartitionLag | None, Marks]:
    """:func:`lag_and_marks` of a family: every member Kafka has, summed per partition number."""
    from confluent_kafka import KafkaException

    every: Marks = {}
    try:
        state = read_family_checkpoint(topic.checkpoint_path)
        present = resolve_members(
            topic.members, topic.topic_pattern, offsets.topic_names(client_config)
        ).present
        per_member: dict[str, dict[int, int]] = {}
        every = offsets.family_watermarks(client_config, present)
        for member, marks in every.items():
            committed = state.committed.get(member) if state is not None else None
            per_member[member] = partition_lag(
                {p: high for p, (_low, high) in marks.items()},
                committed,
                {p: low for p, (low, _high) in marks.items()},
                topic.starting_offsets,
            )
    except (KafkaException, KafkalakeError, ValueError) as err:
        log.warning("%s: lag unknown: %s", topic.name, err)
        return None, every
    return family_lag(per_member), every


def lag_of(
    marks: Mapping[int, tuple[int, int]], checkpoint: CheckpointState | None, topic: TopicConfig
) -> PartitionLag:
    """The lag from Kafka's (earliest, end) offsets and the checkpoint, both already read."""
    return partition_lag(
        {p: high for p, (_low, high) in marks.items()},
        checkpoint.committed if checkpoint is not None else None,
        {p: low for p, (low, _high) in marks.items()},
        topic.starting_offsets,
    )


def table_newest_timestamp_ms(path: str) -> int | None:
    """The newest Kafka timestamp in a bronze table, from the Delta log's per-file statistics.

    Reads the log only (no data file, no JVM); None when there is no table, no row or no statistics.
    The add actions are read as delta-rs returns them: converting them to a pyarrow table first
    cost ~2 s of an idle run's ~3 s pre-flight task, for a 24-file table.
    """
    table = store_settings.open_delta(path)
    if table is None:
        return None
    actions = table.get_add_actions(flatten=True)
    column = f"max.{TIMESTAMP_COLUMN}"
    if column not in actions.schema.names:
        return None
    newest = max((v for v in actions.column(column).to_pylist() if v is not None), default=None)
    return round(newest.timestamp() * 1000) if newest is not None else None


def publish(metrics: RunMetrics, ti: Any | None) -> dict[str, Any]:
    """Log the summary, push the metrics to XCom (key :data:`XCOM_KEY`), send them as Airflow metrics."""
    log.info("%s", metrics.summary())
    value = metrics.as_xcom()
    if ti is not None:
        ti.xcom_push(key=XCOM_KEY, value=value)
    send(metrics)
    return value


def send(metrics: RunMetrics) -> None:
    """Gauges and timers through Airflow's metrics layer: its backend, prefix, allow/block lists."""
    stats = _airflow_stats()
    for point in metric_points(metrics):
        if point.kind == "timing":
            stats.timing(point.name, timedelta(seconds=point.value), tags=point.tags)
        else:
            stats.gauge(point.name, point.value, tags=point.tags)


def _airflow_stats() -> Any:
    """Airflow's ``Stats`` functions, with their backend set up from Airflow's ``[metrics]`` config.

    A worker's task runner sets the backend up before a task runs; ``airflow dags test`` (the demo,
    the tests) runs tasks in its own process without doing so, and every metric would be dropped.
    """
    from airflow.sdk._shared.observability.metrics import stats as singleton
    from airflow.sdk.configuration import conf
    from airflow.sdk.observability import stats
    from airflow.sdk.observability.metrics import stats_utils

    if getattr(singleton, "_factory", None) is None:
        stats.initialize(
            factory=stats_utils.get_stats_factory(),
            export_legacy_names=conf.getboolean("metrics", "legacy_names_on"),
        )
    return stats
