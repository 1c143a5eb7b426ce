"""parse_batch on bronze rows built in memory: where each record ends, and what it keeps.

No Kafka here: the rows are what the stream hands the writer, so the cases can be exact. The
end-to-end path (Kafka → tables, read back with delta-rs) is in test_parsed_tables.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from pyspark.sql.types import StructType

from kafkalake.config.parsed import ParsedConfig
from kafkalake.spark import parse_columns
from kafkalake.spark.json_functions import from_json_keyed
from kafkalake.spark.stream import bronze_schema

pytestmark = pytest.mark.integration

SCHEMA = {
    "type": "struct",
    "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "amount", "type": "double", "nullable": True, "metadata": {}},
        {
            "name": "detail",
            "type": {
                "type": "struct",
                "fields": [{"name": "qty", "type": "integer", "nullable": True, "metadata": {}}],
            },
            "nullable": True,
            "metadata": {},
        },
    ],
}

VALUES: dict[str, bytes | None] = {
    "clean": b'{"id": 1, "amount": 2.5, "detail": {"qty": 3}}',
    "fields_missing": b'{"id": 2}',
    "json_null": b'{"id": 3, "amount": null}',
    "unknown_key": b'{"id": 4, "extra": "x"}',
    "unknown_key_null": b'{"id": 5, "extra": null}',
    "wrong_type": b'{"id": 6, "amount": "a lot"}',
    "nested_unknown": b'{"id": 7, "detail": {"qty": 1, "note": "gift"}}',
    "nested_wrong": b'{"id": 8, "detail": {"qty": "three"}}',
    "malformed": b'{"id": ',
    "array": b"[1, 2]",
    "tombstone": None,
}


def parse(spark: Any, config: ParsedConfig) -> dict[str, dict[str, Any]]:
    now = datetime(2026, 11, 23, tzinfo=UTC)
    rows = [
        (name.encode(), value, [], "t", 0, offset, now, 0, now)
        for offset, (name, value) in enumerate(VALUES.items())
    ]
    bronze = spark.createDataFrame(rows, bronze_schema())
    frame = parse_columns.parse_batch(bronze, SCHEMA, config)
    return {row["_kafka"]["key"].decode(): row.asDict(recursive=True) for row in frame.collect()}


def rescued(row: dict[str, Any]) -> Any:
    return None if row["_rescued_data"] is None else json.loads(row["_rescued_data"])


def parse_frame(spark: Any, values: list[bytes], config: ParsedConfig) -> Any:
    """``values`` as keyless records at offsets 0, 1, ... of one partition, parsed with SCHEMA."""
    now = datetime(2026, 11, 23, tzinfo=UTC)
    rows = [(None, v, [], "t", 0, offset, now, 0, now) for offset, v in enumerate(values)]
    return parse_columns.parse_batch(spark.createDataFrame(rows, bronze_schema()), SCHEMA, config)


def parse_values(spark: Any, values: list[bytes], config: ParsedConfig) -> list[dict[str, Any]]:
    """:func:`parse_frame`'s rows, in offset order."""
    rows = parse_frame(spark, values, config).collect()
    return sorted((r.asDict(recursive=True) for r in rows), key=lambda r: r["_kafka"]["offset"])


def test_rescue_keeps_unknown_and_mistyped_fields_as_json_and_nothing_else(spark):
    out = parse(spark, ParsedConfig(evolution="rescue"))

    for name in ("clean", "fields_missing", "json_null"):
        assert out[name][parse_columns.REASON] is None, name
        assert out[name]["_rescued_data"] is None, name
    assert out["clean"]["detail"] == {"qty": 3}
    # An unknown key is kept even when its value is JSON null: it was in the record.
    assert rescued(out["unknown_key"]) == {"extra": "x"}
    assert rescued(out["unknown_key_null"]) == {"extra": None}
    assert rescued(out["wrong_type"]) == {"amount": "a lot"} and out["wrong_type"]["amount"] is None
    # Inside a struct, the whole top-level field is rescued: nothing of it is lost.
    assert rescued(out["nested_unknown"]) == {"detail": {"qty": 1, "note": "gift"}}
    assert rescued(out["nested_wrong"]) == {"detail": {"qty": "three"}}
    assert out["malformed"][parse_columns.REASON] == "malformed_json"
    assert out["array"][parse_columns.REASON] == "not_an_object"
    assert out["tombstone"][parse_columns.REASON] == "empty_value"
    # Dead letters carry no rescued data: their bytes are in the dead-letter table.
    assert out["malformed"]["_rescued_data"] is None


