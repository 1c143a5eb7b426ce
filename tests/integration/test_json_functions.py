"""kafkalake's JSON functions (built from ``kafkalake/spark/jvm`` at set-up) give Spark's results.

``kafkalake_utf8_text`` must give ``try_validate_utf8``'s answer for any bytes.

``kafkalake_from_json`` must equal ``from_json`` for every record, whatever its bytes, and so must
``kafkalake_from_json_keyed``'s value; its key count must be ``size(json_object_keys(...))``
wherever both count, and every record the parse path's clean-record test took with Spark's count
must pass it with this one: the parse path relies on them for what lands where. Each case compares
them in one Spark job on a corpus of odd bytes (the ones where a byte-based and a reader-based JSON
parser could differ: byte-order marks, zero bytes, UTF-16, invalid or overlong UTF-8, surrogates,
control characters) and on random bytes.

Each runs both ways (``implementation``): with the extension, and with Spark's built-ins that replace
it when a job runs without it (``KAFKALAKE_JVM_EXTENSION=off``); one test compares the two record for
record.
"""

from __future__ import annotations

import codecs
import random
from typing import Any

import pytest
from pyspark.sql.types import ArrayType, DataType, MapType, StringType, StructType

from kafkalake.spark import extension, parse_columns
from kafkalake.spark.json_functions import TRAILING_KEYS, from_json, from_json_keyed, utf8_text

from .test_parsing import SHORTCUT_SCHEMA, SHORTCUT_VALUES

# The project's own generated code is tested here: compiled, as Spark's defaults have it (conftest).
pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("compiled")]

_OBJECT = b'{"s": "a", "n": 1}'
ODD_VALUES: list[bytes | None] = [
    *SHORTCUT_VALUES,
    codecs.BOM_UTF8 + _OBJECT,
    codecs.BOM_UTF16_LE + _OBJECT.decode().encode("utf-16-le"),
    codecs.BOM_UTF16_BE + _OBJECT.decode().encode("utf-16-be"),
    _OBJECT.decode().encode("utf-16-le"),
    _OBJECT.decode().encode("utf-16-be"),
    _OBJECT.decode().encode("utf-32-le"),
    b"{\x00}\x00",
    b'{"s"\x00: 1}',
    b'\x00{"s": "a"}',
    b'{"s": "a"}\x00',
    # More after the object (keys is TRAILING_KEYS), and what is no content (whitespace, NULs).
    b'{"s": "a"} {"s": "b"}',
    b'{"s": "a"}[1]',
    b'{"s": "a"}x',
    b'{"s": "a"}\x00\x00 \r\n',
    b'{"s": "caf\xc3\xa9"}',
    b'{"s": "caf\xe9"}',
    b'{"s": "\xc0\xaf"}',
    b'{"s": "\xed\xa0\x80"}',
    b'{"s": "\xf0\x9f\x98\x80"}',
    b'{"s": "\\ud800"}',
    b'{"s": "\\ud83d\\ude00", "n": 2}',
    b'{"s": "\x01\x1f"}',
    b'{"s": "\xe2\x80\xa8"}',
    b'{"\xc3\xa9": 1, "s": "a"}',
    b'  \n{"s": "a"}',
    b'{"s": "' + b"x" * 70_000 + b'"}',
    b'{"n": 1' + b', "n": 1' * 50 + b"}",
    b'{"o": {"q": {"deep": [[[[1]]]]}}, "s": "a"}',
    b'{"_corrupt_record": "c", "s": "a"}',
    b'{"m": {"k": "v", "k2": [1]}}',
    b"[1, 2, 3]",
    b'["a", {"b": 1}]',
    b"null",
    b"true",
    b"1",
    b"{",
    b'{"s": "a"',
    b"\xef\xbb",
    b"\xfe",
    b"\xff",
    b"\x00",
    b"\x00\x00",
]
SCHEMAS: dict[str, DataType] = {
    "struct": StructType.fromJson(SHORTCUT_SCHEMA),
    "struct with Spark's corrupt-record column": StructType.fromJson(
        {
            "type": "struct",
            "fields": [
                {"name": "s", "type": "string", "nullable": True, "metadata": {}},
                {"name": "_corrupt_record", "type": "string", "nullable": True, "metadata": {}},
            ],
        }
    ),
    "map of texts": MapType(StringType(), StringType()),
    "array of texts": ArrayType(StringType()),
}


@pytest.fixture(params=[True, False], ids=["extension", "built-ins"])
def use_extension(request, spark) -> bool:
    """Which implementation of the JSON functions a test runs: kafkalake's JVM extension, or Spark's
    built-in functions (a job with ``KAFKALAKE_JVM_EXTENSION=off``)."""
    if request.param and not extension.loaded(spark):
        pytest.skip("this session runs without kafkalake's JVM extension (KAFKALAKE_JVM_EXTENSION=off)")
    return bool(request.param)


