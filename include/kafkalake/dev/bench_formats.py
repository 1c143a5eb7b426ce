"""``bench --format avro``: the parsed path on Avro in a schema registry's wire format, against the
JSON parsed path on the same events, in one run (:mod:`kafkalake.dev.bench`).

The bench's events (:func:`~kafkalake.dev.bench_backlog.event`) are produced a second time, framed by
confluent-kafka's own ``AvroSerializer`` against a registry the bench starts (Apicurio, in memory:
:mod:`kafkalake.dev.schema_registry`), into a topic of their own; each backlog is drained by the
real ingest job with its parsed tables, each into a lake of its own. Both drains write bronze too,
so the difference between them is the parsing.

The registry keeps its schemas in memory: each run registers the schema again before its drain. A
fresh registry gives the first schema registered the same id every time, and a backlog produced by
an earlier run is checked to name that id.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from kafkalake.dev.bench_backlog import ensure_backlog
from kafkalake.kafka.offsets import end_offsets
from kafkalake.kafka.schema_registry import ENV_REGISTRY_CONFIG_FILE, RegistrySettings

#: The bench event as an Avro record: the types JSON inference gives its fields.
EVENT_SCHEMA = {
    "type": "record",
    "name": "BenchEvent",
    "namespace": "kafkalake.bench",
    "fields": [
        {"name": "event_id", "type": "string"},
        {"name": "user_id", "type": "string"},
        {"name": "session", "type": "string"},
        {"name": "type", "type": "string"},
        {"name": "page", "type": "string"},
        {"name": "amount", "type": "double"},
        {"name": "currency", "type": "string"},
        {"name": "ua", "type": "string"},
        {"name": "ts", "type": "long"},
    ],
}
#: The bench catalog's connection id for the registry (the job gets the settings in a file).
REGISTRY_CONN_ID = "bench_registry"


def ensure_avro_backlog(bootstrap: str, registry_url: str, topic: str, events: int, partitions: int) -> int:
    """The bench's events as Confluent-framed Avro in ``topic``; the schema id they name."""
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = SchemaRegistryClient({"url": registry_url})
    serialize = AvroSerializer(client, json.dumps(EVENT_SCHEMA))
    context = SerializationContext(topic, MessageField.VALUE)

    def encode(fields: dict[str, Any]) -> bytes:
        framed = serialize(fields, context)
        assert framed is not None
        return bytes(framed)

    # Registered now, not at the serializer's first record: a kept backlog produces none.
    schema_id = client.register_schema(f"{topic}-value", Schema(json.dumps(EVENT_SCHEMA), "AVRO"))
    ensure_backlog(bootstrap, topic, events, partitions, encode)
    named = _first_schema_id(bootstrap, topic)
    if named != schema_id:
        raise RuntimeError(
            f"topic {topic} names schema id {named}, the registry gave {schema_id}: remove .bench/ and rerun"
        )
    return int(schema_id)


def _first_schema_id(bootstrap: str, topic: str) -> int:
    ends = end_offsets({"bootstrap.servers": bootstrap}, topic)
    partition = next(p for p, end in sorted(ends.items()) if end > 0)
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "kafkalake-bench-avro", "enable.auto.commit": False}
    )
    try:
        consumer.assign([TopicPartition(topic, partition, 0)])
        while True:
            message = consumer.poll(10.0)
            if message is None:
                raise RuntimeError(f"topic {topic}: no record read from partition {partition} in 10 s")
            if message.error() is None:
                return int(struct.unpack(">I", (message.value() or b"\0" * 5)[1:5])[0])
    finally:
        consumer.close()


def registry_entry(entry: dict[str, Any], avro_topic: str) -> dict[str, Any]:
    """The catalog entry of the Avro backlog: the JSON one's settings, the registry's format."""
    return {
        **entry,
        "name": avro_topic,
        "format": "avro",
        "registry_conn_id": REGISTRY_CONN_ID,
        "parsed": True,
    }


def registry_handover(workdir: Path, registry_url: str) -> dict[str, str]:
    """The job's environment naming the registry's settings file (which the job deletes on read):
    written again before each drain."""
    path = workdir / "registry-settings.json"
    path.write_text(RegistrySettings(url=registry_url, conn_id=REGISTRY_CONN_ID).to_json())
    path.chmod(0o600)
    return {ENV_REGISTRY_CONFIG_FILE: str(path)}
