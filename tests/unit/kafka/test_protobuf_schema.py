"""The registry's Protobuf schemas read as confluent-kafka's ProtobufSerializer registers them."""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2

from kafkalake.core.errors import UnusableSchemaError
from kafkalake.kafka import protobuf_schema as ps
from kafkalake.kafka.schema_registry import RegisteredSchema, SchemaReference

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


#: As confluent-kafka registers it, and its descriptors resolved (what the decoding functions take).
REGISTERED = base64.b64encode(_file().SerializeToString()).decode()
SCHEMA = ps.resolve(RegisteredSchema(1, REGISTERED, "PROTOBUF"), lambda ref: pytest.fail(f"asked {ref}"))


def _with_import() -> str:
    file = _file()
    file.dependency.append("shop/customer.proto")
    return base64.b64encode(file.SerializeToString()).decode()


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


EVENT_TEXT = """
syntax = "proto3";
package unit;
import "google/protobuf/timestamp.proto";
message Event {
  message Inner { uint64 n = 1; }
  enum Kind { NONE = 0; BIG = 1; }
  int64 id = 1;
  Inner inner = 2;
  map<int32, double> tags = 3;
  Kind kind = 4;
  google.protobuf.Timestamp at = 5;
  bytes raw = 6;
  repeated string names = 7;
}
message Other { string x = 1; }
"""


def test_proto_text_compiles_to_the_same_messages_as_the_serialized_file() -> None:
    text = ps.resolve(RegisteredSchema(2, EVENT_TEXT, "PROTOBUF"), lambda ref: pytest.fail(f"asked {ref}"))
    assert ps.spark_type(ps.message_type(text, [0])) == ps.spark_type(ps.message_type(SCHEMA, [0]))
    assert ps.message_type(text, [1]).full_name == "unit.Other"
    event = _event_class()(id=7, tags={1: 2.0}, kind=1, names=["n"])
    payload = b"\x00" + event.SerializeToString()
    assert ps.decode(text, payload) == ps.decode(SCHEMA, payload)


def test_proto_text_that_does_not_compile_says_where() -> None:
    with pytest.raises(
        UnusableSchemaError, match=r'does not compile: registry-schema-5.proto:1:\d+: Expected ";"'
    ):
        ps.resolve(
            RegisteredSchema(5, 'syntax = "proto3"; message A { int64 id = 1 }', "PROTOBUF"), lambda r: None
        )


CUSTOMER = (
    'syntax = "proto3"; package shop; import "shop/tier.proto";'
    " message Customer { string name = 1; Tier tier = 2; }"
)
TIER = 'syntax = "proto3"; package shop; enum Tier { NONE = 0; GOLD = 1; }'
ORDER = """syntax = "proto3"; package shop;
import "shop/customer.proto"; import "shop/tier.proto";
message Order { int64 id = 1; Customer customer = 2; Tier tier = 3; }"""


def test_references_are_resolved_recursively_each_once_in_dependency_order() -> None:
    from google.protobuf import descriptor_pb2

    tier_file = descriptor_pb2.FileDescriptorProto(name="whatever.proto", package="shop", syntax="proto3")
    tier_file.enum_type.add(name="Tier").value.add(name="NONE", number=0)
    tier_file.enum_type[0].value.add(name="GOLD", number=1)
    # The tier file registered serialized (confluent-kafka), the others as text: both mix.
    entries = {
        ("tier", 1): RegisteredSchema(
            11, base64.b64encode(tier_file.SerializeToString()).decode(), "PROTOBUF", "tier", 1
        ),
        ("customer", 2): RegisteredSchema(
            12, CUSTOMER, "PROTOBUF", "customer", 2, (SchemaReference("shop/tier.proto", "tier", 1),)
        ),
    }
    asked: list[tuple[str, int]] = []

    def referenced(ref: SchemaReference) -> RegisteredSchema:
        asked.append((ref.subject, ref.version))
        return entries[(ref.subject, ref.version)]

    order = RegisteredSchema(
        13,
        ORDER,
        "PROTOBUF",
        references=(
            SchemaReference("shop/customer.proto", "customer", 2),
            SchemaReference("shop/tier.proto", "tier", 1),
        ),
    )
    resolved = ps.resolve(order, referenced)
    assert asked == [("customer", 2), ("tier", 1)]  # the tier once, though two files import it
    files = descriptor_pb2.FileDescriptorSet.FromString(base64.b64decode(resolved)).file
    # Renamed to the name it is imported by, as confluent-kafka's deserializer does.
    assert [f.name for f in files] == ["shop/tier.proto", "shop/customer.proto", "registry-schema-13.proto"]
    kind = ps.message_type(resolved, [0])
    cls = message_factory.GetMessageClass(kind)
    message = cls(id=3, tier=1)
    message.customer.name = "ann"
    message.customer.tier = 1
    name, text = ps.decode(resolved, b"\x00" + message.SerializeToString())
    assert (name, json.loads(text)) == (
        "shop.Order",
        {"id": 3, "customer": {"name": "ann", "tier": "GOLD"}, "tier": "GOLD"},
    )


