"""What the schema-registry test modules share: the Avro Order schemas and records made by
confluent-kafka's own serializers (test_schema_registry, test_registry_keys, test_registry_protobuf).
The ``registry`` fixture is in conftest.py."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from confluent_kafka.schema_registry import _KEY_SCHEMA_ID as KEY_SCHEMA_ID
from confluent_kafka.schema_registry import _VALUE_SCHEMA_ID as VALUE_SCHEMA_ID
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from kafkalake.config.parsed import ParsedConfig
from kafkalake.config.topic import TopicConfig
from kafkalake.dev import producer
from kafkalake.dev.producer import Record

from .helpers import make_topic

ORDER_V1 = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {
            "name": "customer",
            "type": {
                "type": "record",
                "name": "Customer",
                "fields": [
                    {"name": "name", "type": "string"},
                    {"name": "tier", "type": {"type": "enum", "name": "Tier", "symbols": ["GOLD", "SILVER"]}},
                ],
            },
        },
        {
            "name": "items",
            "type": {
                "type": "array",
                "items": {
                    "type": "record",
                    "name": "Item",
                    "fields": [{"name": "sku", "type": "string"}, {"name": "qty", "type": "int"}],
                },
            },
        },
        {"name": "attrs", "type": {"type": "map", "values": "string"}},
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
        {"name": "created", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}
#: v1 with a field added with a default: a compatible evolution.
ORDER_V2 = {
    **ORDER_V1,
    "fields": [*ORDER_V1["fields"], {"name": "channel", "type": "string", "default": "web"}],
}


def avro_topic(
    kafka: Any, lake: Path, name: str, partitions: int, parsed: ParsedConfig | None = None
) -> TopicConfig:
    """A topic in Kafka (``partitions``), and its catalog entry with ``format: avro``."""
    producer.create_topic(kafka.bootstrap_servers, name, partitions=partitions)
    entry = make_topic(lake, name, parsed or ParsedConfig())
    return replace(entry, format="avro", registry_conn_id="it_registry")


def order(i: int, **extra: Any) -> dict[str, Any]:
    return {
        "id": i,
        "customer": {"name": f"c{i}", "tier": "GOLD" if i % 2 else "SILVER"},
        "items": [{"sku": f"s{i}-{j}", "qty": j + 1} for j in range(i % 3)],
        "attrs": {"src": "test", f"k{i}": str(i)},
        "amount": Decimal(f"{i}.{i % 100:02d}"),
        "created": datetime(2026, 11, 28, 12, i % 60, tzinfo=UTC),
        "note": None if i % 2 else f"note {i}",
        **extra,
    }


def serialized(
    url: str | dict[str, str], topic: str, schema: dict[str, Any], orders: list[dict[str, Any]]
) -> list[Record]:
    """The orders as confluent-kafka's AvroSerializer frames them (it registers the schema); ``url``
    or the registry client's whole settings."""
    client = SchemaRegistryClient(url if isinstance(url, dict) else {"url": url})
    serialize = AvroSerializer(client, json.dumps(schema))
    context = SerializationContext(topic, MessageField.VALUE)
    return [Record(str(o["id"]).encode(), serialize(o, context)) for o in orders]


def as_produced(row: dict[str, Any]) -> dict[str, Any]:
    """A parsed row's fields in the producer's form: enums are strings, maps come back as pairs."""
    fields = {k: v for k, v in row.items() if not k.startswith("_")}
    fields["attrs"] = dict(fields["attrs"])
    return fields


def in_header(payload: bytes, ctx: Any, schema_id: Any) -> bytes:
    """A ``schema.id.serializer`` putting the schema id in the record header, as Confluent's
    ``header_schema_id_serializer`` does, but the id (magic byte 0), not a GUID: Apicurio 2.4.2
    assigns no GUIDs, so the client's own serializer refuses ("Schema GUID is not set")."""
    name = KEY_SCHEMA_ID if ctx.field == MessageField.KEY else VALUE_SCHEMA_ID
    ctx.headers.append((name, schema_id.id_to_bytes()))
    return payload


# --- Protobuf: an Order file built in Python, its classes, and its values as parsed rows hold them


