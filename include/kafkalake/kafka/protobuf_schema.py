"""Protobuf schemas of a schema registry, and the records they frame (``format: protobuf``).

Confluent's ``ProtobufSerializer`` (confluent-kafka 2.16.1) registers a schema as the base64 of a
serialized ``FileDescriptorProto``, and its deserializer asks for that form (``?format=serialized``:
Confluent's registry answers ``.proto`` text without it). A registry that keeps what it was given
(Apicurio) answers ``.proto`` text for a schema registered so (by Java's serializer, by hand): that
is compiled with protoc (:mod:`~kafkalake.kafka.protobuf_compile`). A schema's references (the
files it imports, each a subject version) are resolved into the same descriptor pool
(:func:`resolve`); the result, a ``FileDescriptorSet`` in dependency order, is what the functions
below take as ``schema``.

A record's payload starts with its **message indexes**, the path of its message type in the file
(``[1]``: the file's second top-level message; ``[0, 2]``: the first's third nested message):
a zigzag varint count, then each index as a zigzag varint; the single byte ``00`` stands for
``[0]``. The message follows.

Decoding gives plain JSON-ready values, typed as :func:`spark_type` says: int64 fields as numbers
(``json_format`` would print them as strings), enums as their names (the number where the writer
knew no name), bytes as base64 (Spark's ``from_json`` reads base64 into binary), a Timestamp as
RFC 3339 text, a message field that is not set as null, scalars without presence at their default
(as ``always_print_fields_with_no_presence``), each member of a ``oneof`` a nullable field of its own,
a map's entries by key. kafkalake's JVM extension writes the same JSON byte for byte
(``spark/jvm/KafkalakeProtobuf.scala``; tests/fixtures/protobuf_vectors.py holds the cases both run).
"""

from __future__ import annotations

import base64
import importlib
import json
import math
import re
from collections.abc import Callable, Iterator
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from kafkalake.core.errors import UnusableSchemaError

if TYPE_CHECKING:
    from google.protobuf.descriptor import Descriptor, FieldDescriptor

    from kafkalake.kafka.schema_registry import RegisteredSchema, SchemaReference

#: Files a registered schema may import without naming a reference for them: Confluent's serializer
#: treats them as built in (confluent-kafka's ``_is_builtin``) and registers no reference, so they come
#: from local packages: Google's well-known types (protobuf), Google's common types such as
#: ``google/type/date.proto`` (googleapis-common-protos) and Confluent's own (confluent-kafka). The file
#: ``google/type/date.proto`` is the module ``google.type.date_pb2``.
BUILTIN_PACKAGES = (
    ("google/protobuf/", "google.protobuf."),
    ("google/type/", "google.type."),
    ("confluent/", "confluent_kafka.schema_registry.confluent."),
)
#: A built-in file's name: a path of module names, so that no other module is ever imported by it.
_BUILTIN_NAME = re.compile(r"(?:[a-z][a-z0-9_]*/)*[a-z][a-z0-9_]*\.proto")
#: The files a ``.proto`` text imports (``import "a/b.proto";``, ``import public``, ``import weak``),
#: one to a line or not; one in a comment too, which only hands protoc a file it does not need.
_TEXT_IMPORT = re.compile(r'\bimport\s+(?:public\s+|weak\s+)?"([^"]+)"\s*;')
TIMESTAMP = "google.protobuf.Timestamp"
#: Nested message types deeper than this, or a type that contains itself, are kept as JSON text.
MAX_DEPTH = 16


class MessageIndexError(UnusableSchemaError):
    """A record's message indexes name no message of its schema's file (or cannot be read): the
    record is a dead letter, the schema may be fine."""


def message_indexes(payload: bytes) -> tuple[list[int], int]:
    """The message indexes at the start of ``payload``, and where the message starts."""
    values: list[int] = []
    position = 0

    def varint() -> int:
        nonlocal position
        shift = result = 0
        while True:
            if position >= len(payload) or shift > 63:
                raise MessageIndexError("the message-index list is cut short")
            byte = payload[position]
            position += 1
            result |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return (result >> 1) ^ -(result & 1)

    count = varint()
    if count == 0:
        return [0], position
    if count < 0 or count > MAX_DEPTH:
        raise MessageIndexError(f"message-index count {count} is not a path of message types")
    values = [varint() for _ in range(count)]
    return values, position