def test_mode_none_dead_letters_a_type_mismatch_and_names_the_fields(spark):
    out = parse(spark, ParsedConfig(evolution="none", changelog=True))

    assert "_rescued_data" not in out["clean"]
    assert out["wrong_type"][parse_columns.REASON] == "type_mismatch"
    assert out["wrong_type"][parse_columns.DETAIL] == "fields not of their schema type: amount"
    assert out["nested_wrong"][parse_columns.REASON] == "type_mismatch"
    assert out["nested_wrong"][parse_columns.DETAIL] == "fields not of their schema type: detail"
    # Unknown keys are no mismatch: mode none drops them, as it says.
    for name in ("clean", "fields_missing", "json_null", "unknown_key", "nested_unknown"):
        assert out[name][parse_columns.REASON] is None, name
    assert out["tombstone"][parse_columns.REASON] == parse_columns.TOMBSTONE


def test_fail_on_new_columns_rescues_new_fields_and_dead_letters_a_type_mismatch(spark):
    """New fields (top level or nested) are rescued, so the batch's check stops the parsed side;
    a value of the wrong type is no new field: a dead letter naming it, at any depth."""
    out = parse(spark, ParsedConfig(evolution="failOnNewColumns"))

    assert out["wrong_type"][parse_columns.REASON] == "type_mismatch"
    assert out["wrong_type"][parse_columns.DETAIL] == "fields not of their schema type: amount"
    assert out["nested_wrong"][parse_columns.REASON] == "type_mismatch"
    assert out["nested_wrong"][parse_columns.DETAIL] == "fields not of their schema type: detail"
    assert rescued(out["unknown_key"]) == {"extra": "x"}
    assert rescued(out["unknown_key_null"]) == {"extra": None}
    assert rescued(out["nested_unknown"]) == {"detail": {"qty": 1, "note": "gift"}}
    for name in ("clean", "fields_missing", "json_null", "unknown_key", "nested_unknown"):
        assert out[name][parse_columns.REASON] is None, name
    for name in ("clean", "fields_missing", "json_null", "wrong_type", "nested_wrong"):
        assert out[name]["_rescued_data"] is None, name


def test_a_schema_field_given_twice_keeps_both_values(spark):
    """``{"id": 1, "id": "x"}``: the typed parse keeps 1 (the last value does not convert), so the
    last value, which the record means, must be rescued; it was lost, ``_rescued_data`` read ``{}``."""
    out = parse_values(spark, [b'{"id": 1, "id": "x"}', b'{"id": 1, "id": 2, "amount": 1.5}'], ParsedConfig())

    assert [r[parse_columns.REASON] for r in out] == [None, None]
    assert out[0]["_rescued_data"] is not None and '"x"' in out[0]["_rescued_data"]
    assert out[1]["id"] == 2 and out[1]["amount"] == 1.5
    assert out[1]["_rescued_data"] is not None and '"id":2' in out[1]["_rescued_data"]


def test_mode_none_dead_letters_a_schema_field_given_twice(spark):
    """Mode none has no rescue column: ``{"id": 1, "id": "x"}`` landed as id 1 and "x" was in no
    table but bronze. A known key given twice, at any depth, is a dead letter naming it; an unknown
    one is ignored as every unknown key is in that mode."""
    values = [
        b'{"id": 1, "id": "x"}',
        b'{"id": 1, "amount": 2.5, "id": 2, "amount": 3}',
        b'{"id": 1, "extra": 1, "extra": 2}',
        b'{"id": 1, "amount": 2.5}',
        b'{"id": 1, "detail": {"qty": 1, "qty": "x"}}',
        b'{"id": 1, "detail": {"qty": 1, "note": 1, "note": 2}}',
    ]
    out = parse_values(spark, values, ParsedConfig(evolution="none"))

    reasons = [r[parse_columns.REASON] for r in out]
    assert reasons == ["type_mismatch", "type_mismatch", None, None, "type_mismatch", None]
    assert out[0][parse_columns.DETAIL].endswith("cannot be told): id")
    assert out[1][parse_columns.DETAIL].endswith("cannot be told): id, amount")
    # Inside a struct, as a value of the wrong type there: the top-level field is named.
    assert out[4][parse_columns.DETAIL] == "fields not of their schema type: detail"
    assert (out[2]["id"], out[3]["id"], out[3]["amount"], out[5]["detail"]) == (1, 1, 2.5, {"qty": 1})