def order_file() -> Any:
    """``shop/order.proto`` as a FileDescriptorProto, built here rather than by protoc: an Order
    (nested message, repeated, map, enum, oneof, int64, bytes, a Timestamp) and a Shipment, the
    file's second message (message index [1])."""
    from google.protobuf import descriptor_pb2

    F = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(
        name="shop/order.proto",
        package="shop",
        syntax="proto3",
        dependency=["google/protobuf/timestamp.proto"],
    )

    def field(message: Any, name: str, number: int, kind: int, **more: Any) -> None:
        message.field.add(
            name=name, number=number, type=kind, label=more.pop("label", F.LABEL_OPTIONAL), **more
        )

    order = file.message_type.add(name="Order")
    customer = order.nested_type.add(name="Customer")
    field(customer, "name", 1, F.TYPE_STRING)
    field(customer, "tier", 2, F.TYPE_ENUM, type_name=".shop.Order.Tier")
    entry = order.nested_type.add(name="AttrsEntry")
    entry.options.map_entry = True
    field(entry, "key", 1, F.TYPE_STRING)
    field(entry, "value", 2, F.TYPE_STRING)
    tier = order.enum_type.add(name="Tier")
    for number, symbol in enumerate(("TIER_UNSPECIFIED", "GOLD", "SILVER")):
        tier.value.add(name=symbol, number=number)
    order.oneof_decl.add(name="payment")
    field(order, "id", 1, F.TYPE_INT64)
    field(order, "customer", 2, F.TYPE_MESSAGE, type_name=".shop.Order.Customer")
    field(order, "skus", 3, F.TYPE_STRING, label=F.LABEL_REPEATED)
    field(order, "attrs", 4, F.TYPE_MESSAGE, type_name=".shop.Order.AttrsEntry", label=F.LABEL_REPEATED)
    field(order, "card", 5, F.TYPE_STRING, oneof_index=0)
    field(order, "voucher", 6, F.TYPE_INT64, oneof_index=0)
    field(order, "created", 7, F.TYPE_MESSAGE, type_name=".google.protobuf.Timestamp")
    field(order, "blob", 8, F.TYPE_BYTES)
    shipment = file.message_type.add(name="Shipment")
    field(shipment, "id", 1, F.TYPE_INT64)
    field(shipment, "carrier", 2, F.TYPE_STRING)
    return file


def order_classes(file: Any = None) -> tuple[Any, Any]:
    from google.protobuf import descriptor_pool, message_factory, timestamp_pb2

    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(file or order_file())
    return tuple(
        message_factory.GetMessageClass(pool.FindMessageTypeByName(f"shop.{n}"))
        for n in ("Order", "Shipment")
    )


def proto_order(i: int) -> dict[str, Any]:
    """An Order's values as the parsed row should hold them."""
    return {
        "id": 2**40 + i,
        "customer": {"name": f"c{i}", "tier": "GOLD" if i % 2 else "SILVER"},
        "skus": [f"s{i}-{j}" for j in range(i % 3)],
        "attrs": {"src": "test", f"k{i}": str(i)},
        "card": f"card{i}" if i % 2 else None,
        "voucher": None if i % 2 else 10 * i,
        "created": datetime(2026, 11, 28, 12, i % 60, 1, 250000, tzinfo=UTC),
        "blob": bytes([i, 0, 255]),
        "carrier": None,
    }


def as_message(cls: Any, values: dict[str, Any]) -> Any:
    message = cls(id=values["id"], skus=values["skus"], attrs=values["attrs"], blob=values["blob"])
    message.customer.name = values["customer"]["name"]
    message.customer.tier = cls.Tier.Value(values["customer"]["tier"])
    if values["card"] is not None:
        message.card = values["card"]
    else:
        message.voucher = values["voucher"]
    message.created.FromDatetime(values["created"])
    return message


def proto_row(row: dict[str, Any]) -> dict[str, Any]:
    """A parsed row's fields, its map as a dict (delta-rs reads maps as pairs)."""
    fields = {k: v for k, v in row.items() if not k.startswith("_")}
    if fields["attrs"] is not None:
        fields["attrs"] = dict(fields["attrs"])
    return fields
