"""`parsed:` settings: validated into a frozen ParsedConfig; every error names its dotted field."""

from __future__ import annotations

import dataclasses

import pytest

from kafkalake.config.parsed import (
    EVOLUTION_MODES,
    EXPECTATION_ACTIONS,
    Expectation,
    ParsedConfig,
    merge_parsed,
    parse_parsed,
)
from kafkalake.config.spark_types import validate_spark_type
from kafkalake.core.errors import ParsedConfigError

FULL = {
    "evolution": "rescue",
    "schema": {"order_id": "bigint", "amount": "decimal(10,2)", "items": "array<struct<sku:string,qty:int>>"},
    "type_hints": {"customer.id": "string", "amount": "decimal(10,2)"},
    "max_value_bytes": 262144,
    "sample_rows": 5000,
    "database": "silver",
    "table": "orders",
    "expectations": [{"name": "positive_amount", "rule": "amount >= 0", "action": "drop"}],
    "latest_by_key": True,
}


def test_names_and_defaults():
    assert EVOLUTION_MODES == ("addNewColumns", "rescue", "failOnNewColumns", "none")
    assert EXPECTATION_ACTIONS == ("warn", "drop", "fail")
    config = ParsedConfig()
    assert (config.enabled, config.evolution, config.schema, config.type_hints) == (
        True,
        "addNewColumns",
        None,
        (),
    )
    assert (config.max_value_bytes, config.sample_rows, config.database, config.table) == (
        1_048_576,
        10_000,
        "silver",
        "",
    )
    assert (config.expectations, config.latest_by_key, config.changelog) == ((), False, False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.enabled = False  # type: ignore[misc]


@pytest.mark.parametrize("value", [None, True, {}])
def test_omitted_true_and_empty_mean_the_defaults(value):
    assert parse_parsed(value) == ParsedConfig()


@pytest.mark.parametrize("value", [False, {"enabled": False}])
def test_false_turns_parsed_tables_off(value):
    assert parse_parsed(value) == ParsedConfig(enabled=False)


def test_every_key():
    config = parse_parsed(FULL)
    assert config.evolution == "rescue"
    # The schema keeps the file's order; type hints are sorted.
    assert config.schema == (
        ("order_id", "bigint"),
        ("amount", "decimal(10,2)"),
        ("items", "array<struct<sku:string,qty:int>>"),
    )
    assert config.type_hints == (("amount", "decimal(10,2)"), ("customer.id", "string"))
    assert (config.max_value_bytes, config.sample_rows, config.database, config.table) == (
        262144,
        5000,
        "silver",
        "orders",
    )
    assert config.expectations == (Expectation("positive_amount", "amount >= 0", "drop"),)
    assert (config.latest_by_key, config.changelog) == (True, False)


@pytest.mark.parametrize(
    ("value", "latest_by_key", "changelog"),
    [
        ({"latest_by_key": True}, True, False),
        ({"latest_by_key": False}, False, False),
        ({"latest_by_key": {"changelog": True}}, True, True),
        ({"latest_by_key": {"changelog": False}}, True, False),
        ({"latest_by_key": {}}, True, False),
        ({"changelog": True}, True, True),  # implies latest_by_key
        ({"changelog": True, "latest_by_key": True}, True, True),
        ({"changelog": True, "latest_by_key": {"changelog": True}}, True, True),
        ({"changelog": False}, False, False),
    ],
)
def test_latest_by_key_and_changelog(value, latest_by_key, changelog):
    config = parse_parsed(value)
    assert (config.latest_by_key, config.changelog) == (latest_by_key, changelog)


ERRORS = [
    # value, field, part of the message
    (5, "parsed", "true, false or a mapping"),
    ({"evolutoin": "rescue"}, "parsed.evolutoin", "allowed: enabled, evolution, schema"),
    ({"enabled": "yes"}, "parsed.enabled", "true or false"),
    ({"enabled": False, "evolution": "rescue"}, "parsed.evolution", "does nothing"),
    ({"evolution": "addnewcolumns"}, "parsed.evolution", "did you mean 'addNewColumns'?"),
    ({"evolution": "fail_on_new_columns"}, "parsed.evolution", "did you mean 'failOnNewColumns'?"),
    ({"evolution": "merge"}, "parsed.evolution", "addNewColumns, rescue, failOnNewColumns, none"),
    ({"evolution": True}, "parsed.evolution", "not True"),
    ({"schema": {}}, "parsed.schema", "at least one field"),
    ({"schema": ["a"]}, "parsed.schema", "must map field names"),
    ({"schema": {"": "int"}}, "parsed.schema", "non-empty field name"),
    ({"schema": {"a": "bigintt"}}, "parsed.schema.a", "unknown type 'bigintt'"),
    ({"schema": {"a": 5}}, "parsed.schema.a", "type string"),
    ({"schema": {"a": "array<int"}}, "parsed.schema.a", "unbalanced '<'"),
    ({"schema": {"_kafka_offset": "bigint"}}, "parsed.schema._kafka_offset", "reserved"),
    ({"schema": {"_KAFKA": "bigint"}}, "parsed.schema._KAFKA", "reserved"),
    ({"schema": {"_rescued_data": "string"}}, "parsed.schema._rescued_data", "reserved"),
    ({"schema": {"id": "int", "ID": "int"}}, "parsed.schema.ID", "twice"),
    ({"type_hints": {"a..b": "int"}}, "parsed.type_hints", "dotted field path"),
    ({"type_hints": {"a.b": "decimal(40)"}}, "parsed.type_hints.a.b", "precision"),
    ({"type_hints": "a: int"}, "parsed.type_hints", "must map"),
    ({"max_value_bytes": 0}, "parsed.max_value_bytes", "not 0"),
    ({"max_value_bytes": 2_147_483_648}, "parsed.max_value_bytes", "2147483647"),
    ({"max_value_bytes": True}, "parsed.max_value_bytes", "not True"),
    ({"max_value_bytes": "1MB"}, "parsed.max_value_bytes", "whole number"),
    ({"sample_rows": 99}, "parsed.sample_rows", "from 100"),
    ({"sample_rows": 1000.0}, "parsed.sample_rows", "whole number"),
    ({"database": "Silver"}, "parsed.database", "lower-case SQL identifier"),
    ({"table": "orders-v2"}, "parsed.table", "lower-case SQL identifier"),
    ({"table": ""}, "parsed.table", "lower-case SQL identifier"),
    ({"expectations": {"name": "x"}}, "parsed.expectations", "list"),
    (
        {"expectations": [{"name": "x", "rule": "a > 0"}]},
        "parsed.expectations[0]",
        "exactly name, rule, action",
    ),
    (
        {"expectations": [{"name": "x", "rule": "a > 0", "action": "drop", "when": "always"}]},
        "parsed.expectations[0]",
        "exactly name, rule, action",
    ),
    ({"expectations": ["a > 0"]}, "parsed.expectations[0]", "mapping"),
    (
        {"expectations": [{"name": "1x", "rule": "a", "action": "drop"}]},
        "parsed.expectations[0].name",
        "identifier",
    ),
    (
        {"expectations": [{"name": "x", "rule": " ", "action": "drop"}]},
        "parsed.expectations[0].rule",
        "non-empty",
    ),
    (
        {
            "expectations": [
                {"name": "a", "rule": "x > 0", "action": "warn"},
                {"name": "b", "rule": "y > 0", "action": "warn"},
                {"name": "c", "rule": "z > 0", "action": "quarantine"},
            ]
        },
        "parsed.expectations[2].action",
        "warn, drop, fail",
    ),
    (
        {
            "expectations": [
                {"name": "x", "rule": "a", "action": "drop"},
                {"name": "x", "rule": "b", "action": "fail"},
            ]
        },
        "parsed.expectations[1].name",
        "earlier expectation",
    ),
    ({"latest_by_key": "yes"}, "parsed.latest_by_key", "true, false"),
    ({"latest_by_key": {"changelog": "yes"}}, "parsed.latest_by_key", "changelog"),
    ({"latest_by_key": {"tombstones": True}}, "parsed.latest_by_key", "changelog"),
    ({"changelog": 1}, "parsed.changelog", "true or false"),
    ({"changelog": True, "latest_by_key": False}, "parsed.changelog", "needs the latest table"),
    ({"changelog": False, "latest_by_key": {"changelog": True}}, "parsed.changelog", "contradicts"),
]


@pytest.mark.parametrize(("value", "field", "says"), ERRORS)
def test_errors_name_their_field(value, field, says):
    with pytest.raises(ParsedConfigError) as excinfo:
        parse_parsed(value)
    assert excinfo.value.field == field
    assert says in str(excinfo.value)
    assert isinstance(excinfo.value, ValueError)


# ---------------------------------------------------------------------------------------------
# defaults: parsed + a topic's parsed


@pytest.mark.parametrize(
    ("default", "own", "merged"),
    [
        (None, None, None),
        ({"sample_rows": 500}, None, {"sample_rows": 500}),
        (None, {"table": "t"}, {"table": "t"}),
        (
            {"sample_rows": 500, "evolution": "rescue"},
            {"evolution": "none"},
            {"sample_rows": 500, "evolution": "none"},
        ),
        ({"sample_rows": 500}, True, {"sample_rows": 500}),
        ({"sample_rows": 500}, False, False),  # `parsed: false` is the whole answer
        (False, {"latest_by_key": True}, {"latest_by_key": True}),  # a topic turns them back on
        (False, True, {}),
        ({"enabled": False}, {"sample_rows": 500}, {"sample_rows": 500}),
        (True, {"enabled": False}, {"enabled": False}),
        ("junk", {"sample_rows": 500}, "junk"),  # left for parse_parsed to report
        ({"sample_rows": 500}, "junk", "junk"),
    ],
)
def test_merge_parsed(default, own, merged):
    assert merge_parsed(default, own) == merged


# ---------------------------------------------------------------------------------------------
# Spark SQL type strings


@pytest.mark.parametrize(
    "text",
    [
        "boolean",
        "TINYINT",
        "byte",
        "smallint",
        "short",
        "int",
        "Integer",
        "bigint",
        "long",
        "float",
        "real",
        "double",
        "string",
        "binary",
        "date",
        "timestamp",
        "timestamp_ntz",
        "variant",
        "decimal",
        "decimal(38)",
        "DECIMAL(10, 2)",
        "decimal(1,0)",
        "decimal(38,38)",
        "array<int>",
        "array< array<string> >",
        "map<string,bigint>",
        "MAP<STRING, ARRAY<STRUCT<a:INT>>>",
        "struct<a:int,b:string>",
        "struct<a int, b string>",
        "struct<`odd name`:int, `back``tick`: string>",
        "struct<>",
        "struct<items:array<struct<sku:string,qty:int>>,price:decimal(10,2)>",
        "  string  ",
    ],
)
def test_valid_spark_types(text):
    validate_spark_type(text)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "empty type"),
        ("   ", "empty type"),
        ("bigintt", "unknown type 'bigintt'"),
        ("varchar(10)", "unknown type 'varchar'"),
        ("array<int", "unbalanced '<'"),
        ("map<string,int", "unbalanced '<'"),
        ("struct<a:int", "unbalanced '<'"),
        ("struct<a:int,", "unbalanced '<'"),
        ("array<int>>", "unbalanced '>'"),
        ("decimal(10,2", "unbalanced '('"),
        ("decimal(0)", "precision must be from 1 to 38"),
        ("decimal(39,2)", "precision must be from 1 to 38"),
        ("decimal(5,6)", "scale (6) cannot exceed its precision (5)"),
        ("decimal(a)", "whole numbers"),
        ("decimal(10,2,1)", "expected ')'"),
        ("array", "array needs its parts in '<…>'"),
        ("map<int>", "expected ','"),
        ("array<>", "expected a type, found '>'"),
        ("struct<a:int,a:string>", "given twice"),
        ("struct<:int>", "expected a struct field name"),
        ("struct<``:int>", "field name is empty"),
        ("struct<a>", "expected a type, found '>'"),
        ("int int", "unexpected 'int' after a complete type"),
        ("`abc", "unterminated '`'"),
        ("int;", "unexpected character ';'"),
        ("array<bigintt>", "unknown type 'bigintt'"),
    ],
)
def test_invalid_spark_types_say_what_is_wrong(text, says):
    with pytest.raises(ValueError) as excinfo:
        validate_spark_type(text)
    assert says in str(excinfo.value)