def test_the_catalogs_rule_check_agrees_with_sparks_parser(spark):
    """Every rule the load-time check accepts, Spark's SQL parser accepts; every one it refuses,
    Spark refuses too, but for a column with an alias (``a b``), which is no boolean rule."""
    from pyspark.errors import ParseException
    from unit.config.test_parsed import BAD_RULES, GOOD_RULES

    parser = spark._jsparkSession.sessionState().sqlParser()
    for rule in GOOD_RULES:
        parser.parseExpression(rule)
    accepted = []
    for rule in BAD_RULES:
        try:
            parser.parseExpression(rule)
        except ParseException:
            continue
        accepted.append(rule)
    # Both read as a column with an alias (AND is no reserved word outside ANSI mode): no rule.
    assert accepted == ["a b", "AND a"]


def test_a_decimal_that_would_be_rounded_is_rescued_not_rounded(spark):
    schema = {
        "type": "struct",
        "fields": [
            {"name": "amount", "type": "decimal(10,2)", "nullable": True, "metadata": {}},
            {
                "name": "prices",
                "type": {"type": "array", "elementType": "decimal(10,2)", "containsNull": True},
                "nullable": True,
                "metadata": {},
            },
        ],
    }
    values = {
        "exact": b'{"amount": 12.34, "prices": [1.5, 2]}',
        "as_text": b'{"amount": "12.3"}',
        "rounded": b'{"amount": 12.345}',
        "rounded_in_array": b'{"prices": [1.5, 2.345]}',
        "too_big": b'{"amount": 123456789012.5}',
    }
    now = datetime(2026, 11, 23, tzinfo=UTC)
    rows = [(k.encode(), v, [], "t", 0, i, now, 0, now) for i, (k, v) in enumerate(values.items())]
    frame = parse_columns.parse_batch(spark.createDataFrame(rows, bronze_schema()), schema, ParsedConfig())
    out = {r["_kafka"]["key"].decode(): r.asDict(recursive=True) for r in frame.collect()}

    assert str(out["exact"]["amount"]) == "12.34" and out["exact"]["_rescued_data"] is None
    assert [str(p) for p in out["exact"]["prices"]] == ["1.50", "2.00"]
    assert str(out["as_text"]["amount"]) == "12.30" and out["as_text"]["_rescued_data"] is None
    assert rescued(out["rounded"]) == {"amount": 12.345}
    assert rescued(out["rounded_in_array"]) == {"prices": [1.5, 2.345]}
    assert rescued(out["too_big"]) == {"amount": 123456789012.5}


def test_a_fraction_is_rescued_from_a_decimal_of_38_digits(spark):
    """Inference types whole numbers past 64 bits decimal(38,0); a decimal(38, s) left the check no
    fraction digit to compare, so ``1.5`` landed as 2 and ``1.234`` in a decimal(38,2) as 1.23."""
    big = "1" * 38
    schema = {
        "type": "struct",
        "fields": [
            {"name": "big", "type": "decimal(38,0)", "nullable": True, "metadata": {}},
            {"name": "m", "type": "decimal(38,2)", "nullable": True, "metadata": {}},
        ],
    }
    values = {
        "whole": f'{{"big": {big}, "m": 1.23}}'.encode(),
        "exponent": b'{"big": 1e2}',
        "fraction": b'{"big": 1.5}',
        "fraction_down": b'{"big": 2.4}',
        "scale": b'{"m": 1.234}',
        "long_fraction": f'{{"big": {big}.4}}'.encode(),
    }
    now = datetime(2026, 11, 23, tzinfo=UTC)
    rows = [(k.encode(), v, [], "t", 0, i, now, 0, now) for i, (k, v) in enumerate(values.items())]
    frame = parse_columns.parse_batch(spark.createDataFrame(rows, bronze_schema()), schema, ParsedConfig())
    out = {r["_kafka"]["key"].decode(): r.asDict(recursive=True) for r in frame.collect()}

    assert str(out["whole"]["big"]) == big and out["whole"]["_rescued_data"] is None
    assert str(out["exponent"]["big"]) == "100" and out["exponent"]["_rescued_data"] is None
    assert rescued(out["fraction"]) == {"big": 1.5}
    assert rescued(out["fraction_down"]) == {"big": 2.4}
    assert rescued(out["scale"]) == {"m": 1.234}
    assert out["long_fraction"]["_rescued_data"] is not None


