"""Schema-registry framing beyond Avro values: JSON Schema values, and framed keys (key_format:
avro, json_schema) with their schema ids in the frame or in the headers, against the project's
Apicurio; the records made by confluent-kafka's own serializers, landed by the ingest job's own run
(IngestRun) in the tests' Spark session, read back with delta-rs. (Protobuf keys:
test_registry_protobuf.)
"""

from __future__ import annotations

import io
import json
import struct
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import fastavro
import pytest
from confluent_kafka.schema_registry import _KEY_SCHEMA_ID as KEY_SCHEMA_ID
from confluent_kafka.schema_registry import _VALUE_SCHEMA_ID as VALUE_SCHEMA_ID
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from kafkalake.config.parsed import ParsedConfig
from kafkalake.dev import producer
from kafkalake.dev.producer import Record

from .helpers import make_topic, read_rows
from .helpers import run_ingest as run
from .registry_helpers import ORDER_V1, as_produced, in_header, order

pytestmark = [pytest.mark.integration, pytest.mark.registry]


def test_json_schema_values_are_read_after_their_frame(spark, kafka, registry, tmp_path):
    name = "it-json-schema"
    producer.create_topic(kafka.bootstrap_servers, name, partitions=1)
    topic = replace(make_topic(tmp_path, name, ParsedConfig()), format="json_schema")
    schema = {
        "type": "object",
        "properties": {
            "id": {"type": "integer"},
            "item": {"type": "object", "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}}},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["id"],
    }
    serialize = JSONSerializer(json.dumps(schema), SchemaRegistryClient({"url": registry.url}))
    context = SerializationContext(name, MessageField.VALUE)
    events = [{"id": i, "item": {"sku": f"s{i}", "qty": i}, "tags": [f"t{i}"] * (i % 3)} for i in range(1, 6)]
    good = [Record(str(e["id"]).encode(), serialize(e, context)) for e in events]
    frame = good[0].value[:5]
    bad = {
        b"plain-json": (b'{"id": 99}', "bad_magic_byte"),
        b"frame-only": (frame, "empty_value"),
        b"framed-malformed": (frame + b'{"id": ', "malformed_json"),
    }
    producer.produce(
        kafka.bootstrap_servers, name, [*good[:2], *(Record(k, v) for k, (v, _) in bad.items()), *good[2:]]
    )

    run(spark, topic, kafka.bootstrap_servers)

    rows = read_rows(Path(topic.parsed_path))
    assert (
        sorted(({k: v for k, v in r.items() if not k.startswith("_")} for r in rows), key=lambda r: r["id"])
        == events
    )
    dead = {r["key"]: r for r in read_rows(Path(topic.dead_letter_path))}
    assert {k: r["reason"] for k, r in dead.items()} == {k: reason for k, (_, reason) in bad.items()}
    assert dead[b"frame-only"]["value"] == frame  # dead letters keep the raw bytes, frame and all
    assert "0x7b is not the magic byte" in dead[b"plain-json"]["detail"]


ORDER_KEY = {
    "type": "record",
    "name": "OrderKey",
    "namespace": "shop",
    "fields": [{"name": "id", "type": "long"}],
}


def framed_records(
    url: str, topic: str, orders: list[dict[str, Any]], *, header: bool = False
) -> list[Record]:
    """Orders with an Avro key {id} and value, both framed by AvroSerializer: the schema ids in
    the prefix, or (``header``) in the ``__key_schema_id`` / ``__value_schema_id`` headers."""
    client = SchemaRegistryClient({"url": url})
    conf = {"schema.id.serializer": in_header} if header else None
    keys = AvroSerializer(client, json.dumps(ORDER_KEY), conf=conf)
    values = AvroSerializer(client, json.dumps(ORDER_V1), conf=conf)
    records = []
    for o in orders:
        headers: list[tuple[str, bytes | None]] = []
        key = keys({"id": o["id"]}, SerializationContext(topic, MessageField.KEY, headers))
        value = values(o, SerializationContext(topic, MessageField.VALUE, headers))
        records.append(Record(key, value, headers=headers))
    return records


def test_framed_keys_and_header_schema_ids(spark, kafka, registry, tmp_path):
    """key_format: avro, ids in the prefix or in the headers: the latest table keeps one row per
    key whichever way its id travelled, a tombstone deletes by the key's payload, bad keys and
    headers are dead letters with their reasons."""
    name = "it-avro-keys"
    producer.create_topic(kafka.bootstrap_servers, name, partitions=1)
    entry = make_topic(tmp_path, name, ParsedConfig(latest_by_key=True, changelog=True))
    topic = replace(entry, format="avro", registry_conn_id="it_registry", key_format="avro")
    orders = [order(i) for i in range(1, 5)]
    prefixed = framed_records(registry.url, name, orders)
    newer = order(2, note="newer, ids in headers")
    carried = framed_records(registry.url, name, [newer], header=True)
    assert carried[0].key is not None and carried[0].key[0] != 0  # no frame: the key's Avro payload
    key_id = struct.unpack(">I", (prefixed[0].key or b"")[1:5])[0]
    value = prefixed[0].value
    guid = b"\x01" + uuid.uuid4().bytes
    bad = [
        (Record(b"plain-key", value), "bad_magic_byte", "key: first byte 0x70 is not the magic byte"),
        (
            Record(b"\x00" + struct.pack(">I", 999999) + b"\x02", value),
            "unknown_schema_id",
            "key: schema id 999999 is not in the registry",
        ),
        (
            Record(b"\x00" + struct.pack(">I", key_id) + b"\x81", value),
            "undecodable",
            f"key: the payload does not decode with writer schema id {key_id}",
        ),
        (
            Record(b"guid-key", value, headers=[(KEY_SCHEMA_ID, guid)]),
            "bad_magic_byte",
            "key: header __key_schema_id holds a schema GUID",
        ),
        (
            Record(None, b"\x02", headers=[(VALUE_SCHEMA_ID, guid)]),
            "bad_magic_byte",
            "header __value_schema_id holds a schema GUID",
        ),
    ]
    # Order 4 deleted by a tombstone whose key is framed (its id in the prefix).
    tombstone = Record(prefixed[3].key, None)
    records = [*prefixed, *(r for r, _, _ in bad), *carried, tombstone]
    spots = producer.produce(kafka.bootstrap_servers, name, records)

    stats = run(spark, topic, kafka.bootstrap_servers).stats

    key_schema = fastavro.parse_schema(ORDER_KEY)

    def key_id_of(key: bytes) -> int:
        return int(fastavro.schemaless_reader(io.BytesIO(key), key_schema)["id"])  # type: ignore[index,call-overload]

    rows = read_rows(Path(topic.parsed_path))
    dead = {(r["partition"], r["offset"]): r for r in read_rows(Path(topic.dead_letter_path))}
    landed = sorted([(r["_kafka"]["partition"], r["_kafka"]["offset"]) for r in rows] + list(dead))
    assert landed == sorted(spots[:-1])  # every record once, but the tombstone (latest table only)
    # The parsed rows' keys are the payloads, the frame left out, and decode to the order's id.
    assert sorted((key_id_of(r["_kafka"]["key"]), r["id"]) for r in rows) == [
        (1, 1),
        (2, 2),
        (2, 2),
        (3, 3),
        (4, 4),
    ]
    latest = {key_id_of(r["_kafka"]["key"]): as_produced(r) for r in read_rows(Path(topic.latest_path))}
    assert latest == {1: orders[0], 2: newer, 3: orders[2]}
    # Each bad record a dead letter with its reason and detail, its key and value as written.
    bad_spots = spots[len(prefixed) : len(prefixed) + len(bad)]
    for spot, (record, reason, detail) in zip(bad_spots, bad, strict=True):
        letter = dead[spot]
        assert (letter["reason"], letter["key"], letter["value"]) == (reason, record.key, record.value)
        assert letter["detail"].startswith(detail), letter["detail"]
    assert stats.dead_letters == {"bad_magic_byte": 3, "unknown_schema_id": 1, "undecodable": 1}


def test_json_schema_keys_key_the_latest_table_by_their_payload(spark, kafka, registry, tmp_path):
    name = "it-json-schema-keys"
    producer.create_topic(kafka.bootstrap_servers, name, partitions=1)
    entry = make_topic(tmp_path, name, ParsedConfig(latest_by_key=True))
    topic = replace(entry, format="json_schema", key_format="json_schema")
    client = SchemaRegistryClient({"url": registry.url})
    key_schema = '{"type": "object", "properties": {"id": {"type": "integer"}}}'
    value_schema = '{"type": "object", "properties": {"id": {"type": "integer"}, "v": {"type": "string"}}}'
    records = []
    for i, v, header in [(1, "a", False), (2, "b", False), (1, "c", True)]:
        conf = {"schema.id.serializer": in_header} if header else None
        headers: list[tuple[str, bytes | None]] = []
        key = JSONSerializer(key_schema, client, conf=conf)(
            {"id": i}, SerializationContext(name, MessageField.KEY, headers)
        )
        value = JSONSerializer(value_schema, client, conf=conf)(
            {"id": i, "v": v}, SerializationContext(name, MessageField.VALUE, headers)
        )
        records.append(Record(key, value, headers=headers))
    unframed = Record(b'{"id": 3}', records[0].value)
    producer.produce(kafka.bootstrap_servers, name, [*records, unframed])

    run(spark, topic, kafka.bootstrap_servers)

    latest = {json.loads(r["_kafka"]["key"])["id"]: r["v"] for r in read_rows(Path(topic.latest_path))}
    assert latest == {1: "c", 2: "b"}  # key 1's id in the frame, then in the header: one row
    (dead,) = read_rows(Path(topic.dead_letter_path))
    assert (dead["reason"], dead["key"]) == ("bad_magic_byte", unframed.key)
    assert dead["detail"].startswith("key: first byte 0x7b is not the magic byte")
