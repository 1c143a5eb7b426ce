"""What a micro-batch of a ``fail_on_data_loss: false`` topic lost to Kafka's retention: Kafka's
earliest offsets, asked through the driver's own Kafka client, and the gaps table's rows.

The driver JVM already holds the Kafka client and the job's Java client settings, which the Kafka
source uses: asking through it needs no second client form (librdkafka) and sees the cluster as the
stream does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from kafkalake.kafka.gaps import Gap

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

GAPS_SCHEMA = (
    "topic string, topic_id string, partition int, first_offset long, end_offset long, offsets long, "
    "batch long, detected_at timestamp"
)
_BYTES = "org.apache.kafka.common.serialization.ByteArrayDeserializer"


def earliest_offsets(
    spark: SparkSession, client_config: Mapping[str, str], topic: str, partitions: Iterable[int]
) -> dict[int, int]:
    """Kafka's earliest offset of each of ``partitions`` of ``topic``."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    props = jvm.java.util.Properties()
    for key, value in client_config.items():
        props.setProperty(key, value)
    props.setProperty("key.deserializer", _BYTES)
    props.setProperty("value.deserializer", _BYTES)
    props.setProperty("client.id", f"kafkalake-gaps-{topic}")
    consumer = jvm.org.apache.kafka.clients.consumer.KafkaConsumer(props)
    try:
        asked = [jvm.org.apache.kafka.common.TopicPartition(topic, p) for p in sorted(partitions)]
        wanted = jvm.java.util.ArrayList()
        for tp in asked:
            wanted.add(tp)
        found = consumer.beginningOffsets(wanted, jvm.java.time.Duration.ofSeconds(30))
        return {int(tp.partition()): int(found.get(tp)) for tp in asked}
    finally:
        consumer.close()


def gap_rows(
    spark: SparkSession, topic: str, topic_id: str | None, gaps: Iterable[Gap], batch_id: int
) -> DataFrame:
    now = datetime.now(UTC)
    rows = [(topic, topic_id, g.partition, g.start, g.end, g.offsets, batch_id, now) for g in gaps]
    return spark.createDataFrame(rows, GAPS_SCHEMA)