def test_the_latest_row_of_a_key_that_moved_partition_is_its_newest_record(spark, tmp_path):
    """Partitions added to a topic move keys to others. Ordered by (partition, offset), a key's
    records in a new partition with a lower number never replaced its old row (nor deleted it)."""
    from datetime import timedelta

    from kafkalake.spark.latest import latest_per_key, merge_latest

    schema = {"type": "struct", "fields": [{"name": "v", "type": "long", "nullable": True, "metadata": {}}]}
    t0 = datetime(2026, 11, 23, tzinfo=UTC)

    def batch(*records: tuple[bytes, bytes | None, int, int, int]) -> Any:
        rows = [
            (key, value, [], "t", p, o, t0 + timedelta(seconds=s), 0, t0) for key, value, p, o, s in records
        ]
        config = ParsedConfig(changelog=True)
        return parse_columns.parse_batch(spark.createDataFrame(rows, bronze_schema()), schema, config)

    def latest(path: str) -> dict[bytes, int]:
        rows = spark.read.format("delta").load(path).collect()
        return {bytes(r["_kafka"]["key"]): r["v"] for r in rows}

    # Before the move: partition 3; after it: partition 1, later in time, lower offsets.
    before = [(b"k", b'{"v": 1}', 3, 100, 0), (b"gone", b'{"v": 1}', 3, 101, 0)]
    after = [(b"k", b'{"v": 2}', 1, 5, 10), (b"gone", None, 1, 6, 10)]
    # Within one batch, and the same partition: the higher offset, whatever its timestamp.
    same = batch((b"s", b'{"v": 1}', 0, 1, 50), (b"s", b'{"v": 2}', 0, 2, 40))
    assert {bytes(r["_kafka"]["key"]): r["v"] for r in latest_per_key(same).collect()} == {b"s": 2}
    one = {bytes(r["_kafka"]["key"]): r["v"] for r in latest_per_key(batch(*before, *after)).collect()}
    assert one == {b"k": 2, b"gone": None}

    path = str(tmp_path / "latest")
    merge_latest(spark, batch(*before), path, "app", 0)
    merge_latest(spark, batch(*after), path, "app", 1)
    assert latest(path) == {b"k": 2}
    # A replay of the older batch changes no row.
    merge_latest(spark, batch(*before), path, "app-replay", 0)
    assert latest(path)[b"k"] == 2


@pytest.mark.parametrize("evolution", ["rescue", "none"])
def test_a_first_batch_without_a_json_object_records_no_schema(spark, tmp_path, evolution):
    """A topic's first batch of a test message or a tombstone was inferred as a schema without
    fields and recorded: under the modes that add no field, every later field was rescued or
    dropped for good. The next batch with objects now gives the first version."""
    from datetime import timedelta

    from kafkalake.config.topic import TopicConfig
    from kafkalake.lake.schema_history import SchemaHistory
    from kafkalake.spark.topic_parser import TopicParser

    topic = TopicConfig(
        name="first",
        freshness_sla=timedelta(hours=1),
        table="first",
        path=str(tmp_path / "first"),
        parsed=ParsedConfig(evolution=evolution),
    )
    parser = TopicParser(spark, topic)
    now = datetime(2026, 11, 23, tzinfo=UTC)

    def parse(batch: int, *values: bytes | None) -> list[dict[str, Any]]:
        rows = [(None, v, [], "first", 0, batch * 10 + i, now, 0, now) for i, v in enumerate(values)]
        parsed = parser.parse(spark.createDataFrame(rows, bronze_schema()), f"batch {batch}")
        try:
            return [r.asDict(recursive=True) for r in parsed.frame.collect()]
        finally:
            parsed.frame.unpersist()

    first = parse(0, b"hello", None)
    assert [r[parse_columns.REASON] for r in first] == ["malformed_json", "empty_value"]
    assert SchemaHistory(topic.schema_dir).current() is None

    (row,) = parse(1, b'{"id": 7}')
    assert row["id"] == 7 and row[parse_columns.REASON] is None
    current = SchemaHistory(topic.schema_dir).current()
    assert current is not None and [f["name"] for f in current.schema["fields"]] == ["id"]


