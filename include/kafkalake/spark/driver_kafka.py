"""Questions to Kafka through the driver JVM's own Kafka client: a topic's partitions, their
earliest offsets.

The driver JVM already holds the Kafka client and the job's Java client settings, which the Kafka
source uses: asking through it needs no second client form (librdkafka) and sees the cluster as the
stream does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_BYTES = "org.apache.kafka.common.serialization.ByteArrayDeserializer"
#: How long one question may wait for the brokers.
TIMEOUT_S = 30


@contextlib.contextmanager
def _consumer(
    spark: SparkSession, client_config: Mapping[str, str], client_id: str
) -> Iterator[tuple[Any, Any]]:
    """The driver's JVM and a Kafka consumer in it (closed on leaving), which joins no group."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    props = jvm.java.util.Properties()
    for key, value in client_config.items():
        props.setProperty(key, value)
    props.setProperty("key.deserializer", _BYTES)
    props.setProperty("value.deserializer", _BYTES)
    props.setProperty("client.id", client_id)
    consumer = jvm.org.apache.kafka.clients.consumer.KafkaConsumer(props)
    try:
        yield jvm, consumer
    finally:
        consumer.close()


def earliest_offsets(
    spark: SparkSession, client_config: Mapping[str, str], topic: str, partitions: Iterable[int]
) -> dict[int, int]:
    """Kafka's earliest offset of each of ``partitions`` of ``topic``."""
    with _consumer(spark, client_config, f"kafkalake-gaps-{topic}") as (jvm, consumer):
        asked = [jvm.org.apache.kafka.common.TopicPartition(topic, p) for p in sorted(partitions)]
        wanted = jvm.java.util.ArrayList()
        for tp in asked:
            wanted.add(tp)
        found = consumer.beginningOffsets(wanted, jvm.java.time.Duration.ofSeconds(TIMEOUT_S))
        return {int(tp.partition()): int(found.get(tp)) for tp in asked}


def partition_ids(spark: SparkSession, client_config: Mapping[str, str], topic: str) -> list[int]:
    """The partitions ``topic`` has now."""
    with _consumer(spark, client_config, f"kafkalake-partitions-{topic}") as (jvm, consumer):
        found = consumer.partitionsFor(topic, jvm.java.time.Duration.ofSeconds(TIMEOUT_S))
        return sorted(int(info.partition()) for info in found)
