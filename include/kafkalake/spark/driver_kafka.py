"""Questions to Kafka through the driver JVM's own Kafka client: a topic's ID, its partitions, their
earliest offsets.

The driver JVM already holds the Kafka client and the job's Java client settings, which the Kafka
source uses: asking through it needs no second client form (librdkafka) and sees the cluster as the
stream does.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from kafkalake.lake import table_position

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

_BYTES = "org.apache.kafka.common.serialization.ByteArrayDeserializer"
#: How long one question may wait for the brokers.
TIMEOUT_S = 30


def _properties(spark: SparkSession, client_config: Mapping[str, str], client_id: str) -> tuple[Any, Any]:
    """The driver's JVM and the job's Java client settings in it, as ``java.util.Properties``."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    props = jvm.java.util.Properties()
    for key, value in client_config.items():
        props.setProperty(key, value)
    props.setProperty("client.id", client_id)
    return jvm, props


@contextlib.contextmanager
def _consumer(
    spark: SparkSession, client_config: Mapping[str, str], client_id: str
) -> Iterator[tuple[Any, Any]]:
    """The driver's JVM and a Kafka consumer in it (closed on leaving), which joins no group."""
    jvm, props = _properties(spark, client_config, client_id)
    props.setProperty("key.deserializer", _BYTES)
    props.setProperty("value.deserializer", _BYTES)
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


def topic_id(spark: SparkSession, client_config: Mapping[str, str], topic: str) -> str | None:
    """Kafka's ID of ``topic`` (new each time a topic of that name is created), as the pre-flight's
    client spells it; None when the cluster does not say (no answer in time, a principal not
    allowed to describe the topic, a broker too old to have IDs)."""
    return topic_ids(spark, client_config, [topic])[topic]


def topic_ids(
    spark: SparkSession, client_config: Mapping[str, str], topics: Iterable[str]
) -> dict[str, str | None]:
    """:func:`topic_id` of several topics (a family's members), through one client."""
    from py4j.protocol import Py4JJavaError

    wanted = list(topics)
    jvm, props = _properties(spark, client_config, f"kafkalake-topic-id-{wanted[0] if wanted else ''}")
    admin = jvm.org.apache.kafka.clients.admin.Admin.create(props)
    ids: dict[str, str | None] = {}
    try:
        for topic, future in admin.describeTopics(_java_list(jvm, wanted)).topicNameValues().items():
            try:
                found = future.get(TIMEOUT_S, jvm.java.util.concurrent.TimeUnit.SECONDS).topicId()
            except Py4JJavaError as err:
                log.warning("Kafka did not say the topic ID of %r: %s", topic, str(err).splitlines()[0])
                found = None
            unknown = found is None or found.equals(jvm.org.apache.kafka.common.Uuid.ZERO_UUID)
            ids[str(topic)] = None if unknown else table_position.standard_topic_id(str(found.toString()))
    finally:
        admin.close()
    return {topic: ids.get(topic) for topic in wanted}


def _java_list(jvm: Any, items: Iterable[str]) -> Any:
    found = jvm.java.util.ArrayList()
    for item in items:
        found.add(item)
    return found


def topic_names(spark: SparkSession, client_config: Mapping[str, str]) -> set[str]:
    """Every topic the cluster has (a family's members are chosen among them); Kafka's own internal
    topics are left out, as a pattern subscription leaves them out."""
    jvm, props = _properties(spark, client_config, "kafkalake-topic-names")
    admin = jvm.org.apache.kafka.clients.admin.Admin.create(props)
    try:
        names = admin.listTopics().names().get(TIMEOUT_S, jvm.java.util.concurrent.TimeUnit.SECONDS)
        return {str(name) for name in names}
    finally:
        admin.close()