def test_a_null_value_without_a_key_is_a_dead_letter_on_a_changelog_topic(spark):
    """A tombstone lands in the latest table only, which drops keyless records: a null value with
    a null key was counted a tombstone and landed in no table."""
    now = datetime(2026, 11, 23, tzinfo=UTC)
    rows = [(b"k", None, [], "t", 0, 0, now, 0, now), (None, None, [], "t", 0, 1, now, 0, now)]
    config = ParsedConfig(changelog=True)
    frame = parse_columns.parse_batch(spark.createDataFrame(rows, bronze_schema()), SCHEMA, config)
    reasons = {r["_kafka"]["offset"]: r[parse_columns.REASON] for r in frame.collect()}

    assert reasons == {0: parse_columns.TOMBSTONE, 1: "empty_value"}
    assert [r["offset"] for r in parse_columns.dead_letter_rows(frame).collect()] == [1]


@pytest.mark.parametrize("evolution", ["addNewColumns", "none"])
def test_text_after_the_json_object_makes_a_dead_letter_not_a_silent_loss(spark, evolution):
    """Spark's parse reads a record's first JSON value and drops the rest: two documents in one
    message landed as the first alone, the second in no table. Whitespace and NUL bytes (a C
    producer's string terminator) after the object are no content."""
    values = [
        b'{"id": 1} {"id": 2}',
        b'{"id": 3}{"id": 4}',
        b'{"id": 5}x',
        b'{"id": 6} \r\n\t',
        b'{"id": 7}\x00\x00',
        b'{"id": 8, "amount": 1.5}',
    ]
    frame = parse_frame(spark, values, ParsedConfig(evolution=evolution))
    got = {r["_kafka"]["offset"]: r for r in frame.collect()}

    trailing = "text after the JSON object (two JSON documents in one message?)"
    for offset in (0, 1, 2):
        assert (got[offset][parse_columns.REASON], got[offset][parse_columns.DETAIL]) == (
            "malformed_json",
            trailing,
        ), values[offset]
        assert got[offset][parse_columns.VALUE] == values[offset]  # the dead letter keeps the bytes
    for offset, expected in ((3, 6), (4, 7), (5, 8)):
        assert got[offset][parse_columns.REASON] is None, values[offset]
        assert got[offset]["id"] == expected
    assert sorted(r["offset"] for r in parse_columns.dead_letter_rows(frame).collect()) == [0, 1, 2]


#: A flat schema with every scalar kind inference gives, a decimal and a struct: the records the
#: clean-record shortcut may skip, and the ones it must not.
SHORTCUT_SCHEMA = {
    "type": "struct",
    "fields": [
        {"name": name, "type": kind, "nullable": True, "metadata": {}}
        for name, kind in [
            ("s", "string"),
            ("n", "long"),
            ("x", "double"),
            ("b", "boolean"),
            ("t", "timestamp"),
            ("d", "decimal(10,2)"),
            ("a.b", "string"),
            ("o", {"type": "struct", "fields": [{"name": "q", "type": "long", "nullable": True}]}),
            ("l", {"type": "array", "elementType": "long", "containsNull": True}),
        ]
    ],
}
#: Values that look clean to a quick reader and are not, and the odd bytes JSON parsers disagree on.
SHORTCUT_VALUES = [
    b'{"s": "a", "n": 1}',
    b'{"s": "a", "n": 1, "x": 2.5, "b": true, "t": "2026-11-25T01:02:03Z", "a.b": "dot"}',
    b'{"s": "a", "n": 1.5}',
    b'{"s": "a", "n": "1"}',
    b'{"s": "a", "n": 99999999999999999999}',
    b'{"s": "a", "x": 1e400}',
    b'{"s": "a", "x": NaN}',
    b'{"s": "a", "b": "true"}',
    b'{"s": "a", "t": "not a time"}',
    b'{"s": null, "n": 1}',
    b'{"s": "a", "s": "b"}',
    b'{"s": "a", "S": "b"}',
    b'{"s": "a", "zz": 1}',
    b'{"s": "a", "zz": null}',
    b'{"s": {"k": 1}}',
    b'{"s": [1, 2]}',
    b'{"s": "a"} trailing',
    b'{"s": "a"}{"n": 2}',
    b'{"s": "a",}',
    b'{"s": "x\ty"}',
    b'{"s": "\\u0000"}',
    b'{"\\u0073": "escaped key"}',
    b'{"s": "a" /* c */}',
    b"{'s': 'single'}",
    b'{"d": 12.345}',
    b'{"d": 12.34, "s": "a"}',
    b'{"o": {"q": 1}, "s": "a"}',
    b'{"o": {"q": "one"}, "s": "a"}',
    b'{"o": {"q": 1, "r": 2}}',
    b'{"l": [1, 2], "s": "a"}',
    b'{\'zz\': 1, "s": "a"}',
    b'{"s" \n\t : "a", "zz"  :1}',
    b'{"s": "a\\":b"}',
    b'{"s": "12:30"}',
    b'{"l": [1, "2"]}',
    b"{}",
    b"[]",
    b'"s"',
    b"",
    b"\xff\xfe",
    None,
]