# ---------------------------------------------------------------------------------------------
# Expectation rules are checked for syntax at load (no Spark at DAG parse time)

GOOD_RULES = [
    "amount >= 0",
    "currency IN ('EUR', 'USD')",
    "a IS NOT NULL AND b BETWEEN 1 AND 2",
    "size(items) > 0",
    "exists(items, x -> x.qty > 0)",
    "CASE WHEN a > 1 THEN true ELSE false END",
    "CAST(amount AS decimal(10,2)) > 0",
    "`first_name` IS NOT NULL",
    "detail.qty[0] = 'x'",
    "NOT (name LIKE 'x%')",
    "ts > current_timestamp() - INTERVAL 1 DAY",
    "day > DATE '2026-01-01'",
    "count(*) > 0",
    "a::int > 1",
    "lower(x) NOT IN ('a')",
    "a <=> b",
    "a || b = 'ab'",
    "transform(a, (x, i) -> x + i) IS NOT NULL",
    "a RLIKE '^[a-z]+$'",
    "a IS DISTINCT FROM b",
    "abs(a) % 2 = 0 -- even",
]
BAD_RULES = {
    "amount >=": "an operand is missing at the end",
    "(amount > 0": "unbalanced '(': a closing ')' is missing",
    "amount > 0)": "unbalanced ')'",
    "name = 'x": "unterminated '",
    "a b": "unexpected 'b' after a complete expression",
    "a > 0; DROP TABLE t": "one expression, not statements",
    "AND a": "an operand is missing before 'AND'",
    "a IN ()": "nothing between",
    "CASE a END": "CASE needs at least one WHEN",
    "cast(a as )": "expected a type",
    "a = = b": "an operand is missing before '='",
    "f(a,)": "an operand is missing before ')'",
    "x[1)": "unbalanced ')'",
}


