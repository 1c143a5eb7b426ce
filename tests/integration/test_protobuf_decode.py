"""kafkalake_protobuf_decode (kafkalake's JVM extension) gives the Python decoder's results on the
shared vectors (tests/unit/kafka/protobuf_vectors.py): the JSON byte for byte, each dead letter's
reason and detail; and protobuf_parser.decoded() gives the same whichever way it runs (the JVM, or
the pandas UDF of a session without the extension).
"""

from __future__ import annotations

import struct
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
from unit.kafka.protobuf_vectors import (
    ALL,
    LEGACY,
    doubles_payload,
    random_doubles,
    random_messages,
    schemas,
    vectors,
)

from kafkalake.config.parsed import ParsedConfig
from kafkalake.kafka import protobuf_schema
from kafkalake.kafka.schema_registry import RegisteredSchema
from kafkalake.spark import extension, json_functions
from kafkalake.spark.parse_columns import REASON
from kafkalake.spark.protobuf_parser import (
    ProtobufTopicParser,
    decoded,
    index_prefix,
    jvm_decodes,
    message_type_names,
    type_name,
    values_of,
)
from kafkalake.spark.registry_parser import nullable_everywhere

from .helpers import make_topic

# The project's own generated code is tested here: compiled, as Spark's defaults have it (conftest).
pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("compiled")]

#: A known id whose writer is no Protobuf schema, one whose schema could not be resolved.
AVRO, UNRESOLVED = 9, 10


def _writers() -> dict[int, RegisteredSchema | None]:
    return {
        ALL: RegisteredSchema(ALL, "", "PROTOBUF", descriptors=schemas()[ALL]),
        LEGACY: RegisteredSchema(LEGACY, "", "PROTOBUF", descriptors=schemas()[LEGACY]),
        AVRO: RegisteredSchema(AVRO, "{}", "AVRO"),
        UNRESOLVED: RegisteredSchema(UNRESOLVED, "x", "PROTOBUF", problem="protoc: syntax error"),
    }


@pytest.fixture
def with_extension(spark) -> None:
    if not extension.loaded(spark):
        pytest.skip("this session runs without kafkalake's JVM extension (KAFKALAKE_JVM_EXTENSION=off)")


def _decode_both(spark, rows: list[tuple[int | None, bytes | None]]) -> tuple[list[Any], list[Any]]:
    """decoded() of each (schema id, payload) in the JVM and in the Python UDF, in row order."""
    from pyspark.sql import functions as F

    frame = spark.createDataFrame(
        [(i, sid, payload) for i, (sid, payload) in enumerate(rows)], "n int, sid int, payload binary"
    )
    writers = _writers()
    out = []
    for use in (True, False):
        result = decoded(writers, F.col("sid"), F.col("payload"), use_extension=use)
        names = message_type_names(writers, F.col("sid"), F.col("payload"), use_extension=use)
        got = frame.select("n", result.alias("r"), names.alias("t")).orderBy("n").collect()
        out.append([(*tuple(r["r"]), r["t"]) for r in got])
    return out[0], out[1]


def test_the_jvm_decoder_gives_each_vector_s_result(spark, with_extension):
    cases = vectors()
    rows: list[tuple[int | None, bytes | None]] = [(v.schema_id, v.payload) for v in cases]
    rows += [(None, b"\x00"), (ALL, None), (12345, b"\x00"), (AVRO, b"\x00"), (UNRESOLVED, b"\x00")]
    jvm, python = _decode_both(spark, rows)
    for vector, got in zip(cases, jvm, strict=False):
        assert got[:4] == (vector.name, vector.json, vector.reason, vector.detail), vector.case
    assert jvm[len(cases) :] == [
        (None,) * 5,
        (None,) * 5,
        (None,) * 5,
        (None, None, "undecodable", f"schema id {AVRO} is a AVRO schema, not Protobuf", None),
        (None, None, "undecodable", "the writer schema cannot be read: protoc: syntax error", None),
    ]
    # Every row as the Python UDF gives it, the message type names too (a name wherever the indexes
    # name a type, the message read or not).
    assert jvm == python
    assert [t for *_, t in jvm[:3]] == ["vectors.All", "vectors.All", "vectors.Small"]


