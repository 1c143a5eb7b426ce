"""``bench --format avro | protobuf``: the parsed path on Avro or Protobuf in a schema registry's
wire format, against the JSON parsed path on the same events, in one run (:mod:`kafkalake.dev.bench`).

The bench's events (:func:`~kafkalake.dev.bench_backlog.event`) are produced a second time, framed by
confluent-kafka's own ``AvroSerializer`` or ``ProtobufSerializer`` against a registry the bench
starts (Apicurio, in memory: :mod:`kafkalake.dev.schema_registry`), into a topic of their own; each
backlog is drained by the real ingest job with its parsed tables, each into a lake of its own. Both
drains write bronze too, so the difference between them is the parsing.

The registry keeps its schemas in memory: each run registers the schema again before its drain. A
fresh registry gives the first schema registered the same id every time, and a backlog produced by
an earlier run is checked to name that id.
"""

from __future__ import annotations

import base64
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
#: The registry formats the bench drains beside JSON.
FORMATS = ("avro", "protobuf")


def event_file() -> Any:
    """The bench event as a Protobuf file (``kafkalake/bench/event.proto``, message ``BenchEvent``):
    EVENT_SCHEMA's fields in its order, the same types (string, double, int64); built in Python,
    no protoc."""
    from google.protobuf import descriptor_pb2

    F = descriptor_pb2.FieldDescriptorProto
    kinds = {"string": F.TYPE_STRING, "double": F.TYPE_DOUBLE, "long": F.TYPE_INT64}
    file = descriptor_pb2.FileDescriptorProto(
        name="kafkalake/bench/event.proto", package="kafkalake.bench", syntax="proto3"
    )
    message = file.message_type.add(name="BenchEvent")
    fields: list[dict[str, str]] = EVENT_SCHEMA["fields"]  # type: ignore[assignment]
    for number, field in enumerate(fields, start=1):
        message.field.add(
            name=field["name"], number=number, type=kinds[field["type"]], label=F.LABEL_OPTIONAL
        )
    return file


def _encoder(client: Any, fmt: str, topic: str) -> tuple[Any, Any]:
    """The serializer of ``fmt`` as ``fields -> framed bytes``, and the schema it registers."""
    from confluent_kafka.schema_registry import Schema
    from confluent_kafka.serialization import MessageField, SerializationContext

    context = SerializationContext(topic, MessageField.VALUE)
    if fmt == "avro":
        from confluent_kafka.schema_registry.avro import AvroSerializer

        serialize = AvroSerializer(client, json.dumps(EVENT_SCHEMA))
        schema = Schema(json.dumps(EVENT_SCHEMA), "AVRO")
        to_value: Any = dict
    else:
        from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
        from google.protobuf import descriptor_pool, message_factory

        pool = descriptor_pool.DescriptorPool()
        file = pool.Add(event_file())
        cls = message_factory.GetMessageClass(pool.FindMessageTypeByName("kafkalake.bench.BenchEvent"))
        serialize = ProtobufSerializer(cls, client, {})
        # What the serializer registers: the base64 of the serialized file.
        schema = Schema(base64.b64encode(file.serialized_pb).decode(), "PROTOBUF")

        def to_value(fields: dict[str, Any]) -> Any:
            return cls(**fields)

    def encode(fields: dict[str, Any]) -> bytes:
        framed = serialize(to_value(fields), context)
        assert framed is not None
        return bytes(framed)

    return encode, schema


def ensure_registry_backlog(
    bootstrap: str, registry_url: str, topic: str, events: int, partitions: int, fmt: str = "avro"
) -> int:
    """The bench's events as Confluent-framed ``fmt`` (avro, protobuf) in ``topic``; the schema id
    they name."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    client = SchemaRegistryClient({"url": registry_url})
    encode, schema = _encoder(client, fmt, topic)
    # Registered now, not at the serializer's first record: a kept backlog produces none.
    schema_id = client.register_schema(f"{topic}-value", schema)
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


def registry_entry(entry: dict[str, Any], topic: str, fmt: str = "avro") -> dict[str, Any]:
    """The catalog entry of the registry backlog: the JSON one's settings, the registry's format."""
    return {
        **entry,
        "name": topic,
        "format": fmt,
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