@pytest.mark.parametrize("rule", GOOD_RULES)
def test_spark_sql_rules_load(rule):
    config = parse_parsed({"expectations": [{"name": "r", "rule": rule, "action": "warn"}]})
    assert config.expectations[0].rule == rule


@pytest.mark.parametrize(("rule", "says"), BAD_RULES.items())
def test_a_rule_that_cannot_parse_is_refused_naming_its_field(rule, says):
    with pytest.raises(ParsedConfigError) as caught:
        parse_parsed({"expectations": [{"name": "r", "rule": rule, "action": "warn"}]})
    assert caught.value.field == "parsed.expectations[0].rule"
    assert says in str(caught.value)


def test_depth_and_width_limits_have_defaults_and_bounds():
    config = ParsedConfig()
    assert (config.max_depth, config.max_columns) == (10, 500)
    assert parse_parsed({"max_depth": 32, "max_columns": 20}).max_depth == 32
    for key, bad in (("max_depth", 33), ("max_depth", 0), ("max_columns", 0), ("max_columns", "many")):
        with pytest.raises(ParsedConfigError) as caught:
            parse_parsed({key: bad})
        assert caught.value.field == f"parsed.{key}"


def test_a_pinned_type_deeper_than_other_engines_open_is_refused():
    deep = "struct<a:" * 33 + "int" + ">" * 33
    with pytest.raises(ParsedConfigError) as caught:
        parse_parsed({"schema": {"payload": deep}})
    assert caught.value.field == "parsed.schema.payload" and "delta-rs" in str(caught.value)


def test_pinned_names_whose_columns_clash_are_refused():
    with pytest.raises(ParsedConfigError) as caught:
        parse_parsed({"schema": {"first name": "string", "first_name": "string"}})
    assert caught.value.field == "parsed.schema.first_name"
    assert "'first_name'" in str(caught.value)
