"""A Debezium topic's schema: ``before`` and ``after`` are one row type (no Spark needed)."""

from __future__ import annotations

from kafkalake.spark.debezium import shaped


def _field(name, type_):
    return {"name": name, "type": type_, "nullable": True, "metadata": {}}


def _row(*names):
    return {"type": "struct", "fields": [_field(n, "bigint" if n == "id" else "string") for n in names]}


def _event(before, after):
    return {
        "type": "struct",
        "fields": [_field("before", before), _field("after", after), _field("op", "string")],
    }


def test_a_before_seen_only_as_null_takes_afters_row_type():
    schema = shaped(_event("string", _row("id", "name")))
    assert schema["fields"][0]["type"] == schema["fields"][1]["type"] == _row("id", "name")
    assert schema["fields"][2] == _field("op", "string")


def test_each_side_gets_the_fields_of_both_after_first():
    schema = shaped(_event(_row("id", "old"), _row("id", "name")))
    assert schema["fields"][0]["type"] == schema["fields"][1]["type"] == _row("id", "name", "old")


def test_a_sample_of_deletes_only_gives_after_the_row_type_of_before():
    schema = shaped(_event(_row("id"), "string"))
    assert schema["fields"][1]["type"] == _row("id")


def test_no_row_type_yet_leaves_the_schema_as_it_is():
    event = _event("string", "string")
    assert shaped(event) == event
