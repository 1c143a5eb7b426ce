"""Shared Protobuf test vectors: (writer schema, payload) -> (message type, JSON, reason, detail).

One set for both decoders of ``format: protobuf``: the Python one (kafkalake.kafka.protobuf_schema,
run by tests/unit/kafka/test_protobuf_vectors.py) and the JVM one (kafkalake_protobuf_decode, run
in the tests' SparkSession by tests/integration/test_protobuf_decode.py). The JSON is written out
here, byte for byte: both decoders must give exactly this text. A payload is what the parser hands
the decoder: the message indexes, then the message.
"""

from __future__ import annotations

import base64
import struct
from dataclasses import dataclass
from functools import cache
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2

from kafkalake.kafka import protobuf_schema
from kafkalake.kafka.schema_registry import RegisteredSchema

F = descriptor_pb2.FieldDescriptorProto
#: The schema ids of the two writer schemas.
ALL, LEGACY = 7, 8


def _all_file() -> descriptor_pb2.FileDescriptorProto:
    """A proto3 file with every kind of field: scalars, enum, nested, repeated, maps, oneof, Timestamp."""
    file = descriptor_pb2.FileDescriptorProto(
        name="vectors/all.proto",
        package="vectors",
        syntax="proto3",
        dependency=["google/protobuf/timestamp.proto"],
    )
    kind = file.enum_type.add(name="Kind")
    for number, name in enumerate(["KIND_NONE", "KIND_BIG", "KIND_SMALL"]):
        kind.value.add(name=name, number=number)
    every = file.message_type.add(name="All")
    inner = every.nested_type.add(name="Inner")
    inner.field.add(name="label", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    inner.field.add(name="at", number=2, type=F.TYPE_MESSAGE, type_name=".google.protobuf.Timestamp")
    for entry_name, key_type, value_type, value_name in [
        ("ByNameEntry", F.TYPE_STRING, F.TYPE_INT64, ""),
        ("ByNumberEntry", F.TYPE_SINT32, F.TYPE_MESSAGE, ".vectors.All.Inner"),
        ("ByFlagEntry", F.TYPE_BOOL, F.TYPE_STRING, ""),
        ("ByBigEntry", F.TYPE_UINT64, F.TYPE_DOUBLE, ""),
    ]:
        entry = every.nested_type.add(name=entry_name)
        entry.options.map_entry = True
        entry.field.add(name="key", number=1, type=key_type, label=F.LABEL_OPTIONAL)
        value = entry.field.add(name="value", number=2, type=value_type, label=F.LABEL_OPTIONAL)
        if value_name:
            value.type_name = value_name
    every.oneof_decl.add(name="choice")
    scalars = [
        ("f_double", F.TYPE_DOUBLE),
        ("f_float", F.TYPE_FLOAT),
        ("f_int64", F.TYPE_INT64),
        ("f_uint64", F.TYPE_UINT64),
        ("f_int32", F.TYPE_INT32),
        ("f_fixed64", F.TYPE_FIXED64),
        ("f_fixed32", F.TYPE_FIXED32),
        ("f_bool", F.TYPE_BOOL),
        ("f_string", F.TYPE_STRING),
        ("f_bytes", F.TYPE_BYTES),
        ("f_uint32", F.TYPE_UINT32),
        ("f_sfixed32", F.TYPE_SFIXED32),
        ("f_sfixed64", F.TYPE_SFIXED64),
        ("f_sint32", F.TYPE_SINT32),
        ("f_sint64", F.TYPE_SINT64),
    ]
    for number, (name, type_) in enumerate(scalars, start=1):
        every.field.add(name=name, number=number, type=type_, label=F.LABEL_OPTIONAL)
    more: list[tuple[str, int, dict[str, Any]]] = [
        ("kind", F.TYPE_ENUM, {"type_name": ".vectors.Kind"}),
        ("inner", F.TYPE_MESSAGE, {"type_name": ".vectors.All.Inner"}),
        ("inners", F.TYPE_MESSAGE, {"type_name": ".vectors.All.Inner", "label": F.LABEL_REPEATED}),
        ("numbers", F.TYPE_INT32, {"label": F.LABEL_REPEATED}),
        ("words", F.TYPE_STRING, {"label": F.LABEL_REPEATED}),
        ("kinds", F.TYPE_ENUM, {"type_name": ".vectors.Kind", "label": F.LABEL_REPEATED}),
        ("by_name", F.TYPE_MESSAGE, {"type_name": ".vectors.All.ByNameEntry", "label": F.LABEL_REPEATED}),
        ("by_number", F.TYPE_MESSAGE, {"type_name": ".vectors.All.ByNumberEntry", "label": F.LABEL_REPEATED}),
        ("by_flag", F.TYPE_MESSAGE, {"type_name": ".vectors.All.ByFlagEntry", "label": F.LABEL_REPEATED}),
        ("by_big", F.TYPE_MESSAGE, {"type_name": ".vectors.All.ByBigEntry", "label": F.LABEL_REPEATED}),
        ("at", F.TYPE_MESSAGE, {"type_name": ".google.protobuf.Timestamp"}),
        ("pick_text", F.TYPE_STRING, {"oneof_index": 0}),
        ("pick_number", F.TYPE_INT64, {"oneof_index": 0}),
        ("doubles", F.TYPE_DOUBLE, {"label": F.LABEL_REPEATED}),
    ]
    for number, (name, type_, options) in enumerate(more, start=len(scalars) + 1):
        every.field.add(
            name=name, number=number, type=type_, label=options.pop("label", F.LABEL_OPTIONAL), **options
        )
    file.message_type.add(name="Small").field.add(
        name="n", number=1, type=F.TYPE_INT32, label=F.LABEL_OPTIONAL
    )
    return file


def _legacy_file() -> descriptor_pb2.FileDescriptorProto:
    """A proto2 file: presence on every field, a closed enum, no UTF-8 check on strings."""
    file = descriptor_pb2.FileDescriptorProto(name="vectors/legacy.proto", package="legacy", syntax="proto2")
    level = file.enum_type.add(name="Level")
    level.value.add(name="LOW", number=1)
    level.value.add(name="HIGH", number=2)
    message = file.message_type.add(name="Legacy")
    message.field.add(name="s", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    message.field.add(name="n", number=2, type=F.TYPE_INT32, label=F.LABEL_OPTIONAL)
    message.field.add(
        name="level", number=3, type=F.TYPE_ENUM, type_name=".legacy.Level", label=F.LABEL_OPTIONAL
    )
    return file


def _resolved(file: descriptor_pb2.FileDescriptorProto, sid: int) -> str:
    registered = base64.b64encode(file.SerializeToString()).decode()
    return protobuf_schema.resolve(RegisteredSchema(sid, registered, "PROTOBUF"), lambda ref: None)


@cache
def schemas() -> dict[int, str]:
    """Schema id -> resolved descriptors (the base64 FileDescriptorSet the decoders take)."""
    return {ALL: _resolved(_all_file(), ALL), LEGACY: _resolved(_legacy_file(), LEGACY)}


@cache
def _classes() -> dict[str, Any]:
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(_all_file())
    pool.Add(_legacy_file())
    names = ["vectors.All", "vectors.All.Inner", "vectors.Small", "legacy.Legacy"]
    return {n: message_factory.GetMessageClass(pool.FindMessageTypeByName(n)) for n in names}


def message(name: str, **fields: Any) -> bytes:
    return bytes(_classes()[name](**fields).SerializeToString())


def _full() -> bytes:
    every = _classes()["vectors.All"](
        f_double=-2.5,
        f_float=0.1,
        f_int64=-(2**63),
        f_uint64=2**64 - 1,
        f_int32=-7,
        f_fixed64=2**63,
        f_fixed32=2**32 - 1,
        f_bool=True,
        f_string='caf\u00e9 \U0001f600 "q" \\ \n\t\x01\x7f',
        f_bytes=b"\x00\xff\xfe",
        f_uint32=2**32 - 1,
        f_sfixed32=-(2**31),
        f_sfixed64=-1,
        f_sint32=-(2**31),
        f_sint64=2**63 - 1,
        kind=1,
        numbers=[1, -1, 2**31 - 1],
        words=["a", "", "\u00fc"],
        kinds=[0, 2, 1],
        by_name={"zeta": 1, "alpha": -2, "\u00e9": 3, "B": 4},
        by_flag={True: "yes", False: "no"},
        by_big={2**64 - 1: 1.5, 1: 0.25},
        pick_number=42,
        doubles=[1e16, 1e-5, 0.0001, 123456789.125, 1e22, 5e-324, 1.7976931348623157e308, -0.0, 100.0],
    )
    every.inner.label = "in"
    every.inner.at.FromJsonString("2026-12-01T10:00:00.120Z")
    every.inners.add(label="x")
    every.inners.add()
    every.by_number[-3].label = "minus three"
    every.by_number[5].SetInParent()
    every.at.FromJsonString("0001-01-01T00:00:00.000000001Z")
    return bytes(every.SerializeToString())


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _tag(number: int, wire: int) -> bytes:
    return _varint(number << 3 | wire)


def _field(number: int, body: bytes) -> bytes:
    """A length-delimited field."""
    return _tag(number, 2) + _varint(len(body)) + body


@dataclass(frozen=True)
class Vector:
    case: str
    schema_id: int
    payload: bytes
    name: str | None
    json: str | None
    reason: str | None = None
    detail: str | None = None


#: All's JSON with no field set, the tail a test changes one field of.
_EMPTY_ALL = (
    '{"f_double": 0.0, "f_float": 0.0, "f_int64": 0, "f_uint64": 0, "f_int32": 0, "f_fixed64": 0, '
    '"f_fixed32": 0, "f_bool": false, "f_string": "", "f_bytes": "", "f_uint32": 0, "f_sfixed32": 0, '
    '"f_sfixed64": 0, "f_sint32": 0, "f_sint64": 0, "kind": "KIND_NONE", "inner": null, "inners": [], '
    '"numbers": [], "words": [], "kinds": [], "by_name": {}, "by_number": {}, "by_flag": {}, '
    '"by_big": {}, "at": null, "pick_text": null, "pick_number": null, "doubles": []}'
)


def _all(**changed: str) -> str:
    """_EMPTY_ALL with some fields' JSON values replaced."""
    text = _EMPTY_ALL
    for field, value in changed.items():
        start = text.index(f'"{field}": ') + len(field) + 4
        end = min(i for i in (text.find(", ", start), text.find("}", start)) if i >= 0)
        if value.startswith(("[", "{")) and text[start] in "[{":
            end = text.index("]" if text[start] == "[" else "}", start) + 1
        text = text[:start] + value + text[end:]
    return text


_CORRUPT = (
    "the payload does not decode with writer schema id 7: Error parsing message with type 'vectors.All': "
)


def vectors() -> list[Vector]:
    full = _full()
    return [
        Vector(
            "every field",
            ALL,
            b"\x00" + full,
            "vectors.All",
            '{"f_double": -2.5, "f_float": 0.10000000149011612, "f_int64": -9223372036854775808, '
            '"f_uint64": 18446744073709551615, "f_int32": -7, "f_fixed64": 9223372036854775808, '
            '"f_fixed32": 4294967295, "f_bool": true, '
            '"f_string": "caf\\u00e9 \\ud83d\\ude00 \\"q\\" \\\\ \\n\\t\\u0001\\u007f", '
            '"f_bytes": "AP/+", "f_uint32": 4294967295, "f_sfixed32": -2147483648, "f_sfixed64": -1, '
            '"f_sint32": -2147483648, "f_sint64": 9223372036854775807, "kind": "KIND_BIG", '
            '"inner": {"label": "in", "at": "2026-12-01T10:00:00.120Z"}, '
            '"inners": [{"label": "x", "at": null}, {"label": "", "at": null}], '
            '"numbers": [1, -1, 2147483647], "words": ["a", "", "\\u00fc"], '
            '"kinds": ["KIND_NONE", "KIND_SMALL", "KIND_BIG"], '
            '"by_name": {"B": 4, "alpha": -2, "zeta": 1, "\\u00e9": 3}, '
            '"by_number": {"-3": {"label": "minus three", "at": null}, "5": {"label": "", "at": null}}, '
            '"by_flag": {"False": "no", "True": "yes"}, '
            '"by_big": {"1": 0.25, "18446744073709551615": 1.5}, '
            '"at": "0001-01-01T00:00:00.000000001Z", "pick_text": null, "pick_number": 42, '
            '"doubles": [1e+16, 1e-05, 0.0001, 123456789.125, 1e+22, 5e-324, 1.7976931348623157e+308, '
            "-0.0, 100.0]}",
        ),
        Vector("no field set", ALL, b"\x00", "vectors.All", _EMPTY_ALL),
        Vector(
            "the second message, by a one-index list",
            ALL,
            b"\x02\x02" + message("vectors.Small", n=-1),
            "vectors.Small",
            '{"n": -1}',
        ),
        Vector(
            "a nested message by its index path",
            ALL,
            b"\x04\x00\x00" + message("vectors.All.Inner", label="deep"),
            "vectors.All.Inner",
            '{"label": "deep", "at": null}',
        ),
        Vector(
            "negative int32: a ten-byte varint",
            ALL,
            b"\x00" + _tag(5, 0) + b"\xff" * 9 + b"\x01",
            "vectors.All",
            _all(f_int32="-1"),
        ),
        Vector(
            "a varint's tenth byte past 64 bits: dropped, as both read it",
            ALL,
            b"\x00" + _tag(3, 0) + b"\xff" * 9 + b"\x7f",
            "vectors.All",
            _all(f_int64="-1"),
        ),
        Vector(
            "an int32 field given a 64-bit number: its low 32 bits",
            ALL,
            b"\x00" + _tag(5, 0) + _varint(2**32 + 5),
            "vectors.All",
            _all(f_int32="5"),
        ),
        Vector(
            "NaN and infinities: quoted as Spark's JSON reader spells them (it reads no 'nan' or 'inf')",
            ALL,
            b"\x00"
            + _tag(1, 1)
            + struct.pack("<d", float("nan"))
            + _tag(2, 5)
            + struct.pack("<f", float("-inf"))
            + _tag(29, 2)
            + _varint(16)
            + struct.pack("<dd", float("inf"), 1.5),
            "vectors.All",
            _all(f_double='"NaN"', f_float='"-Infinity"', doubles='["Infinity", 1.5]'),
        ),
        Vector(
            "unknown fields are skipped",
            ALL,
            b"\x00" + _tag(99, 0) + _varint(5) + _tag(100, 2) + b"\x02ab" + _tag(5, 0) + b"\x03",
            "vectors.All",
            _all(f_int32="3"),
        ),
        Vector(
            "a field of another wire type is an unknown field",
            ALL,
            b"\x00" + _tag(9, 0) + _varint(1) + _tag(3, 2) + b"\x01x",
            "vectors.All",
            _EMPTY_ALL,
        ),
        Vector(
            "packed and unpacked repeated numbers both read",
            ALL,
            b"\x00" + _tag(19, 2) + b"\x02\x01\x02" + _tag(19, 0) + b"\x03",
            "vectors.All",
            _all(numbers="[1, 2, 3]"),
        ),
        Vector(
            "an open enum's unknown number: the number as text",
            ALL,
            b"\x00" + _tag(16, 0) + _varint(7),
            "vectors.All",
            _all(kind='"7"'),
        ),
        Vector(
            "a map key given twice: the last value",
            ALL,
            b"\x00" + _tag(22, 2) + b"\x05\x0a\x01k\x10\x01" + _tag(22, 2) + b"\x05\x0a\x01k\x10\x02",
            "vectors.All",
            _all(by_name='{"k": 2}'),
        ),
        Vector(
            "oneof: the last member set wins",
            ALL,
            b"\x00" + _tag(27, 2) + b"\x01t" + _tag(28, 0) + b"\x09",
            "vectors.All",
            _all(pick_number="9"),
        ),
        Vector(
            "proto2: unset fields are null, a closed enum's unknown number is an unknown field",
            LEGACY,
            b"\x00" + _tag(2, 0) + _varint(-5) + _tag(3, 0) + _varint(9),
            "legacy.Legacy",
            '{"s": null, "n": -5, "level": null}',
        ),
        Vector(
            "proto2: a closed enum's known number",
            LEGACY,
            b"\x00" + _tag(3, 0) + _varint(2) + _tag(1, 2) + b"\x00",
            "legacy.Legacy",
            '{"s": "", "n": null, "level": "HIGH"}',
        ),
        # What is not decoded: a dead letter each, with the reason and detail of the Python decoder.
        Vector(
            "empty payload",
            ALL,
            b"",
            None,
            None,
            "unknown_message_index",
            "schema id 7: the message-index list is cut short",
        ),
        Vector(
            "an index list naming no message",
            ALL,
            b"\x02\x0a",
            None,
            None,
            "unknown_message_index",
            "schema id 7: message index [5] names no message of 'registry-schema-7.proto'",
        ),
        Vector(
            "a nested index naming no message",
            ALL,
            b"\x04\x02\x00",
            None,
            None,
            "unknown_message_index",
            "schema id 7: message index [1, 0] names no message of 'registry-schema-7.proto'",
        ),
        Vector(
            "a negative index",
            ALL,
            b"\x02\x01",
            None,
            None,
            "unknown_message_index",
            "schema id 7: message index [-1] names no message of 'registry-schema-7.proto'",
        ),
        Vector(
            "an index count past any path",
            ALL,
            b"\x40" + b"\x00" * 32,
            None,
            None,
            "unknown_message_index",
            "schema id 7: message-index count 32 is not a path of message types",
        ),
        Vector(
            "an index list cut short",
            ALL,
            b"\x04\x00",
            None,
            None,
            "unknown_message_index",
            "schema id 7: the message-index list is cut short",
        ),
        Vector(
            "an index varint that never ends",
            ALL,
            b"\x02" + b"\xff" * 12,
            None,
            None,
            "unknown_message_index",
            "schema id 7: the message-index list is cut short",
        ),
        Vector(
            "truncated message",
            ALL,
            b"\x00" + full[:-1],
            None,
            None,
            "undecodable",
            _CORRUPT + "Wire format was corrupt",
        ),
        Vector(
            "a length past the end",
            ALL,
            b"\x00" + _tag(9, 2) + b"\x10ab",
            None,
            None,
            "undecodable",
            _CORRUPT + "Wire format was corrupt",
        ),
        Vector(
            "a varint of eleven bytes",
            ALL,
            b"\x00" + _tag(3, 0) + b"\xff" * 10 + b"\x01",
            None,
            None,
            "undecodable",
            _CORRUPT + "Wire format was corrupt",
        ),
        Vector(
            "wire type 7 does not exist",
            ALL,
            b"\x00" + _tag(3, 7) + b"\x01",
            None,
            None,
            "undecodable",
            _CORRUPT + "Wire format was corrupt",
        ),
        Vector(
            "a group that never ends",
            ALL,
            b"\x00" + _tag(40, 3) + _tag(1, 0) + b"\x01",
            None,
            None,
            "undecodable",
            _CORRUPT + "Wire format was corrupt",
        ),
        Vector(
            "field number zero",
            ALL,
            b"\x00\x00\x01",
            None,
            None,
            "undecodable",
            _CORRUPT + "Wire format was corrupt",
        ),
        Vector(
            "proto3: a string that is not UTF-8",
            ALL,
            b"\x00" + _tag(9, 2) + b"\x03a\xffb",
            None,
            None,
            "undecodable",
            _CORRUPT + "String field had bad UTF-8",
        ),
        Vector(
            "proto2: a string that is not UTF-8",
            LEGACY,
            b"\x00" + _tag(1, 2) + b"\x03a\xffb",
            None,
            None,
            "undecodable",
            "the payload does not decode with writer schema id 8: "
            "string field legacy.Legacy.s is not valid UTF-8",
        ),
        Vector(
            "a Timestamp past year 9999",
            ALL,
            b"\x00" + _field(26, _tag(1, 0) + _varint(253402300800)),
            None,
            None,
            "undecodable",
            "the payload does not decode with writer schema id 7: Timestamp is not valid: Seconds "
            "253402300800 must be in range [-62135596800, 253402300799].",
        ),
        Vector(
            "a Timestamp with negative nanos",
            ALL,
            b"\x00" + _field(26, _tag(2, 0) + _varint(-1)),
            None,
            None,
            "undecodable",
            "the payload does not decode with writer schema id 7: Timestamp is not valid: Nanos -1 "
            "must be in a range [0, 999999].",
        ),
    ]


def random_doubles(seed: int, count: int) -> list[float]:
    """Doubles from random bit patterns (NaN aside), and short decimals: their repr is what differs
    most between Java's and Python's shortest-digit printing."""
    import random

    rnd = random.Random(seed)
    out: list[float] = []
    while len(out) < count:
        value = struct.unpack("<d", rnd.getrandbits(64).to_bytes(8, "little"))[0]
        if value == value:
            out.append(value)
        out.append(round(rnd.uniform(-1e6, 1e6), rnd.randint(0, 6)))
        out.append(rnd.uniform(0, 1) * 10 ** rnd.randint(-30, 30))
    return out[:count]


def doubles_payload(values: list[float]) -> bytes:
    """An All with ``values`` as its packed ``doubles``."""
    body = struct.pack(f"<{len(values)}d", *values)
    return b"\x00" + _tag(29, 2) + _varint(len(body)) + body


def random_messages(seed: int, count: int) -> list[bytes]:
    """Payloads (index ``[0]``, then an All) of random values in every field: doubles and floats
    from random bits (NaN, infinities, -0.0, subnormals among them), each integer type's whole range,
    text from the whole of Unicode but surrogates, enum numbers the file names and does not, maps
    of random keys (the same key on the wire twice), Timestamps across their range, a random oneof
    member or none, fields left unset."""
    import random

    rnd = random.Random(seed)
    kinds = _classes()

    def bits(width: int, signed: bool) -> int:
        value = rnd.choice(
            [0, 1, (1 << width) - 1, rnd.getrandbits(width), rnd.getrandbits(rnd.randint(1, width))]
        )
        return value - (1 << width) if signed and value >= 1 << (width - 1) else value

    def double() -> float:
        special = [0.0, -0.0, float("nan"), float("inf"), float("-inf"), 5e-324, 1.7976931348623157e308]
        if rnd.random() < 0.2:
            return rnd.choice(special)
        return float(struct.unpack("<d", rnd.getrandbits(64).to_bytes(8, "little"))[0])

    def single() -> float:
        return float(struct.unpack("<f", rnd.getrandbits(32).to_bytes(4, "little"))[0])

    def text() -> str:
        def char() -> str:
            code = rnd.choice(
                [rnd.randint(0, 0x7F), rnd.randint(0x80, 0xFFFF), rnd.randint(0x10000, 0x10FFFF)]
            )
            return chr(code) if not 0xD800 <= code <= 0xDFFF else "x"

        return "".join(char() for _ in range(rnd.randint(0, 12)))

    def stamp(message: Any) -> None:
        message.seconds = rnd.randint(-62135596800, 253402300799)
        message.nanos = rnd.choice([0, rnd.randint(0, 999) * 1_000_000, rnd.randint(0, 999_999_999)])

    out = []
    for _ in range(count):
        every = kinds["vectors.All"]()
        maybe = lambda: rnd.random() < 0.7  # noqa: E731
        if maybe():
            every.f_double = double()
        if maybe():
            every.f_float = single()
        for name, width, signed in [
            ("f_int64", 64, True), ("f_uint64", 64, False), ("f_int32", 32, True), ("f_fixed64", 64, False),
            ("f_fixed32", 32, False), ("f_uint32", 32, False), ("f_sfixed32", 32, True),
            ("f_sfixed64", 64, True), ("f_sint32", 32, True), ("f_sint64", 64, True),
        ]:  # fmt: skip
            if maybe():
                setattr(every, name, bits(width, signed))
        every.f_bool = rnd.random() < 0.5
        if maybe():
            every.f_string = text()
        if maybe():
            every.f_bytes = rnd.randbytes(rnd.randint(0, 9))
        every.kind = rnd.randint(0, 4)  # 3 and 4: numbers the file has no name for
        if maybe():
            every.inner.label = text()
            if maybe():
                stamp(every.inner.at)
        for _ in range(rnd.randint(0, 3)):
            item = every.inners.add(label=text())
            if maybe():
                stamp(item.at)
        every.numbers.extend(bits(32, True) for _ in range(rnd.randint(0, 4)))
        every.words.extend(text() for _ in range(rnd.randint(0, 3)))
        every.kinds.extend(rnd.randint(0, 4) for _ in range(rnd.randint(0, 3)))
        for _ in range(rnd.randint(0, 4)):
            every.by_name[text()] = bits(64, True)
            every.by_flag[rnd.random() < 0.5] = text()
            every.by_big[bits(64, False)] = double()
            every.by_number[bits(32, True)].label = text()
        if maybe():
            stamp(every.at)
        choice = rnd.randint(0, 2)
        if choice == 1:
            every.pick_text = text()
        elif choice == 2:
            every.pick_number = bits(64, True)
        every.doubles.extend(double() for _ in range(rnd.randint(0, 5)))
        payload = bytes(every.SerializeToString())
        if every.by_name and rnd.random() < 0.3:
            # A map key given twice: the wire's later entry wins.
            payload += _field(22, _field(1, b"dup") + _tag(2, 0) + _varint(1)) + _field(
                22, _field(1, b"dup") + _tag(2, 0) + _varint(2)
            )
        out.append(b"\x00" + payload)
    return out
