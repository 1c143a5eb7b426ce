"""The registry's Protobuf schemas read as confluent-kafka's ProtobufSerializer registers them."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2

from kafkalake.core.errors import UnusableSchemaError
from kafkalake.kafka import protobuf_schema as ps

F = descriptor_pb2.FieldDescriptorProto


def _file() -> descriptor_pb2.FileDescriptorProto:
    file = descriptor_pb2.FileDescriptorProto(
        name="unit/ev.proto", package="unit", syntax="proto3", dependency=["google/protobuf/timestamp.proto"]
    )
    event = file.message_type.add(name="Event")
    inner = event.nested_type.add(name="Inner")
    inner.field.add(name="n", number=1, type=F.TYPE_UINT64, label=F.LABEL_OPTIONAL)
    entry = event.nested_type.add(name="TagsEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=F.TYPE_INT32, label=F.LABEL_OPTIONAL)
    entry.field.add(name="value", number=2, type=F.TYPE_DOUBLE, label=F.LABEL_OPTIONAL)
    kind = event.enum_type.add(name="Kind")
    kind.value.add(name="NONE", number=0)
    kind.value.add(name="BIG", number=1)
    fields: list[tuple[str, int, dict[str, Any]]] = [
        ("id", F.TYPE_INT64, {}),
        ("inner", F.TYPE_MESSAGE, {"type_name": ".unit.Event.Inner"}),
        ("tags", F.TYPE_MESSAGE, {"type_name": ".unit.Event.TagsEntry", "label": F.LABEL_REPEATED}),
        ("kind", F.TYPE_ENUM, {"type_name": ".unit.Event.Kind"}),
        ("at", F.TYPE_MESSAGE, {"type_name": ".google.protobuf.Timestamp"}),
        ("raw", F.TYPE_BYTES, {}),
        ("names", F.TYPE_STRING, {"label": F.LABEL_REPEATED}),
    ]
    for number, (name, kind_, more) in enumerate(fields, start=1):
        event.field.add(
            name=name, number=number, type=kind_, label=more.pop("label", F.LABEL_OPTIONAL), **more
        )
    file.message_type.add(name="Other").field.add(
        name="x", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL
    )
    return file


SCHEMA = base64.b64encode(_file().SerializeToString()).decode()


def _event_class() -> Any:
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(_file())
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("unit.Event"))


@pytest.mark.parametrize(
    ("data", "indexes", "start"),
    [(b"\x00rest", [0], 1), (b"\x02\x02", [1], 2), (b"\x04\x00\x04", [0, 2], 3), (b"\x02\x96\x01", [75], 3)],
)
def test_message_indexes_are_zigzag_varints(data: bytes, indexes: list[int], start: int) -> None:
    assert ps.message_indexes(data) == (indexes, start)


def test_a_cut_short_index_list_is_an_error() -> None:
    with pytest.raises(ps.MessageIndexError, match="cut short"):
        ps.message_indexes(b"\x04\x00")


def test_message_types_by_index_path() -> None:
    assert ps.message_type(SCHEMA, [0]).full_name == "unit.Event"
    assert ps.message_type(SCHEMA, [1]).full_name == "unit.Other"
    assert ps.message_type(SCHEMA, [0, 0]).full_name == "unit.Event.Inner"
    with pytest.raises(ps.MessageIndexError, match=r"\[2\] names no message"):
        ps.message_type(SCHEMA, [2])


def test_spark_type_of_a_message() -> None:
    fields = {f["name"]: f["type"] for f in ps.spark_type(ps.message_type(SCHEMA, [0]))["fields"]}
    assert fields == {
        "id": "long",
        "inner": {
            "type": "struct",
            "fields": [{"name": "n", "type": "decimal(20,0)", "nullable": True, "metadata": {}}],
        },
        "tags": {"type": "map", "keyType": "string", "valueType": "double", "valueContainsNull": True},
        "kind": "string",
        "at": "timestamp",
        "raw": "binary",
        "names": {"type": "array", "elementType": "string", "containsNull": True},
    }


def test_decode_gives_typed_json() -> None:
    event = _event_class()(id=2**62, tags={3: 1.5}, kind=1, raw=b"\x00\xff", names=["a"])
    event.at.FromJsonString("2026-11-28T12:00:01.250Z")
    name, text = ps.decode(SCHEMA, b"\x00" + event.SerializeToString())
    assert name == "unit.Event"
    assert json.loads(text) == {
        "id": 2**62,  # a number, not json_format's string
        "inner": None,  # not set
        "tags": {"3": 1.5},
        "kind": "BIG",
        "at": "2026-11-28T12:00:01.250Z",
        "raw": "AP8=",
        "names": ["a"],
    }


def test_proto_text_is_refused_with_the_reason() -> None:
    with pytest.raises(UnusableSchemaError, match="protoc"):
        ps.message_type('syntax = "proto3"; message A { int64 id = 1; }', [0])
