"""format: protobuf against the project's Apicurio: records made by confluent-kafka's own
ProtobufSerializer (values and keys, ids in the frame or the headers), schemas registered serialized
or as .proto text, with references; landed by the ingest job's own run (IngestRun) in the tests'
Spark session, read back with delta-rs.
"""

from __future__ import annotations

import json
import struct
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.schema_registry import _KEY_SCHEMA_ID as KEY_SCHEMA_ID
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.serialization import MessageField, SerializationContext

from kafkalake.config.parsed import ParsedConfig
from kafkalake.dev import producer
from kafkalake.dev.producer import Record
from kafkalake.lake.schema_history import SchemaHistory

from .helpers import make_topic, read_rows
from .helpers import run_ingest as run
from .registry_helpers import as_message, in_header, order_classes, order_file, proto_order, proto_row

pytestmark = [pytest.mark.integration, pytest.mark.registry]


def test_protobuf_records_land_with_the_values_produced(spark, kafka, registry, tmp_path):
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

    name = "it-protobuf-orders"
    producer.create_topic(kafka.bootstrap_servers, name, partitions=1)
    topic = replace(
        make_topic(tmp_path, name, ParsedConfig()), format="protobuf", registry_conn_id="it_registry"
    )
    order_cls, shipment_cls = order_classes()
    client = SchemaRegistryClient({"url": registry.url})
    context = SerializationContext(name, MessageField.VALUE)
    conf = {"use.deprecated.format": False}
    orders = [proto_order(i) for i in range(1, 6)]
    good = [
        Record(
            str(o["id"]).encode(),
            ProtobufSerializer(order_cls, client, conf)(as_message(order_cls, o), context),
        )
        for o in orders
    ]
    shipment = ProtobufSerializer(shipment_cls, client, conf)(shipment_cls(id=77, carrier="post"), context)
    frame = good[0].value[:5]
    assert good[0].value[5] == 0 and shipment[5:7] == b"\x02\x02"  # message indexes [0] and [1]
    bad = {
        b"bad-index": (frame + b"\x02\x0a" + good[0].value[6:], "unknown_message_index"),
        b"garbage": (frame + b"\x00\xff\xff\xff", "undecodable"),
        b"unknown-id": (b"\x00" + struct.pack(">I", 987655) + good[1].value[5:], "unknown_schema_id"),
        b"json": (b'{"id": 1}', "bad_magic_byte"),
    }
    # The id in the __value_schema_id header, the message indexes after it there, the value bare.
    headers: list[tuple[str, bytes | None]] = []
    bare = ProtobufSerializer(shipment_cls, client, {**conf, "schema.id.serializer": in_header})(
        shipment_cls(id=78, carrier="header"), SerializationContext(name, MessageField.VALUE, headers)
    )
    assert headers[0][1] == frame + b"\x02\x02"
    records = [
        *good[:2],
        Record(b"shipment", shipment),
        *(Record(k, v) for k, (v, _) in bad.items()),
        *good[2:],
        Record(b"shipment-header", bare, headers=headers),
    ]
    producer.produce(kafka.bootstrap_servers, name, records)

    stats = run(spark, topic, kafka.bootstrap_servers).stats

    rows = read_rows(Path(topic.parsed_path))
    assert sorted(r["_kafka"]["offset"] for r in rows) == [0, 1, 2, 7, 8, 9, 10]  # the good ones, once
    by_key = {r["_kafka"]["key"]: proto_row(r) for r in rows}
    # The Shipment (message index [1]) in the same table: the Order's fields null.
    assert by_key.pop(b"shipment") == {**{k: None for k in orders[0]}, "id": 77, "carrier": "post"}
    assert by_key.pop(b"shipment-header") == {**{k: None for k in orders[0]}, "id": 78, "carrier": "header"}
    assert [by_key[str(o["id"]).encode()] for o in orders] == orders
    dead = {r["key"]: r for r in read_rows(Path(topic.dead_letter_path))}
    assert {k: r["reason"] for k, r in dead.items()} == {k: reason for k, (_, reason) in bad.items()}
    assert "names no message" in dead[b"bad-index"]["detail"]
    assert stats.parsed_rows == len(orders) + 2

    # The file evolved between runs (a field added to Order): a new schema id, a new column.
    evolved = order_file()
    evolved.message_type[0].field.add(
        name="channel", number=9, type=evolved.message_type[0].field[0].TYPE_STRING, label=1
    )
    order_v2, _ = order_classes(evolved)
    later = {**proto_order(6), "channel": "app"}
    message = as_message(order_v2, later)
    message.channel = "app"
    framed = ProtobufSerializer(order_v2, client, conf)(message, context)
    assert framed[1:5] != frame[1:5]
    producer.produce(kafka.bootstrap_servers, name, [Record(b"later", framed)])
    run(spark, topic, kafka.bootstrap_servers)

    rows = {r["_kafka"]["key"]: proto_row(r) for r in read_rows(Path(topic.parsed_path))}
    assert rows[b"later"] == later
    assert rows[b"1099511627777"]["channel"] is None  # written before the field: null
    history = SchemaHistory(topic.schema_dir)
    assert history.read(history.versions()[-1]).changes == ("+ channel: string",)
    assert "message shop.Order" in history.read(history.versions()[-1]).source