def test_random_doubles_print_as_python_s_repr(spark, with_extension):
    payloads = [doubles_payload(random_doubles(seed, 200)) for seed in range(20)]
    jvm, python = _decode_both(spark, [(ALL, p) for p in payloads])
    assert [r[1] for r in jvm] == [r[1] for r in python]
    assert all(r[1] is not None for r in jvm)


def test_a_well_known_type_the_jvm_does_not_write_goes_to_python(spark, with_extension):
    from google.protobuf import descriptor_pb2

    file = descriptor_pb2.FileDescriptorProto(
        name="w.proto", package="w", syntax="proto3", dependency=["google/protobuf/duration.proto"]
    )
    file.message_type.add(name="W").field.add(
        name="d", number=1, type=11, label=1, type_name=".google.protobuf.Duration"
    )
    import base64

    text = base64.b64encode(file.SerializeToString()).decode()
    with_duration = RegisteredSchema(3, text, "PROTOBUF")
    with_duration = RegisteredSchema(
        3, text, "PROTOBUF", descriptors=protobuf_schema.resolve(with_duration, lambda r: None)
    )
    assert jvm_decodes(_writers(), use_extension=True)
    assert not jvm_decodes({**_writers(), 3: with_duration}, use_extension=True)
    assert not jvm_decodes(_writers(), use_extension=False)


