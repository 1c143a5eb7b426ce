"""Options handed to Spark's Kafka source for one topic."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from kafkalake.config.topic import TopicConfig
from kafkalake.kafka.client_config import java_client_config
from kafkalake.spark.stream import (
    FETCH_DEFAULTS,
    ISOLATION_DEFAULTS,
    TIMEOUT_DEFAULTS,
    source_options,
    starting_offsets_option,
)

CLIENT = {"bootstrap.servers": "broker:9092", "security.protocol": "PLAINTEXT"}


def topic(**fields) -> TopicConfig:
    return TopicConfig(name="orders-v2", freshness_sla=timedelta(hours=6), **fields)


def test_default_options():
    assert source_options(topic(), CLIENT) == {
        "subscribe": "orders-v2",
        "startingOffsets": "earliest",
        "failOnDataLoss": "true",
        "includeHeaders": "true",
        "maxOffsetsPerTrigger": "1000000",
        "kafka.isolation.level": "read_committed",
        "kafka.bootstrap.servers": "broker:9092",
        "kafka.security.protocol": "PLAINTEXT",
        "kafka.max.partition.fetch.bytes": "8388608",
        "kafka.fetch.max.bytes": "16777216",
        "kafka.max.poll.records": "10000",
        "kafka.fetch.max.wait.ms": "10",
        "kafka.request.timeout.ms": "15000",
        "kafka.default.api.timeout.ms": "20000",
        "kafkaConsumer.pollTimeoutMs": "30000",
    }


def test_aborted_transactions_stay_out_unless_the_connection_says_otherwise():
    assert source_options(topic(), CLIENT)["kafka.isolation.level"] == "read_committed"
    own = source_options(topic(), {**CLIENT, "isolation.level": "read_uncommitted"})
    assert own["kafka.isolation.level"] == "read_uncommitted"


def test_a_connection_setting_beats_a_fetch_default():
    options = source_options(topic(), {**CLIENT, "max.partition.fetch.bytes": "1048576"})
    assert options["kafka.max.partition.fetch.bytes"] == "1048576"


def test_a_connection_timeout_beats_the_timeout_default():
    options = source_options(topic(), {**CLIENT, "request.timeout.ms": "60000"})
    assert options["kafka.request.timeout.ms"] == "60000"


def test_a_broker_outage_fails_in_bounded_time():
    # Driver: 3 offset fetches (fetchOffset.numRetries) of at most default.api.timeout.ms each;
    # executors: one poll of kafkaConsumer.pollTimeoutMs. Either way about a minute, not minutes.
    options = source_options(topic(), CLIENT)
    assert 3 * int(options["kafka.default.api.timeout.ms"]) <= 60_000
    assert int(options["kafkaConsumer.pollTimeoutMs"]) <= 60_000
    assert int(options["kafka.request.timeout.ms"]) <= int(options["kafka.default.api.timeout.ms"])


def test_topic_settings_are_used():
    options = source_options(
        topic(starting_offsets="latest", fail_on_data_loss=False, max_offsets_per_trigger=250), CLIENT
    )
    assert options["startingOffsets"] == "latest"
    assert options["failOnDataLoss"] == "false"
    assert options["maxOffsetsPerTrigger"] == "250"


def test_no_max_offsets_per_trigger_when_unset():
    assert "maxOffsetsPerTrigger" not in source_options(topic(max_offsets_per_trigger=None), CLIENT)


def test_every_client_setting_takes_the_kafka_prefix():
    client = java_client_config(
        {
            "bootstrap.servers": "b:9093",
            "security.protocol": "SASL_SSL",
            "sasl.mechanisms": "SCRAM-SHA-512",
            "sasl.username": "u",
            "sasl.password": "p",
            "ssl.ca.location": "/ca.pem",
        }
    )
    options = source_options(topic(), client)
    prefixed = {k.removeprefix("kafka."): v for k, v in options.items() if k.startswith("kafka.")}
    defaults = FETCH_DEFAULTS | TIMEOUT_DEFAULTS | ISOLATION_DEFAULTS
    assert {k: v for k, v in prefixed.items() if f"kafka.{k}" not in defaults} == client
    assert options["kafka.sasl.mechanism"] == "SCRAM-SHA-512"
    assert options["kafka.ssl.truststore.type"] == "PEM"


def test_a_connection_can_set_its_own_log_end_wait():
    assert source_options(topic(), CLIENT)["kafka.fetch.max.wait.ms"] == "10"
    own = source_options(topic(), {**CLIENT, "fetch.max.wait.ms": "250"})
    assert own["kafka.fetch.max.wait.ms"] == "250"


def test_all_values_are_strings():
    options = source_options(topic(max_offsets_per_trigger=7), CLIENT)
    assert all(isinstance(v, str) for v in options.values())


# Spark's KafkaSourceProvider.validateGeneralOptions throws IllegalArgumentException for these
# (checked against spark-sql-kafka-0-10_2.13-4.2.0): Spark manages offsets and deserialisation itself.
REJECTED_BY_SPARK = {
    "auto.offset.reset": "earliest",
    "enable.auto.commit": "false",
    "key.deserializer": "org.apache.kafka.common.serialization.StringDeserializer",
    "value.deserializer": "org.apache.kafka.common.serialization.StringDeserializer",
}


@pytest.mark.parametrize(("key", "value"), REJECTED_BY_SPARK.items())
def test_options_spark_rejects_never_reach_the_source(key, value):
    # group.id is in Airflow's own default kafka_default connection; Spark accepts that one.
    extra = {"bootstrap.servers": "b:9092", "group.id": "my-group", key: value}
    options = source_options(topic(), java_client_config(extra))
    assert f"kafka.{key}" not in options


def test_a_rebuilt_start_names_every_partition_the_topic_has_now():
    # The tables' position knows partitions 0 and 1; the topic grew a 2 since. Spark fails a query
    # whose specific startingOffsets leave a partition out, so 2 starts at its earliest (-2).
    option = starting_offsets_option("t.x", {1: 7, 0: 150}, [0, 1, 2])
    assert json.loads(option) == {"t.x": {"0": 150, "1": 7, "2": -2}}
    assert starting_offsets_option("t", {0: 3}, [0]) == '{"t": {"0": 3}}'