@pytest.fixture
def with_extension(spark) -> None:
    if not extension.loaded(spark):
        pytest.skip("this session runs without kafkalake's JVM extension (KAFKALAKE_JVM_EXTENSION=off)")


def _random_values(seed: int, count: int) -> list[bytes]:
    """JSON objects with random bytes spliced in, and plain random bytes."""
    rnd = random.Random(seed)
    base = [v for v in ODD_VALUES if v]
    out = []
    for _ in range(count):
        value = bytearray(rnd.choice(base))
        for _ in range(rnd.randint(1, 3)):
            at = rnd.randint(0, len(value))
            value[at:at] = bytes(rnd.getrandbits(8) for _ in range(rnd.randint(1, 4)))
        out.append(bytes(value))
    out += [bytes(rnd.getrandbits(8) for _ in range(rnd.randint(0, 12))) for _ in range(count // 4)]
    return out


def _compare(spark: Any, values: list[bytes | None], schema: DataType, use_extension: bool) -> None:
    from pyspark.sql import functions as F

    frame = spark.createDataFrame(list(enumerate(values)), "i int, v binary")
    text = F.col("v").cast("string")
    columns = [
        "i",
        F.from_json(text, schema).alias("spark"),
        from_json(text, schema, use_extension=use_extension).alias("ours"),
        F.size(F.json_object_keys(text)).alias("spark_keys"),
    ]
    names = schema.fieldNames() if isinstance(schema, StructType) else []
    if isinstance(schema, StructType):
        both = from_json_keyed(text, schema, use_extension=use_extension)
        fields = schema.jsonValue()["fields"]
        types = [f["type"] for f in fields]
        key_count = F.size(F.json_object_keys(text))
        columns += [
            both.alias("keyed"),
            # The parse path's clean-record test with Spark's key count, and with the parse's own.
            parse_columns._clean(F.from_json(text, schema), key_count, names, types).alias("clean_before"),
            parse_columns._clean(both["value"], both["keys"], names, types).alias("clean"),
        ]
    rows = frame.select(*columns).collect()
    assert len(rows) == len(values)
    read_only_by_from_json: list[bytes | None] = []
    trailing: list[bytes | None] = []
    for row in rows:
        value = values[row["i"]]
        # repr: a NaN parsed from the same text is the same value, though nan != nan.
        assert repr(row["ours"]) == repr(row["spark"]), f"{value!r}"
        if not isinstance(schema, StructType):
            continue
        keyed = row["keyed"]
        # size(null): -1 or null by Spark's settings; null either way here (not an object, not JSON).
        spark_keys = None if row["spark_keys"] in (None, -1) else row["spark_keys"]
        assert (keyed is None) == (value is None), f"{value!r}"
        if keyed is None:
            continue
        assert repr(keyed["value"]) == repr(row["spark"]), f"{value!r}"
        if keyed["keys"] == TRAILING_KEYS:
            # Spark read an object and stopped; the parse found more after it (not whitespace or
            # NULs). Such a record is never clean: it is a dead letter (test_parsing).
            assert row["spark"] is not None, f"{value!r}"
            trailing.append(value)
            continue
        if keyed["keys"] is not None:
            # The count is of the keys from_json's parser read: json_object_keys' parser refuses
            # some records it reads (NaN), never the other way round.
            assert keyed["keys"] == spark_keys or spark_keys is None, f"{value!r}"
            if spark_keys is None:
                read_only_by_from_json.append(value)
        # Every record clean by Spark's count is clean by the parse's own (the shortcut loses no
        # record it took; what it takes is checked by test_parsing's shortcut test). Not with a
        # field named as Spark's corrupt-record column: there a malformed record's text fills that
        # field, and Spark's count made it "clean"; the parse's count of a record it could not read
        # is null.
        if "_corrupt_record" not in names:
            assert row["clean"] or not row["clean_before"], f"{value!r}"
    if values is ODD_VALUES and isinstance(schema, StructType):
        assert set(trailing) == {
            b'{"s": "a"} trailing',
            b'{"s": "a"}{"n": 2}',
            b'{"s": "a"} {"s": "b"}',
            b'{"s": "a"}[1]',
            b'{"s": "a"}x',
        }
    # What only from_json's parser reads is its non-numeric numbers (allowNonNumericNumbers).
    assert all(v and any(word in v for word in (b"NaN", b"Inf", b"INF")) for v in read_only_by_from_json)


@pytest.mark.parametrize("kind", sorted(SCHEMAS))
def test_the_byte_parse_gives_spark_s_result_for_odd_bytes(spark, kind, use_extension):
    _compare(spark, ODD_VALUES, SCHEMAS[kind], use_extension)


def test_the_byte_parse_gives_spark_s_result_for_random_bytes(spark, use_extension):
    # The built-ins on fewer: the next test holds them to the extension's results on all of them.
    values = _random_values(seed=20261126, count=20000 if use_extension else 4000)
    _compare(spark, values, SCHEMAS["struct"], use_extension)
    _compare(spark, values[:1000], SCHEMAS["map of texts"], use_extension)


def test_without_the_extension_the_functions_give_the_extension_s_results(spark, with_extension):
    """Record for record, on the odd and the random bytes: the value, the key count, and the parse
    path's clean-record test. The one difference is in text that is not UTF-8 (which the parse path
    never parses: it is an ``invalid_utf8`` dead letter first): where such bytes follow the object,
    the built-ins see text after it (:data:`TRAILING_KEYS`), where the extension's reader-based
    fallback can miss it."""
    from pyspark.sql import functions as F

    values = [*ODD_VALUES, *_random_values(seed=20261126, count=20000)]
    frame = spark.createDataFrame(list(enumerate(values)), "i int, v binary")
    text = F.col("v").cast("string")
    checked = 0
    for kind, schema in sorted(SCHEMAS.items()):
        both = {way: from_json(text, schema, use_extension=way) for way in (True, False)}
        columns = [
            "i",
            both[True].alias("on"),
            both[False].alias("off"),
            F.expr("try_validate_utf8(cast(v AS STRING))").alias("utf8"),
        ]
        if isinstance(schema, StructType):
            names, types = schema.fieldNames(), [f["type"] for f in schema.jsonValue()["fields"]]
            for way, label in ((True, "on"), (False, "off")):
                keyed = from_json_keyed(text, schema, use_extension=way)
                columns += [
                    keyed.alias(f"keyed_{label}"),
                    parse_columns._clean(keyed["value"], keyed["keys"], names, types).alias(f"clean_{label}"),
                ]
        # The random bytes for the struct schema only (as above); the odd ones for every schema.
        rows = frame.where(F.col("i") < len(ODD_VALUES)) if kind != "struct" else frame
        for row in rows.select(*columns).collect():
            value = values[row["i"]]
            assert repr(row["on"]) == repr(row["off"]), f"{kind}: {value!r}"
            checked += 1
            if not isinstance(schema, StructType):
                continue
            on, off = row["keyed_on"], row["keyed_off"]
            assert (on is None) == (off is None), f"{kind}: {value!r}"
            if on is None:
                continue
            assert repr(on["value"]) == repr(off["value"]), f"{kind}: {value!r}"
            if row["utf8"] is not None or row["i"] < len(ODD_VALUES):
                assert on["keys"] == off["keys"], f"{kind}: {value!r}"
                assert row["clean_on"] == row["clean_off"], f"{kind}: {value!r}"
            else:
                assert on["keys"] == off["keys"] or off["keys"] == TRAILING_KEYS, f"{kind}: {value!r}"
    assert checked > 20000


def test_the_byte_parse_reads_what_spark_does(spark, use_extension):
    """Not only equal: the corpus holds records both parse, and ones both refuse."""
    from pyspark.sql import functions as F

    values = [b'{"s": "caf\xc3\xa9", "n": 7, "zz": [1]}', b'{"s": ', None, b"[]"]
    frame = spark.createDataFrame(list(enumerate(values)), "i int, v binary")
    text = F.col("v").cast("string")
    schema = SCHEMAS["struct"]
    rows = frame.select(
        from_json(text, schema, use_extension=use_extension).alias("p"),
        from_json_keyed(text, schema, use_extension=use_extension).alias("k"),
    ).collect()
    assert rows[0]["p"]["s"] == "café" and rows[0]["p"]["n"] == 7 and rows[0]["k"]["keys"] == 3
    assert rows[0]["k"]["value"] == rows[0]["p"]
    assert rows[1]["p"] is not None and rows[1]["p"]["s"] is None and rows[1]["k"]["keys"] is None
    assert rows[2]["p"] is None and rows[2]["k"] is None
    assert rows[3]["k"]["keys"] is None


def test_a_bad_schema_argument_is_refused_with_its_reason(spark, with_extension):
    from pyspark.sql import functions as F

    text = F.col("v").cast("string")
    frame = spark.createDataFrame([(b"{}",)], "v binary")
    with pytest.raises(Exception, match="struct, an array or a map, not string"):
        frame.select(F.call_function("kafkalake_from_json", text, F.lit("string"))).collect()
    with pytest.raises(Exception, match="two arguments"):
        frame.select(F.call_function("kafkalake_from_json", text)).collect()
    with pytest.raises(Exception, match="reads into a struct, not array<string>"):
        frame.select(F.call_function("kafkalake_from_json_keyed", text, F.lit("array<string>"))).collect()
    # The schema as DDL text works as its JSON form does.
    ddl = frame.select(
        F.call_function("kafkalake_from_json", F.lit('{"s": "x"}'), F.lit("s string")).alias("p")
    )
    assert ddl.collect()[0]["p"]["s"] == "x"


def _utf8_cases() -> list[bytes | None]:
    """The odd values, random bytes, and one non-ASCII sequence at each place of ASCII runs of 0-24
    bytes: the edges of the eight-bytes-at-a-time scan and of its tail."""
    cases: list[bytes | None] = [*ODD_VALUES, *_random_values(seed=7, count=4000)]
    odd = (b"\x80", b"\xc3\xa9", b"\xc3", b"\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf0\x9f\x98\x80", b"\x7f")
    for length in range(25):
        cases.append(b"a" * length)
        for at in range(length):
            for sequence in odd:
                cases.append(b"a" * at + sequence + b"a" * (length - at - 1))
    return cases


@pytest.mark.parametrize("mode", ["CODEGEN_ONLY", "NO_CODEGEN"])
def test_the_utf8_check_gives_try_validate_utf8s_answer(spark, mode, use_extension):
    from pyspark.sql import functions as F

    values = _utf8_cases()
    frame = spark.createDataFrame(list(enumerate(values)), "i int, v binary")
    spark.conf.set("spark.sql.codegen.factoryMode", mode)
    try:
        rows = frame.select(
            "i",
            F.expr("try_validate_utf8(cast(v AS STRING))").alias("spark"),
            utf8_text(F.col("v"), use_extension=use_extension).alias("ours"),
        ).collect()
    finally:
        spark.conf.unset("spark.sql.codegen.factoryMode")
    assert len(rows) == len(values)
    assert [values[r["i"]] for r in rows if r["ours"] != r["spark"]] == []
    # Not only equal: the corpus holds many of both answers.
    valid = sum(r["ours"] is not None for r in rows)
    assert valid > 1000 and len(rows) - valid > 1000


def test_the_utf8_check_takes_only_bytes(spark, with_extension):
    from pyspark.sql import functions as F

    frame = spark.createDataFrame([("{}",)], "v string")
    with pytest.raises(Exception, match=r"(?i)binary"):
        frame.select(utf8_text(F.col("v"))).collect()


@pytest.mark.parametrize("mode", ["CODEGEN_ONLY", "NO_CODEGEN"])
def test_the_schema_id_read_in_the_jvm_is_conv_s_under_the_frame_check(spark, mode, with_extension):
    """kafkalake_schema_id gives the built-in reading's answer (a framed value's magic byte 0, then
    conv of the 4 bytes' hex) on every value: shorter than the frame, another first byte, ids with the
    high bit set (unsigned), exactly the frame, random bytes; compiled and interpreted."""
    from pyspark.sql import functions as F

    from kafkalake.spark import wire_format

    rnd = random.Random(44)
    values: list[bytes | None] = [None, b"", b"\x00", b"\x00\x00\x00\x00", b"\x01\x00\x00\x00\x07"]
    values += [b"\x00" + bytes(i) for i in range(4, 9)]
    values += [b"\x00" + i.to_bytes(4, "big") + b"x" for i in (1, 7, 255, 256, 2**31 - 1, 2**31, 2**32 - 1)]
    values += [bytes([rnd.choice((0, 0, 1, 255))]) + rnd.randbytes(rnd.randint(0, 9)) for _ in range(3000)]
    frame = spark.createDataFrame(list(enumerate(values)), "i int, v binary")
    spark.conf.set("spark.sql.codegen.factoryMode", mode)
    try:
        rows = frame.select(
            "i",
            wire_format.schema_id(F.col("v"), use_extension=False).alias("spark"),
            wire_format.schema_id(F.col("v"), use_extension=True).alias("ours"),
        ).collect()
    finally:
        spark.conf.unset("spark.sql.codegen.factoryMode")
    assert len(rows) == len(values)
    assert [values[r["i"]] for r in rows if r["ours"] != r["spark"]] == []
    ids = {r["ours"] for r in rows}
    assert {7, 2**31, 2**32 - 1} <= ids and None in ids
    assert sum(r["ours"] is not None for r in rows) > 500