def _straight_and_from_json(spark, table: dict[str, Any], rows: list[tuple[int, bytes]]) -> list[Any]:
    """Each record's decoded() given the table's type (``s``) and not (``t``), and as JSON text
    (Spark's to_json, microseconds written out) ``values_of`` the first (``v``), from_json of the
    second's JSON (``j``), and the first's values (``sv``); in order. Compared as text: a Timestamp
    of year 1 is no Python datetime, maps have no equality in Spark, and NaN none in Python."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    table_type = StructType.fromJson(table)
    frame = spark.createDataFrame(
        [(n, sid, payload) for n, (sid, payload) in enumerate(rows)], "n int, sid int, payload binary"
    )
    writers = _writers()
    straight = decoded(writers, F.col("sid"), F.col("payload"), use_extension=True, table_type=table_type)
    text = decoded(writers, F.col("sid"), F.col("payload"), use_extension=True)
    micros = {"timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"}
    got = frame.select(
        "n",
        straight.dropFields("values").alias("s"),
        (straight["values"].isNotNull()).alias("has_values"),
        text.alias("t"),
        F.to_json(values_of(straight, table_type, direct=True), micros).alias("v"),
        F.to_json(json_functions.from_json(text["json"], table_type), micros).alias("j"),
        F.to_json(straight["values"], micros).alias("sv"),
    )
    return got.orderBy("n").collect()


def test_values_decoded_straight_into_the_table_type_are_from_json_s_of_the_json(spark, with_extension):
    """Every vector's message type decoded straight into its table's type (spark_type's): the same
    values as from_json of the JSON the decoder writes, value for value (NaN and infinities, both
    ends of Timestamp's range, unsigned 64-bit numbers, maps by key, oneof, proto2's absent fields),
    the same dead letters, and no JSON written for them."""
    by_type: dict[tuple[int, str], list[bytes]] = {}
    for v in vectors():
        if v.name is not None:
            by_type.setdefault((v.schema_id, v.name), []).append(v.payload)
    dead = [(v.schema_id, v.payload) for v in vectors() if v.reason is not None]
    doubles = [(ALL, doubles_payload(random_doubles(seed, 50))) for seed in range(5)]
    assert {name for _, name in by_type} >= {"vectors.All", "vectors.Small", "legacy.Legacy"}
    for (sid, name), payloads in sorted(by_type.items()):
        kind = protobuf_schema.message_type_by_name(schemas()[sid], name)
        table = nullable_everywhere(protobuf_schema.spark_type(kind))
        extra = doubles if name == "vectors.All" else []
        rows = [(sid, p) for p in payloads] + extra + dead
        got = _straight_and_from_json(spark, table, rows)
        for row in got:
            straight, text = row["s"], row["t"]
            case = (name, rows[row["n"]][1])
            assert (straight["name"], straight["reason"], straight["detail"]) == (
                text["name"],
                text["reason"],
                text["detail"],
            ), case
            if text["json"] is None:
                assert not row["has_values"] and row["v"] is None, case
                continue
            if text["name"] != name:
                continue  # another message type of the same file, as a dead vector's may be
            assert straight["json"] is None and row["has_values"], case
            assert row["v"] == row["j"] == row["sv"], case


def test_random_messages_decoded_straight_are_from_json_s_of_their_json(spark, with_extension):
    """Random Alls (random_messages: every field, random bits and extremes, unknown enum numbers, a
    map key twice): straight into the table's type, each record's values are from_json's of its JSON."""
    kind = protobuf_schema.message_type_by_name(schemas()[ALL], "vectors.All")
    table = nullable_everywhere(protobuf_schema.spark_type(kind))
    payloads = [p for seed in range(4) for p in random_messages(seed, 100)]
    got = _straight_and_from_json(spark, table, [(ALL, p) for p in payloads])
    assert len(got) == len(payloads)
    for row in got:
        case = payloads[row["n"]]
        assert row["t"]["reason"] is None and row["s"]["reason"] is None, (case, row["t"]["detail"])
        assert row["s"]["json"] is None and row["has_values"], case
        assert row["v"] == row["j"] == row["sv"], case
    assert sum('"dup":2' in row["v"] for row in got) > 10
    assert sum('"NaN"' in row["v"] for row in got) > 10


def test_a_message_type_that_does_not_fit_the_table_keeps_the_json(spark, with_extension):
    """A field whose column has another type, a field without a column: those records keep the JSON
    (from_json reads it into the table's type); a table with columns the message type lacks is
    decoded straight, the other columns null."""
    kind = protobuf_schema.message_type_by_name(schemas()[ALL], "vectors.All")
    table = nullable_everywhere(protobuf_schema.spark_type(kind))
    every = [v.payload for v in vectors() if v.name == "vectors.All" and v.reason is None]
    retyped = {
        **table,
        "fields": [{**f, "type": "string"} if f["name"] == "f_int32" else f for f in table["fields"]],
    }
    narrower = {**table, "fields": [f for f in table["fields"] if f["name"] != "f_bytes"]}
    wider = {
        **table,
        "fields": [*table["fields"], {"name": "later", "type": "long", "nullable": True, "metadata": {}}],
    }
    for shape, straight in ((retyped, False), (narrower, False), (wider, True)):
        got = _straight_and_from_json(spark, shape, [(ALL, p) for p in every])
        for row in got:
            assert (row["s"]["json"] is None) == straight == row["has_values"], shape
            assert row["v"] == row["j"], shape
    # to_json leaves a null out: the later column is null in every record, f_int32 set in some.
    assert not any('"later"' in row["v"] for row in got)
    assert any('"f_int32"' in row["v"] for row in got)


def test_the_index_prefix_read_in_sql_names_the_type_the_decoder_names(spark):
    """ensure_schema's one pass: where index_prefix gives bytes, type_name of them is the decoder's
    name for the whole record; where it gives none, a varint of the indexes is longer than a byte
    (the decoder's own pass names those) or there is no payload."""
    from pyspark.sql import functions as F

    writers = _writers()
    odd = [
        b"\x02\x02\x08\x01",  # [1]
        b"\x04\x00\x00",  # [0, 0]
        b"\x02\x80\x01",  # [64]: two bytes, the decoder's pass
        b"\x80\x01" + b"\x00" * 64,  # a count of 64 in two bytes
        b"\x01\x00",  # a negative count
        b"\x06\x00",  # cut short
        b"\x20" + b"\x00" * 16,  # 16 indexes of 0
        b"\x7e" + b"\x00" * 63,  # 63 indexes, the most one byte holds
        b"",
        None,
    ]
    payloads = [v.payload for v in vectors() if v.schema_id == ALL] + odd
    frame = spark.createDataFrame(
        [(n, ALL, p) for n, p in enumerate(payloads)], "n int, sid int, payload binary"
    )
    for use in (True, False) if extension.loaded(spark) else (False,):
        names = message_type_names(writers, F.col("sid"), F.col("payload"), use_extension=use)
        got = (
            frame.select("n", index_prefix(F.col("payload")).alias("p"), names.alias("t"))
            .orderBy("n")
            .collect()
        )
        for row in got:
            payload = payloads[row["n"]]
            if row["p"] is None:
                assert not payload or any(b >= 0x80 for b in payload[:2]), payload
            else:
                assert type_name(writers[ALL], bytes(row["p"])) == row["t"], payload
        # The odd ones: [1] and [0, 0] in one byte each, [64] and the count of 64 not; the rest
        # are read, and name no type.
        unread = [False, False, True, True, False, False, False, False, True, True]
        assert [r["p"] is None for r in got[-len(odd) :]] == unread
        assert [r["t"] for r in got[-len(odd) :]] == ["vectors.Small", "vectors.All.Inner"] + [None] * 8
        assert all(r["t"] is not None for r in got[: -len(odd)] if payloads[r["n"]][:1] == b"\x00")


BRONZE = (
    "key binary, value binary, topic string, partition int, offset long, kafka_timestamp timestamp, "
    "kafka_timestamp_type int, headers array<struct<key:string,value:binary>>, ingested_at timestamp"
)


def test_the_parsed_frame_decodes_and_reads_each_record_once(spark, tmp_path):
    """One decode and one JSON read a record, whatever the table's width: written inline in each
    column, the optimizer gave every column a from_json of its own (pruned to that column), and the
    parsed write ran at ~0.5x JSON's speed (bench --format protobuf)."""
    topic = replace(make_topic(tmp_path, "it-plan", ParsedConfig()), format="protobuf", registry_conn_id="r")
    parser = ProtobufTopicParser(spark, topic)
    parser._writers = _writers()
    table = nullable_everywhere(protobuf_schema.spark_type(protobuf_schema.message_type(schemas()[ALL], [0])))
    parser.schema = table
    good = [v for v in vectors() if v.schema_id == ALL and v.reason is None and v.name == "vectors.All"]
    now = datetime(2026, 12, 2, tzinfo=UTC)
    rows = [
        (b"k", b"\x00" + struct.pack(">I", ALL) + v.payload, "it-plan", 0, n, now, 0, [], now)
        for n, v in enumerate(good)
    ]
    frame = parser._parsed_frame(spark.createDataFrame(rows, BRONZE))
    # Every column of the plan printed (25 by default, the rest "... 8 more fields").
    spark.conf.set("spark.sql.debug.maxToStringFields", "10000")
    try:
        plan = frame._jdf.queryExecution().optimizedPlan().toString()
    finally:
        spark.conf.unset("spark.sql.debug.maxToStringFields")
    if extension.loaded(spark):
        reads, decodes = plan.count("kafkalakefromjson("), plan.count("kafkalake_protobuf_decode(")
    else:
        reads, decodes = plan.count("from_json("), 1
    assert len(table["fields"]) > 3 and (reads, decodes) == (1, 1), plan
    # Counted in Spark: a vector's Timestamp of year 1 or 9999 is no Python datetime in every zone.
    assert frame.where(frame[REASON].isNull()).count() == len(good) > 0


def test_ensure_schema_follows_types_named_by_one_byte_and_by_longer_indexes(spark, tmp_path):
    """Both of ensure_schema's ways: [0] read in its one pass, a Small whose index 1 is written in
    two varint bytes (82 00, valid if not minimal) named by the decoder's pass on that record."""
    topic = replace(make_topic(tmp_path, "it-types", ParsedConfig()), format="protobuf", registry_conn_id="r")
    parser = ProtobufTopicParser(spark, topic)
    parser._writers = _writers()
    small = next(v.payload for v in vectors() if v.name == "vectors.Small")
    assert small[:2] == b"\x02\x02"
    every = next(v.payload for v in vectors() if v.name == "vectors.All" and v.reason is None)
    now = datetime(2026, 12, 2, tzinfo=UTC)

    def bronze(payloads: list[bytes]) -> Any:
        frame = b"\x00" + struct.pack(">I", ALL)
        rows = [(b"k", frame + p, "it-types", 0, n, now, 0, [], now) for n, p in enumerate(payloads)]
        return spark.createDataFrame(rows, BRONZE)

    parser.ensure_schema(bronze([b"\x02\x82\x00" + small[2:]]), "batch 0")
    assert parser._types == {(ALL, "vectors.Small")}
    assert [f["name"] for f in parser.schema["fields"]] == ["n"]
    parser.ensure_schema(bronze([every, b"\x02\x82\x00" + small[2:], small]), "batch 1")
    assert parser._types == {(ALL, "vectors.Small"), (ALL, "vectors.All")}
    assert len(parser.schema["fields"]) > 3