def test_an_import_without_its_reference_is_named() -> None:
    with pytest.raises(UnusableSchemaError, match=r'Import "shop/customer\.proto" was not found'):
        ps.resolve(RegisteredSchema(14, ORDER, "PROTOBUF"), lambda r: pytest.fail("no references"))
    # A serialized file (no compiler to say it) that imports a file its entry names no reference for.
    with pytest.raises(UnusableSchemaError, match=r"imports shop/customer.proto, which its registry entry"):
        ps.resolve(RegisteredSchema(15, _with_import(), "PROTOBUF"), lambda r: None)


def _day_file() -> descriptor_pb2.FileDescriptorProto:
    """A file of Google's and Confluent's built-in types, which confluent-kafka registers without
    references (its ``_is_builtin``): nothing in the registry says where they come from."""
    file = descriptor_pb2.FileDescriptorProto(
        name="unit/day.proto",
        package="unit",
        syntax="proto3",
        dependency=["google/type/date.proto", "confluent/type/decimal.proto", "confluent/meta.proto"],
    )
    day = file.message_type.add(name="Day")
    day.field.add(
        name="on", number=1, type=F.TYPE_MESSAGE, type_name=".google.type.Date", label=F.LABEL_OPTIONAL
    )
    day.field.add(
        name="amount",
        number=2,
        type=F.TYPE_MESSAGE,
        type_name=".confluent.type.Decimal",
        label=F.LABEL_OPTIONAL,
    )
    return file


DAY_TEXT = """syntax = "proto3"; package unit; import "google/type/date.proto";
import   public "confluent/type/decimal.proto";
import "confluent/meta.proto";
message Day {
  google.type.Date on = 1;
  confluent.type.Decimal amount = 2 [(confluent.field_meta).params = {key: "precision", value: "9"}];
}
"""


@pytest.mark.parametrize("form", ["serialized", "text"])
def test_google_and_confluent_built_in_types_need_no_reference(form: str) -> None:
    from confluent_kafka.schema_registry.confluent.type import decimal_pb2
    from google.type import date_pb2

    registered = (
        base64.b64encode(_day_file().SerializeToString()).decode() if form == "serialized" else DAY_TEXT
    )
    resolved = ps.resolve(
        RegisteredSchema(21, registered, "PROTOBUF"), lambda ref: pytest.fail(f"asked {ref}")
    )
    files = [f.name for f in descriptor_pb2.FileDescriptorSet.FromString(base64.b64decode(resolved)).file]
    # The set is whole: each built-in file the schema imports, after what it imports, then the schema.
    assert files[-1] == "registry-schema-21.proto"
    assert set(files[:-1]) == {
        "google/type/date.proto",
        "confluent/type/decimal.proto",
        "confluent/meta.proto",
        "google/protobuf/descriptor.proto",
    }
    assert files.index("google/protobuf/descriptor.proto") < files.index("confluent/meta.proto")
    kind = ps.message_type(resolved, [0])
    assert ps.spark_type(kind)["fields"][0]["type"]["fields"][0]["name"] == "year"
    message = message_factory.GetMessageClass(kind)()
    # Written with the packages' own classes, as a producer does: the same bytes on the wire.
    message.on.MergeFromString(date_pb2.Date(year=2026, month=12, day=1).SerializeToString())
    message.amount.MergeFromString(
        decimal_pb2.Decimal(value=b"\x04\xd2", precision=9, scale=2).SerializeToString()
    )
    name, text = ps.decode(resolved, b"\x00" + message.SerializeToString())
    assert (name, json.loads(text)) == (
        "unit.Day",
        {
            "on": {"year": 2026, "month": 12, "day": 1},
            "amount": {"value": "BNI=", "precision": 9, "scale": 2},
        },
    )


@pytest.mark.parametrize(
    "imported", ["google/type/../../os.proto", "google/type/no_such_type.proto", "confluent/Meta.proto"]
)
def test_a_name_under_a_built_in_folder_that_is_no_built_in_file_needs_its_reference(imported: str) -> None:
    file = _day_file()
    file.dependency.append(imported)
    registered = base64.b64encode(file.SerializeToString()).decode()
    with pytest.raises(
        UnusableSchemaError, match=rf"imports {re.escape(imported)}, which its registry entry"
    ):
        ps.resolve(RegisteredSchema(22, registered, "PROTOBUF"), lambda r: None)


def test_a_set_resolved_without_its_well_known_files_still_decodes() -> None:
    """Sets kept in a schema history before the built-in files went into them."""
    old = descriptor_pb2.FileDescriptorSet()
    old.file.append(_file())
    kept = base64.b64encode(old.SerializeToString()).decode()
    event = _event_class()(id=5)
    event.at.FromJsonString("2026-12-01T00:00:00Z")
    payload = b"\x00" + event.SerializeToString()
    assert ps.decode(kept, payload) == ps.decode(SCHEMA, payload)