@lru_cache(maxsize=256)
def _builtin_file(name: str) -> Any | None:
    """The ``FileDescriptorProto`` of the built-in file ``name`` (:data:`BUILTIN_PACKAGES`), or None
    when ``name`` is none of them or its package is not installed."""
    from google.protobuf import descriptor_pb2

    for prefix, package in BUILTIN_PACKAGES:
        if name.startswith(prefix) and _BUILTIN_NAME.fullmatch(name):
            module_name = package + name[len(prefix) : -len(".proto")].replace("/", ".") + "_pb2"
            try:
                module = importlib.import_module(module_name)
            except ImportError:
                return None
            if getattr(getattr(module, "DESCRIPTOR", None), "name", None) != name:
                return None
            proto = descriptor_pb2.FileDescriptorProto()
            module.DESCRIPTOR.CopyToProto(proto)
            return proto
    return None


def is_builtin(name: str) -> bool:
    """Whether the file ``name`` comes with the local packages (:data:`BUILTIN_PACKAGES`)."""
    return _builtin_file(name) is not None


def builtin_files(names: Iterator[str] | list[str], have: set[str]) -> list[Any]:
    """The built-in files among ``names`` and the files they import, each after what it imports,
    leaving out those in ``have`` (which grows by the files returned). Names that are not built in
    are left for the caller to find or refuse."""
    found: list[Any] = []

    def add(name: str) -> None:
        if name in have or (proto := _builtin_file(name)) is None:
            return
        have.add(name)
        for dependency in proto.dependency:
            add(dependency)
        found.append(proto)

    for name in names:
        add(name)
    return found


def file_proto(schema: str, name: str | None, dependencies: list[Any]) -> Any:
    """The ``FileDescriptorProto`` of a registry's Protobuf schema text: the base64 of a serialized
    one (what confluent-kafka registers, and what Confluent's registry answers to
    ``?format=serialized``), else ``.proto`` text, compiled (:mod:`~kafkalake.kafka.protobuf_compile`)
    as the file ``name`` against ``dependencies``. ``name`` (a reference's) renames a serialized one
    too, as confluent-kafka's deserializer does: other files import it by that name.

    Raises:
        UnusableSchemaError: neither form.
    """
    from google.protobuf import descriptor_pb2

    try:
        data = base64.b64decode(schema, validate=True)
        proto = descriptor_pb2.FileDescriptorProto.FromString(data)
    except Exception:  # binascii.Error, or the protobuf runtime's DecodeError: not that form
        from kafkalake.kafka.protobuf_compile import compile_text

        given = {d.name for d in dependencies}
        imported = builtin_files(_TEXT_IMPORT.findall(schema), given)
        return compile_text(name or "registry-schema.proto", schema, [*imported, *dependencies])
    if name is not None:
        proto.name = name
    return proto


def resolve(
    schema: RegisteredSchema,
    referenced: Callable[[SchemaReference], RegisteredSchema],
    name: str | None = None,
) -> str:
    """The descriptors of ``schema`` and of the files it imports, its ``references`` resolved
    (recursively, by ``referenced``), as the base64 of a ``FileDescriptorSet``: each file after the
    files it imports, ``schema``'s own last. The built-in files it imports (:data:`BUILTIN_PACKAGES`)
    are not referenced: they come from the local packages, into the set too, so that the set is
    whole for any runtime that reads it.

    Raises:
        UnusableSchemaError: a file that does not read or compile, a missing or circular reference.
    """
    from google.protobuf import descriptor_pb2

    files: dict[str, Any] = {}

    def visit(current: RegisteredSchema, file_name: str | None, trail: tuple[str, ...]) -> Any:
        for ref in current.references:
            if ref.name in files or is_builtin(ref.name):
                continue
            if ref.name in trail:
                raise UnusableSchemaError(f"its references import each other: {' -> '.join(trail)}")
            files[ref.name] = visit(referenced(ref), ref.name, (*trail, ref.name))
        proto = file_proto(current.schema, file_name, list(files.values()))
        for builtin in builtin_files(list(proto.dependency), set(files)):
            files[builtin.name] = builtin
        missing = [d for d in proto.dependency if d not in files]
        if missing:
            raise UnusableSchemaError(
                f"{proto.name!r} imports {', '.join(missing)}, which its registry entry names no "
                "reference for"
            )
        return proto

    root = visit(schema, name or f"registry-schema-{schema.id}.proto", ())
    result = descriptor_pb2.FileDescriptorSet()
    result.file.extend([*files.values(), root])
    return base64.b64encode(result.SerializeToString()).decode()