def test_protobuf_first_batch_of_dead_letters_starts_from_the_subject(spark, kafka, registry, tmp_path):
    """No record of the first run names a message type: the table starts from the subject's
    latest version's first message."""
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

    name = "it-protobuf-all-bad"
    producer.create_topic(kafka.bootstrap_servers, name, partitions=1)
    topic = replace(
        make_topic(tmp_path, name, ParsedConfig()), format="protobuf", registry_conn_id="it_registry"
    )
    order_cls, _ = order_classes()
    serialize = ProtobufSerializer(order_cls, SchemaRegistryClient({"url": registry.url}), {})
    framed = serialize(as_message(order_cls, proto_order(1)), SerializationContext(name, MessageField.VALUE))
    producer.produce(kafka.bootstrap_servers, name, [Record(b"bad", framed[:5] + b"\x02\x08")])  # [4]

    run(spark, topic, kafka.bootstrap_servers)

    dead = read_rows(Path(topic.dead_letter_path))
    assert [(r["key"], r["reason"]) for r in dead] == [(b"bad", "unknown_message_index")]
    history = SchemaHistory(topic.schema_dir)
    first = history.read(history.versions()[0])
    assert "message shop.Order" in first.source
    assert [f["name"] for f in first.schema["fields"]] == list(proto_order(1))[:-1]  # no carrier


def test_protobuf_keys_key_the_latest_table_by_their_payload(spark, kafka, registry, tmp_path):
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

    name = "it-protobuf-keys"
    producer.create_topic(kafka.bootstrap_servers, name, partitions=1)
    entry = make_topic(tmp_path, name, ParsedConfig(latest_by_key=True))
    topic = replace(entry, format="protobuf", registry_conn_id="it_registry", key_format="protobuf")
    order_cls, shipment_cls = order_classes()
    client = SchemaRegistryClient({"url": registry.url})
    value = ProtobufSerializer(order_cls, client, {})
    key = ProtobufSerializer(shipment_cls, client, {})
    values, keys = (SerializationContext(name, field) for field in (MessageField.VALUE, MessageField.KEY))
    orders = [proto_order(i) for i in range(1, 5)]
    framed = [value(as_message(order_cls, o), values) for o in orders]
    one, two = (key(shipment_cls(id=i), keys) for i in (1, 2))
    # Key 2 again, its id and message indexes in the __key_schema_id header, the key bare.
    headers: list[tuple[str, bytes | None]] = []
    bare_two = ProtobufSerializer(shipment_cls, client, {"schema.id.serializer": in_header})(
        shipment_cls(id=2), SerializationContext(name, MessageField.KEY, headers)
    )
    assert headers == [(KEY_SCHEMA_ID, two[:7])] and bare_two == two[7:]  # indexes [1]: 02 02
    key_id = struct.unpack(">I", one[1:5])[0]
    bad = {
        b"plain": ("bad_magic_byte", "key: first byte 0x70 is not the magic byte"),
        b"\x00" + struct.pack(">I", 987656) + one[5:]: (
            "unknown_schema_id",
            "key: schema id 987656 is not in the registry",
        ),
        one[:5] + b"\x02\x0a" + one[6:]: (
            "unknown_message_index",
            f"key: schema id {key_id}: message index [5]",
        ),
        one[:5] + b"\x00\xff\xff\xff": (
            "undecodable",
            f"key: the payload does not decode with writer schema id {key_id}",
        ),
    }
    records = [
        Record(one, framed[0]),
        Record(two, framed[1]),
        Record(one, framed[2]),
        *(Record(k, framed[0]) for k in bad),
        Record(bare_two, framed[3], headers=headers),
    ]
    producer.produce(kafka.bootstrap_servers, name, records)

    run(spark, topic, kafka.bootstrap_servers)

    latest = {r["_kafka"]["key"]: proto_row(r) for r in read_rows(Path(topic.latest_path))}
    as_order = [{k: v for k, v in o.items() if k != "carrier"} for o in orders]  # no Shipment values
    # Keyed by the payload (message indexes and message), frame or header left out: key 2's
    # header-carried record is the same key as its framed one.
    assert latest == {one[5:]: as_order[2], two[5:]: as_order[3]}
    dead = {r["key"]: r for r in read_rows(Path(topic.dead_letter_path))}
    assert {k: r["reason"] for k, r in dead.items()} == {k: reason for k, (reason, _) in bad.items()}
    for k, (_, detail) in bad.items():
        assert dead[k]["detail"].startswith(detail), dead[k]["detail"]