@pytest.mark.parametrize("evolution", ["addNewColumns", "rescue", "failOnNewColumns", "none"])
def test_the_clean_record_shortcut_changes_no_record(spark, monkeypatch, evolution):
    """Every column of every record is what the full per-field checks give (the shortcut off)."""
    from pyspark.sql import functions as F

    now = datetime(2026, 11, 25, tzinfo=UTC)
    rows = [(b"k", value, [], "t", 0, offset, now, 0, now) for offset, value in enumerate(SHORTCUT_VALUES)]
    bronze = spark.createDataFrame(rows, bronze_schema())
    config = ParsedConfig(evolution=evolution)

    def by_offset(frame: Any) -> dict[int, dict[str, Any]]:
        return {row["_kafka"]["offset"]: row.asDict(recursive=True) for row in frame.collect()}

    with_shortcut = by_offset(parse_columns.parse_batch(bronze, SHORTCUT_SCHEMA, config))
    fields = SHORTCUT_SCHEMA["fields"]
    probe = bronze.select(F.col("offset"), F.col("value").cast("string").alias(parse_columns.TEXT))
    typed = from_json_keyed(F.col(parse_columns.TEXT), StructType.fromJson(SHORTCUT_SCHEMA))
    probe = probe.select("offset", typed.alias("p"))
    names, types = [f["name"] for f in fields], [f["type"] for f in fields]
    clean = parse_columns._clean(F.col("p")["value"], F.col("p")["keys"], names, types)
    taken = {row[0] for row in probe.where(clean).select("offset").collect()}
    monkeypatch.setattr(parse_columns, "_clean", lambda *_args: F.lit(False))
    without = by_offset(parse_columns.parse_batch(bronze, SHORTCUT_SCHEMA, config))

    assert len(without) == len(with_shortcut) == len(SHORTCUT_VALUES)
    for offset, row in without.items():
        # repr: a NaN parsed from the same text is the same record, though nan != nan.
        assert repr(with_shortcut[offset]) == repr(row), f"{SHORTCUT_VALUES[offset]!r}"
    # The shortcut skips the checks where the full checks find nothing to rescue either (offsets in
    # SHORTCUT_VALUES): plain records, a value Spark's string column keeps as its JSON text,
    # Infinity for 1e400, NaN (the typed parse reads it, and counts its key), an escaped key, single
    # quotes, a quote and a colon inside a value, a time. Not text after the object (16, 17): a dead
    # letter (test_text_after_the_json_object_makes_a_dead_letter_not_a_silent_loss).
    assert taken == {0, 1, 5, 6, 14, 15, 20, 21, 23, 32, 33}, taken
    # The corpus does exercise both sides: clean records parse, the others are rescued or dead.
    reasons = {offset: row[parse_columns.REASON] for offset, row in without.items()}
    assert reasons[0] is None and reasons[1] is None
    assert reasons[16] == reasons[17] == "malformed_json"
    assert {"malformed_json", "not_an_object", "empty_value", "invalid_utf8"} <= set(reasons.values())