@lru_cache(maxsize=64)
def _pool_and_file(descriptors: str) -> tuple[Any, Any]:
    """A descriptor pool holding the files of ``descriptors`` (:func:`resolve`) and the built-in
    files they import that the set lacks (a set resolved before those were put in it); and the last
    file's descriptor (the schema's own)."""
    from google.protobuf import descriptor_pb2, descriptor_pool

    try:
        files = list(descriptor_pb2.FileDescriptorSet.FromString(base64.b64decode(descriptors)).file)
    except Exception as err:  # binascii.Error, or the protobuf runtime's DecodeError
        raise UnusableSchemaError(
            f"not a resolved Protobuf schema (base64 FileDescriptorSet): {err}"
        ) from None
    if not files:
        raise UnusableSchemaError("not a resolved Protobuf schema: no file")
    pool = descriptor_pool.DescriptorPool()
    added = {proto.name for proto in files}
    try:
        for proto in files:
            for builtin in builtin_files(list(proto.dependency), added):
                pool.Add(builtin)
            pool.Add(proto)
    except Exception as err:  # the pool's own errors (TypeError, KeyError) differ by implementation
        raise UnusableSchemaError(
            f"the registry's Protobuf schema {files[-1].name!r} does not build: {err}"
        ) from None
    return pool, pool.FindFileByName(files[-1].name)


def descriptors_of(schema: RegisteredSchema) -> str:
    """The resolved descriptors of a writer schema :class:`WriterSchemas` gave.

    Raises:
        UnusableSchemaError: it could not be resolved (its ``problem``).
    """
    if schema.descriptors is None:
        raise UnusableSchemaError(schema.problem or f"schema id {schema.id} was not resolved")
    return schema.descriptors


def message_type(schema: str, indexes: list[int]) -> Descriptor:
    """The message type of ``schema`` (resolved descriptors, :func:`resolve`) at the path ``indexes``.

    Raises:
        MessageIndexError: no such message.
    """
    _, file = _pool_and_file(schema)
    found: Any = None
    for index in indexes:
        kinds = list(file.message_types_by_name.values()) if found is None else found.nested_types
        if not 0 <= index < len(kinds):
            raise MessageIndexError(f"message index {indexes} names no message of {file.name!r}")
        found = kinds[index]
    if found is None:
        raise MessageIndexError(f"message index {indexes} names no message of {file.name!r}")
    return found


def message_type_by_name(schema: str, name: str) -> Descriptor:
    """The message type ``name`` (its full name) of ``schema``."""
    pool, _ = _pool_and_file(schema)
    return pool.FindMessageTypeByName(name)


def message_names(schema: str) -> Iterator[tuple[list[int], str]]:
    """Every message type of the file with its index path (top level first)."""
    _, file = _pool_and_file(schema)

    def walk(kinds: list[Any], path: list[int]) -> Iterator[tuple[list[int], str]]:
        for i, kind in enumerate(kinds):
            yield [*path, i], kind.full_name
            yield from walk(list(kind.nested_types), [*path, i])

    yield from walk(list(file.message_types_by_name.values()), [])


def _field(name: str, data_type: Any) -> dict[str, Any]:
    return {"name": name, "type": data_type, "nullable": True, "metadata": {}}


def _scalar_type(field: FieldDescriptor) -> Any:
    from google.protobuf.descriptor import FieldDescriptor as F

    kinds = {
        F.TYPE_DOUBLE: "double",
        F.TYPE_FLOAT: "float",
        F.TYPE_INT64: "long",
        F.TYPE_SINT64: "long",
        F.TYPE_SFIXED64: "long",
        # uint64 above 2^63 does not fit a long.
        F.TYPE_UINT64: "decimal(20,0)",
        F.TYPE_FIXED64: "decimal(20,0)",
        F.TYPE_INT32: "integer",
        F.TYPE_SINT32: "integer",
        F.TYPE_SFIXED32: "integer",
        F.TYPE_UINT32: "long",
        F.TYPE_FIXED32: "long",
        F.TYPE_BOOL: "boolean",
        F.TYPE_STRING: "string",
        F.TYPE_BYTES: "binary",
        F.TYPE_ENUM: "string",
    }
    return kinds[field.type]


def _value_type(field: FieldDescriptor, seen: tuple[str, ...]) -> Any:
    """The Spark type of one value of ``field`` (an element, for a repeated field)."""
    from google.protobuf.descriptor import FieldDescriptor as F

    if field.type != F.TYPE_MESSAGE:
        return _scalar_type(field)
    kind = field.message_type
    if kind.full_name == TIMESTAMP:
        return "timestamp"
    if kind.full_name.startswith("google.protobuf.") or kind.full_name in seen or len(seen) > MAX_DEPTH:
        # Its JSON text: from_json keeps a JSON object read into a string column as its text, so
        # :func:`plain` need not know where the type stopped.
        return "string"
    return spark_type(kind, (*seen, kind.full_name))