#: order_file() as .proto text: what a Java serializer or a hand registers, and what Apicurio keeps.
ORDER_PROTO = """syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
message Order {
  message Customer { string name = 1; Tier tier = 2; }
  enum Tier { TIER_UNSPECIFIED = 0; GOLD = 1; SILVER = 2; }
  int64 id = 1;
  Customer customer = 2;
  repeated string skus = 3;
  map<string, string> attrs = 4;
  oneof payment { string card = 5; int64 voucher = 6; }
  google.protobuf.Timestamp created = 7;
  bytes blob = 8;
}
message Shipment { int64 id = 1; string carrier = 2; }
"""


def with_id(framed: bytes, schema_id: int) -> bytes:
    """A framed record with another schema id in its frame: the serializer's message indexes and
    message, the id of the same file registered as text."""
    return framed[:1] + struct.pack(">I", schema_id) + framed[5:]


def test_protobuf_schemas_registered_as_proto_text_are_compiled(spark, kafka, registry, tmp_path):
    """A schema registered as .proto text (Apicurio answers it so, even to ?format=serialized):
    compiled with protoc, its records land with the values produced; text that does not compile
    is a dead letter naming the schema id and the subject, the good records land beside it."""
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

    name = "it-protobuf-text"
    producer.create_topic(kafka.bootstrap_servers, name, partitions=1)
    topic = replace(
        make_topic(tmp_path, name, ParsedConfig()), format="protobuf", registry_conn_id="it_registry"
    )
    client = SchemaRegistryClient({"url": registry.url})
    text_id = client.register_schema(f"{name}-value", Schema(ORDER_PROTO, "PROTOBUF"))
    # Apicurio refuses text it cannot parse (HTTP 422: it finds no type in it; a one-line file too);
    # it keeps text that parses but protoc refuses: a field number used twice.
    broken = 'syntax = "proto3";\npackage shop;\nmessage Order {\n  int64 id = 1;\n  string note = 1;\n}\n'
    bad_id = client.register_schema(f"{name}-broken-value", Schema(broken, "PROTOBUF"))
    assert "message Order" in client.get_schema(text_id).schema_str  # kept as text
    order_cls, shipment_cls = order_classes()
    # The serializer registers its base64 file under a subject of its own; the records name the
    # text's id instead.
    context = SerializationContext(f"{name}-serialized", MessageField.VALUE)
    serialize = ProtobufSerializer(order_cls, client, {})
    orders = [proto_order(i) for i in range(1, 4)]
    framed = [serialize(as_message(order_cls, o), context) for o in orders]
    shipment = ProtobufSerializer(shipment_cls, client, {})(shipment_cls(id=9, carrier="ship"), context)
    records = [
        *(Record(str(o["id"]).encode(), with_id(f, text_id)) for o, f in zip(orders, framed, strict=True)),
        Record(b"shipment", with_id(shipment, text_id)),
        Record(b"broken", with_id(framed[0], bad_id)),
    ]
    producer.produce(kafka.bootstrap_servers, name, records)

    run(spark, topic, kafka.bootstrap_servers)

    rows = {r["_kafka"]["key"]: proto_row(r) for r in read_rows(Path(topic.parsed_path))}
    assert rows.pop(b"shipment") == {**{k: None for k in orders[0]}, "id": 9, "carrier": "ship"}
    assert rows == {str(o["id"]).encode(): o for o in orders}
    dead = read_rows(Path(topic.dead_letter_path))
    assert [(r["key"], r["reason"]) for r in dead] == [(b"broken", "undecodable")]
    assert f"schema id {bad_id} (subject '{name}-value')" in dead[0]["detail"]
    assert "does not compile: registry-schema-" in dead[0]["detail"]
    assert 'Field number 1 has already been used in "shop.Order" by field "id"' in dead[0]["detail"]
    # Kept with its descriptors: a replay compiles nothing and asks no registry.
    kept = json.loads(Path(topic.registry_schema_dir, f"{text_id}.json").read_text())
    assert kept["schema"] == ORDER_PROTO and kept["descriptors"]


