"""Schema algebra: column names, what a table can take, merging within the width budget, type
hints, repairs. Pure."""

from __future__ import annotations

import pytest

from kafkalake.config.parsed import column_name
from kafkalake.lake.schema_algebra import (
    merge,
    repaired,
    schema_problems,
    table_type,
    type_string,
    with_type_hints,
)


def field(name: str, data_type: object) -> dict[str, object]:
    return {"name": name, "type": data_type, "nullable": True, "metadata": {}}


def struct(*fields: dict[str, object]) -> dict[str, object]:
    return {"type": "struct", "fields": list(fields)}


@pytest.mark.parametrize(
    ("key", "column"),
    [
        ("first name", "first_name"),
        ("a,b;c", "a_b_c"),
        ("{x}(y)", "_x__y_"),
        ("a\nb\tc", "a_b_c"),
        ("x=y", "x_y"),
        ("nul\x00", "nul_"),
        ("", "_"),
        ("a.b", "a.b"),
        ("back`tick", "back`tick"),
        ("é😀", "é😀"),
    ],
)
def test_column_names_replace_what_delta_refuses(key, column):
    assert column_name(key) == column


def test_table_type_renames_nested_fields_and_keeps_the_json_key():
    schema = struct(field("first name", struct(field("zip code", "long"))), field("ok", "string"))
    renamed = table_type(schema)
    top = renamed["fields"][0]
    assert (top["name"], top["metadata"]) == ("first_name", {"json_name": "first name"})
    inner = top["type"]["fields"][0]
    assert (inner["name"], inner["metadata"]) == ("zip_code", {"json_name": "zip code"})
    assert renamed["fields"][1] == field("ok", "string")


def test_schema_problems_name_clashing_columns_empty_structs_and_deep_nesting():
    assert schema_problems(struct()) == []
    assert schema_problems(struct(field("Name", "long"), field("name", "long")))
    assert schema_problems(struct(field("first name", "long"), field("first_name", "long")))
    assert schema_problems(struct(field("s", struct())))
    deep: object = "long"
    for _ in range(45):
        deep = struct(field("a", deep))
    assert "delta-rs" in " ".join(schema_problems(struct(field("d", deep))))


def test_merge_adds_new_fields_within_max_columns_and_lists_the_rest():
    current = struct(field("a", "long"))
    inferred = struct(field("b", "long"), field("c", struct(field("x", "long"))), field("d", "long"))
    merged = merge(current, inferred, max_columns=3)
    assert type_string(merged.schema) == "struct<a:bigint,b:bigint,d:bigint>"
    assert [str(c) for c in merged.changes] == [
        "+ b: bigint",
        "~ c: struct<x:bigint> not added: over parsed.max_columns (its values are rescued)",
        "+ d: bigint",
    ]


def test_merge_treats_a_key_with_the_same_column_as_the_existing_field():
    merged = merge(struct(field("first name", "long")), struct(field("first_name", "string")))
    assert type_string(merged.schema) == "struct<first name:bigint>"
    assert [c.kind for c in merged.changes] == ["conflict"]


def test_type_hints_match_fields_as_their_columns_do():
    schema = struct(field("Amount", "double"), field("customer", struct(field("ID", "long"))))
    hinted = with_type_hints(schema, [("amount", "decimal(10,2)"), ("Customer.id", "string")])
    assert type_string(hinted) == "struct<Amount:decimal(10,2),customer:struct<ID:string>>"


def test_a_hint_never_changes_the_type_of_a_column_the_table_has():
    """Delta cannot change a column's type: a hint changed in the catalog for an existing field,
    written into the next version, failed every later write of the parsed table
    (DELTA_FAILED_TO_MERGE_FIELDS). It applies to the fields the persisted version lacks."""
    persisted = struct(field("id", "long"), field("customer", struct(field("id", "long"))))
    grown = struct(*persisted["fields"], field("coupon", "long"))
    hints = [("ID", "string"), ("customer.id", "string"), ("coupon", "string"), ("customer.tier", "int")]

    hinted = with_type_hints(grown, hints, persisted)

    assert type_string(hinted) == "struct<id:bigint,customer:struct<id:bigint,tier:int>,coupon:string>"
    # Without a persisted version (the topic's first schema), the catalog wins everywhere.
    assert type_string(with_type_hints(grown, hints)) == (
        "struct<id:string,customer:struct<id:string,tier:int>,coupon:string>"
    )


def test_a_version_no_table_could_take_is_repaired_without_touching_what_a_table_can_have():
    broken = struct(
        field("Name", "long"),
        field("name", "string"),
        field("meta", struct()),
        field("s", struct(field("first name", "long"), field("first_name", "long"))),
    )
    fixed = repaired(broken)
    assert type_string(fixed) == "struct<Name:bigint,meta:string,s:struct<first name:bigint>>"
    assert schema_problems(fixed) == []
    assert repaired(fixed) == fixed