def _is_map(field: FieldDescriptor) -> bool:
    kind = field.message_type
    return bool(kind is not None and kind.GetOptions().map_entry and _repeated(field))


def _repeated(field: FieldDescriptor) -> bool:
    return bool(field.is_repeated)


def spark_type(kind: Descriptor, seen: tuple[str, ...] = ()) -> dict[str, Any]:
    """The Spark struct type (Spark's JSON form) of records of the message type ``kind``.

    Map keys are strings (JSON object keys; Spark's ``from_json`` reads no other key type).
    """
    seen = seen or (kind.full_name,)
    fields = []
    for field in kind.fields:
        if _is_map(field):
            value = field.message_type.fields_by_name["value"]
            data_type: Any = {
                "type": "map",
                "keyType": "string",
                "valueType": _value_type(value, seen),
                "valueContainsNull": True,
            }
        elif _repeated(field):
            data_type = {"type": "array", "elementType": _value_type(field, seen), "containsNull": True}
        else:
            data_type = _value_type(field, seen)
        fields.append(_field(field.name, data_type))
    return {"type": "struct", "fields": fields}


def _plain_value(field: FieldDescriptor, value: Any) -> Any:
    from google.protobuf import json_format
    from google.protobuf.descriptor import FieldDescriptor as F

    if field.type == F.TYPE_MESSAGE:
        name = field.message_type.full_name
        if name == TIMESTAMP:
            return value.ToJsonString()
        if name.startswith("google.protobuf."):
            return json_format.MessageToJson(value, preserving_proto_field_name=True, indent=None)
        return plain(value)
    if field.type == F.TYPE_ENUM:
        known = field.enum_type.values_by_number.get(value)
        return known.name if known is not None else str(value)
    if field.type == F.TYPE_BYTES:
        return base64.b64encode(value).decode()
    if field.type == F.TYPE_STRING and isinstance(value, bytes):
        # upb checks no UTF-8 in a proto2 string field and hands over the bytes instead.
        raise ValueError(f"string field {field.full_name} is not valid UTF-8")
    if isinstance(value, float) and not math.isfinite(value):
        # Quoted, in the spellings Spark's JSON reader takes for a double or float column: it reads
        # Python's str() ("nan", "inf") as no number, and the value was null in the table.
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return value


def plain(message: Any) -> dict[str, Any]:
    """A decoded message as JSON-ready values, field by field (see the module's docstring)."""
    result: dict[str, Any] = {}
    for field in message.DESCRIPTOR.fields:
        value = getattr(message, field.name)
        if _is_map(field):
            entry = field.message_type.fields_by_name["value"]
            # By key: upb's map iterates in its hash table's order, which no other decoder shares.
            result[field.name] = {str(k): _plain_value(entry, v) for k, v in sorted(value.items())}
        elif _repeated(field):
            result[field.name] = [_plain_value(field, v) for v in value]
        elif field.has_presence and not message.HasField(field.name):
            result[field.name] = None
        else:
            result[field.name] = _plain_value(field, value)
    return result


def well_known_used(schema: str) -> set[str]:
    """The full names of Google's well-known types that the messages of ``schema`` (resolved
    descriptors) hold, at any depth."""
    from google.protobuf.descriptor import FieldDescriptor as F

    _, file = _pool_and_file(schema)
    used: set[str] = set()
    seen: set[str] = set()
    todo = list(file.message_types_by_name.values())
    while todo:
        kind = todo.pop()
        if kind.full_name in seen:
            continue
        seen.add(kind.full_name)
        todo.extend(kind.nested_types)
        for field in kind.fields:
            if field.type != F.TYPE_MESSAGE:
                continue
            if field.message_type.full_name.startswith("google.protobuf."):
                used.add(field.message_type.full_name)
            else:
                todo.append(field.message_type)
    return used


def decode(schema: str, payload: bytes) -> tuple[str, str]:
    """The record ``payload`` (message indexes, then the message) of ``schema``: its message type's
    full name and its values as JSON text.

    Raises:
        MessageIndexError: the indexes name no message type of the schema.
        google.protobuf.message.DecodeError: the message does not decode.
    """
    from google.protobuf import message_factory

    indexes, start = message_indexes(payload)
    kind = message_type(schema, indexes)
    message = message_factory.GetMessageClass(kind).FromString(payload[start:])
    return kind.full_name, json.dumps(plain(message), allow_nan=False)
