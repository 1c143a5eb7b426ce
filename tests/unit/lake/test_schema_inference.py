"""Schema inference by most of the sample: types, depth and width limits, names. Pure, no JVM."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kafkalake.lake.schema_algebra import count_fields, schema_problems, type_string
from kafkalake.lake.schema_inference import Limits, infer


def inferred(*documents: Any, limits: Limits | None = None) -> str:
    return type_string(infer([json.dumps(d) for d in documents], limits))


def deep(levels: int) -> dict[str, Any]:
    node: dict[str, Any] = {"leaf": 1}
    for _ in range(levels):
        node = {"a": node}
    return node


def test_one_record_of_another_type_does_not_change_a_column():
    good = [{"id": i, "amount": i * 10} for i in range(3000)]
    schema = inferred(*good, {"id": "not-a-number", "amount": "12"})
    assert schema == "struct<id:bigint,amount:bigint>"


def test_the_type_most_values_have_wins_and_a_tie_keeps_the_text():
    assert inferred({"a": "x"}, {"a": "y"}, {"a": 1}) == "struct<a:string>"
    assert inferred({"a": True}, {"a": False}, {"a": "yes"}) == "struct<a:boolean>"
    assert inferred({"a": 1}, {"a": "x"}) == "struct<a:string>"
    assert inferred({"a": {"b": 1}}, {"a": {"b": 2}}, {"a": [1]}) == "struct<a:struct<b:bigint>>"


def test_numbers_are_one_kind_whole_ones_bigint_fractions_double_huge_ones_decimal():
    assert inferred({"n": 1}, {"n": 2}) == "struct<n:bigint>"
    # JSON writers drop the .0 of whole doubles: 12 and 12.5 are one column.
    assert inferred({"n": 12}, {"n": 12.5}) == "struct<n:double>"
    assert inferred({"n": 2**70}, {"n": 1}) == "struct<n:decimal(38,0)>"
    assert inferred({"n": 10**40}) == "struct<n:double>"


def test_only_nulls_empty_objects_and_empty_arrays_keep_their_json_text():
    assert inferred({"a": None, "b": {}, "c": []}) == "struct<a:string,b:string,c:array<string>>"
    # Parquet cannot store a struct without fields: such a schema is never inferred.
    assert schema_problems(infer(['{"b": {}}'])) == []


def test_what_lies_deeper_than_max_depth_is_one_json_text_column():
    schema = infer([json.dumps({"deep": deep(60)})], Limits(max_depth=3))
    assert type_string(schema) == "struct<deep:struct<a:struct<a:struct<a:string>>>>"
    assert schema_problems(schema) == []
    arrays = inferred({"l": [[[[[1]]]]]}, limits=Limits(max_depth=2))
    assert arrays == "struct<l:array<array<string>>>"


def test_the_default_depth_keeps_a_60_deep_record_readable_by_delta_rs():
    schema = infer([json.dumps({"deep": deep(60)}), json.dumps({"id": 1})])
    assert schema_problems(schema) == []
    assert type_string(schema).count("struct<") == 1 + 10


def test_width_limit_keeps_the_most_frequent_fields_level_by_level():
    documents = [{"a": 1, "b": {"x": 1, "y": 2}}] * 5 + [{"rare": 1}]
    texts = [json.dumps(d) for d in documents]
    # The top level first, then b's fields while the budget lasts.
    assert (
        type_string(infer(texts, Limits(max_columns=4))) == "struct<a:bigint,b:struct<x:bigint>,rare:bigint>"
    )
    # The most frequent first: rare is left to _rescued_data, and b, none of whose fields fit,
    # is kept as its JSON text.
    schema = infer(texts, Limits(max_columns=2))
    assert type_string(schema) == "struct<a:bigint,b:string>"
    assert count_fields(schema) == 2


@pytest.mark.parametrize(
    "names",
    [
        ["first name", "a.b", "a,b;c", "{x}", "(y)", "a\nb", "x=y", "back`tick", "", "nul\x00", "é", "😀"],
    ],
)
def test_any_key_is_a_field(names):
    schema = infer([json.dumps({n: 1 for n in names})])
    assert [f["name"] for f in schema["fields"]] == names
    assert schema_problems(schema) == []


def test_keys_whose_columns_clash_keep_the_most_frequent_and_reserved_keys_are_left_out():
    documents = [{"name": 1, "first_name": 1}] * 3 + [{"Name": 2, "first name": 2, "_rescued_data": 1}]
    schema = infer([json.dumps(d) for d in documents])
    assert [f["name"] for f in schema["fields"]] == ["name", "first_name"]
    nested = infer([json.dumps({"s": {"Name": 1, "NAME": 2}}), json.dumps({"s": {"NAME": 3}})])
    assert type_string(nested) == "struct<s:struct<NAME:bigint>>"
    # Only the top level is the table's own: a nested _kafka field is a field.
    assert inferred({"s": {"_kafka": 1}}) == "struct<s:struct<_kafka:bigint>>"


def test_texts_that_are_not_json_objects_are_skipped():
    deep_text = '{"a":' * 5000 + "1" + "}" * 5000  # deeper than Python's parser goes
    assert type_string(infer(["[1]", "nope", deep_text, '{"a": 1}'])) == "struct<a:bigint>"


def test_a_key_given_twice_counts_its_last_value():
    assert type_string(infer(['{"a": "x", "a": 1}'])) == "struct<a:bigint>"


def test_a_key_with_a_lone_surrogate_escape_is_never_a_field():
    """Python reads ``"\\ud800"`` as a lone surrogate, which py4j cannot send to Spark as UTF-8: as a
    field, every parse of the topic failed (UnicodeEncodeError), the version persisted, so every
    later run too. Such keys are rescued; a version that has one is repaired."""
    from kafkalake.lake.schema_algebra import repaired

    schema = infer(['{"a": 1, "\\ud800": 2, "n": {"\\udfff": 1, "b": 2}, "\\ud83d\\ude00": 3}'])

    assert type_string(schema) == "struct<a:bigint,n:struct<b:bigint>,\U0001f600:bigint>"
    assert schema_problems(schema) == []
    a, lone = ({"name": n, "type": "long", "nullable": True, "metadata": {}} for n in ("a", "\ud800"))
    recorded = {"type": "struct", "fields": [a, lone]}
    assert len(schema_problems(recorded)) == 1
    assert repaired(recorded) == {"type": "struct", "fields": [a]}
