"""What a micro-batch of a ``fail_on_data_loss: false`` topic lost to Kafka's retention: the gaps
table's rows (Kafka's earliest offsets come from :mod:`kafkalake.spark.driver_kafka`).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from kafkalake.kafka.gaps import Gap

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

GAPS_SCHEMA = (
    "topic string, topic_id string, partition int, first_offset long, end_offset long, offsets long, "
    "batch long, detected_at timestamp"
)


def gap_rows(
    spark: SparkSession, topic: str, topic_id: str | None, gaps: Iterable[Gap], batch_id: int
) -> DataFrame:
    now = datetime.now(UTC)
    rows = [(topic, topic_id, g.partition, g.start, g.end, g.offsets, batch_id, now) for g in gaps]
    return spark.createDataFrame(rows, GAPS_SCHEMA)