def customer_files() -> tuple[Any, Any]:
    """``shop/customer.proto`` (a Customer) and ``shop/ordered.proto``, whose Ordered imports it and
    Google's ``google/type/date.proto``, which confluent-kafka registers no reference for."""
    from google.protobuf import descriptor_pb2

    F = descriptor_pb2.FieldDescriptorProto
    customer = descriptor_pb2.FileDescriptorProto(name="shop/customer.proto", package="shop", syntax="proto3")
    person = customer.message_type.add(name="Customer")
    person.field.add(name="name", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    person.field.add(name="vip", number=2, type=F.TYPE_BOOL, label=F.LABEL_OPTIONAL)
    ordered = descriptor_pb2.FileDescriptorProto(
        name="shop/ordered.proto",
        package="shop",
        syntax="proto3",
        dependency=["shop/customer.proto", "google/type/date.proto"],
    )
    message = ordered.message_type.add(name="Ordered")
    message.field.add(name="id", number=1, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    message.field.add(
        name="buyer", number=2, type=F.TYPE_MESSAGE, type_name=".shop.Customer", label=F.LABEL_OPTIONAL
    )
    message.field.add(
        name="placed", number=4, type=F.TYPE_MESSAGE, type_name=".google.type.Date", label=F.LABEL_OPTIONAL
    )
    return customer, ordered


def test_protobuf_schema_references_are_resolved(spark, kafka, registry, tmp_path):
    """A message importing another user .proto: confluent-kafka's serializer registers the imported
    file under its own subject and the message's schema with a reference to it; the job resolves
    it (kept beside the writer schemas). A text schema referencing that subject resolves too. Both
    import google/type/date.proto, which no reference names: the job takes it from its package."""
    from confluent_kafka.schema_registry import SchemaReference
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from google.protobuf import descriptor_pool, message_factory
    from google.type import date_pb2

    name = "it-protobuf-references"
    producer.create_topic(kafka.bootstrap_servers, name, partitions=1)
    topic = replace(
        make_topic(tmp_path, name, ParsedConfig()), format="protobuf", registry_conn_id="it_registry"
    )
    client = SchemaRegistryClient({"url": registry.url})
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(date_pb2.DESCRIPTOR.serialized_pb)
    for file in customer_files():
        pool.Add(file)
    ordered_cls = message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Ordered"))
    context = SerializationContext(name, MessageField.VALUE)
    framed = ProtobufSerializer(ordered_cls, client, {})
    values = [(i, f"buyer{i}", i % 2 == 1) for i in range(1, 4)]
    records = []
    for i, who, vip in values:
        message = ordered_cls(id=i)
        message.buyer.name, message.buyer.vip = who, vip
        message.placed.year, message.placed.month, message.placed.day = 2026, 12, i
        records.append(Record(f"o{i}".encode(), framed(message, context)))
    writer_id = struct.unpack(">I", records[0].value[1:5])[0]
    registered = client.get_schema(writer_id)
    assert [(r.name, r.subject) for r in registered.references] == [
        ("shop/customer.proto", "shop/customer.proto")
    ]
    # The same file as text, referencing the subject the serializer registered (a hand's way).
    text = (
        'syntax = "proto3"; package shop; import "shop/customer.proto"; import "google/type/date.proto";'
        " message Ordered { int64 id = 1; Customer buyer = 2; string channel = 3;"
        " google.type.Date placed = 4; }"
    )
    reference = SchemaReference(
        "shop/customer.proto", "shop/customer.proto", registered.references[0].version
    )
    text_id = client.register_schema(f"{name}-text-value", Schema(text, "PROTOBUF", [reference]))
    records.append(Record(b"text", with_id(records[1].value, text_id)))
    producer.produce(kafka.bootstrap_servers, name, records)

    run(spark, topic, kafka.bootstrap_servers)

    rows = {
        r["_kafka"]["key"]: {k: v for k, v in r.items() if not k.startswith("_")}
        for r in read_rows(Path(topic.parsed_path))
    }
    expected = {
        f"o{i}".encode(): {
            "id": i,
            "buyer": {"name": who, "vip": vip},
            "placed": {"year": 2026, "month": 12, "day": i},
            "channel": None,
        }
        for i, who, vip in values
    }
    assert rows == {**expected, b"text": {**expected[b"o2"], "channel": ""}}
    assert not Path(topic.dead_letter_path).exists() or read_rows(Path(topic.dead_letter_path)) == []
    kept = Path(topic.registry_schema_dir, "references", "shop%2Fcustomer.proto")
    assert [p.name for p in kept.iterdir()] == [f"{reference.version}.json"]
