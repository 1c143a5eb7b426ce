"""A topic's `parsed:` settings: typed columns from its JSON values, a dead-letter and a latest table.

Pure validation, run at DAG parse time: no pyspark, no JVM. Errors are `ParsedConfigError`s naming a
dotted field (`parsed.evolution`, `parsed.expectations[0].action`); the catalog adds file and topic.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from kafkalake.config.spark_types import type_depth, validate_spark_type
from kafkalake.config.sql_expression import check_boolean_expression
from kafkalake.core.errors import ParsedConfigError

#: Auto Loader's names for what happens when the data brings a column the table lacks.
EVOLUTION_MODES = ("addNewColumns", "rescue", "failOnNewColumns", "none")
#: DLT's meanings: keep the row and count it, drop it, or fail the batch.
EXPECTATION_ACTIONS = ("warn", "drop", "fail")
#: What a topic's values are (the topic's ``format``): JSON objects, or Debezium's change events in
#: JSON (with or without the JSON converter's ``{schema, payload}`` envelope).
FORMATS = ("json", "debezium")
#: A lower-case SQL identifier: database and table names.
SQL_IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]*")
#: A table's name is its folder's name, which file systems keep to 255 bytes; a parsed table's
#: dead-letter table is a folder beside it with ``_dead_letter`` added.
MAX_TABLE_NAME = 255
MAX_PARSED_TABLE_NAME = MAX_TABLE_NAME - len("_dead_letter")
#: The Hive metastore keeps a database's name in 128 characters.
MAX_DATABASE_NAME = 128
MAX_INT32 = 2_147_483_647
MIN_SAMPLE_ROWS = 100
#: delta-rs (and other kernel-based readers) cannot open a table whose schema JSON nests past
#: serde_json's recursion limit of 128: a struct costs 3 levels there, so ~42 nested structs. 32
#: leaves room for arrays and maps around them (checked: 40 structs open, 50 do not).
MAX_DEPTH_LIMIT = 32
#: Columns at every depth (a struct and each of its fields count one each).
MAX_COLUMNS_LIMIT = 10_000

_EXPECTATION_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_EXPECTATION_KEYS = ("name", "rule", "action")
_KEYS = (
    "enabled",
    "evolution",
    "schema",
    "type_hints",
    "max_value_bytes",
    "sample_rows",
    "max_depth",
    "max_columns",
    "database",
    "table",
    "expectations",
    "latest_by_key",
    "changelog",
)


@dataclass(frozen=True)
class Expectation:
    name: str
    #: A Spark SQL boolean expression over the parsed columns.
    rule: str
    action: str


@dataclass(frozen=True)
class ParsedConfig:
    enabled: bool = True
    evolution: str = "addNewColumns"
    #: A pinned schema: (top-level field, Spark SQL type) in file order; None infers it.
    schema: tuple[tuple[str, str], ...] | None = None
    #: (dotted field path, Spark SQL type), sorted: types inference must not guess.
    type_hints: tuple[tuple[str, str], ...] = ()
    #: Larger values go to the dead-letter table.
    max_value_bytes: int = 1_048_576
    #: Rows sampled by schema inference.
    sample_rows: int = 10_000
    #: Nesting levels (objects and arrays) a column's type may have; what lies deeper is kept as
    #: its JSON text in a string field.
    max_depth: int = 10
    #: Columns (at every depth) inference and evolution may give the table; the fields beyond are
    #: kept in ``_rescued_data``.
    max_columns: int = 500
    database: str = "silver"
    #: Empty means the topic's table name; TopicConfig fills it in.
    table: str = ""
    expectations: tuple[Expectation, ...] = ()
    #: Keep a ``<table>_latest`` table: one row per Kafka key.
    latest_by_key: bool = False
    #: A null value (tombstone) deletes its key from the latest table.
    changelog: bool = False
    #: The topic's ``format`` (:data:`FORMATS`): ``debezium`` adds the current-state table.
    format: str = "json"
    #: The JSON follows a schema registry's 5-byte frame (``format: json_schema``): set from the
    #: topic's format by TopicConfig, not a key of the catalog's ``parsed`` block.
    framed: bool = False

    @property
    def debezium(self) -> bool:
        return self.format == "debezium"


#: What Delta refuses in a column name without column mapping, and control characters (Arrow, so
#: delta-rs, refuses NUL). Column mapping would lift this, but delta-rs 1.6.6 reads a column-mapped
#: table written by Spark as all NULLs through ``to_pyarrow_table``/``to_pyarrow_dataset``.
_NOT_IN_COLUMN_NAMES = re.compile(r"[ ,;{}()=\x00-\x1f\x7f]")
#: Where a column keeps the JSON key it comes from, when the two differ.
JSON_NAME = "json_name"


def column_name(json_name: str) -> str:
    """The parsed table's column name for a JSON key: each character Delta refuses becomes ``_``.

    ``first name`` → ``first_name``, ``a=b`` → ``a_b``, the empty key → ``_``. Dots and backticks stay:
    every name reaching SQL is quoted.
    """
    return _NOT_IN_COLUMN_NAMES.sub("_", json_name) or "_"


def clash_key(json_name: str) -> str:
    """Two JSON keys with the same clash key would be one column."""
    return column_name(json_name).lower()


def merge_parsed(default: Any, own: Any) -> Any:
    """The `parsed:` value a topic gets from `defaults: parsed:` and its own, merged key by key.

    A topic's ``parsed: false`` is the whole answer; a topic's ``true`` or mapping turns parsed tables
    on even where the defaults turn them off. Values that are neither bool nor mapping pass through
    for `parse_parsed` to report.
    """
    if own is None:
        return default
    if default is None or own is False or not isinstance(own, Mapping | bool):
        return own
    base = {"enabled": False} if default is False else {} if default is True else default
    if not isinstance(base, Mapping):
        return default  # for parse_parsed to report
    merged = {k: v for k, v in base.items() if k != "enabled" or base.get("enabled") is not False}
    merged.update(own if isinstance(own, Mapping) else {})
    return merged


def parse_parsed(value: Any) -> ParsedConfig:
    """Validate a topic's `parsed:` value (None, true, false or a mapping) into a ParsedConfig."""
    if value is None or value is True:
        return ParsedConfig()
    if value is False:
        return ParsedConfig(enabled=False)
    if not isinstance(value, Mapping):
        raise ParsedConfigError("parsed", f"must be true, false or a mapping, not {value!r}")
    unknown = sorted(str(k) for k in value if k not in _KEYS)
    if unknown:
        raise ParsedConfigError(f"parsed.{unknown[0]}", f"unknown key; allowed: {', '.join(_KEYS)}")

    enabled = value.get("enabled", True)
    if not isinstance(enabled, bool):
        raise ParsedConfigError("parsed.enabled", f"must be true or false, not {enabled!r}")
    if not enabled:
        others = [k for k in _KEYS if k in value and k != "enabled"]
        if others:
            raise ParsedConfigError(
                f"parsed.{others[0]}", "does nothing while parsed tables are off (parsed.enabled: false)"
            )
        return ParsedConfig(enabled=False)

    latest_by_key, changelog = _latest(value)
    return ParsedConfig(
        evolution=_evolution(value.get("evolution", ParsedConfig.evolution)),
        schema=None if value.get("schema") is None else _schema(value["schema"]),
        type_hints=tuple(sorted(_types("parsed.type_hints", value.get("type_hints", {}), dotted=True))),
        max_value_bytes=_whole(
            "parsed.max_value_bytes", value.get("max_value_bytes", ParsedConfig.max_value_bytes), 1
        ),
        sample_rows=_whole(
            "parsed.sample_rows", value.get("sample_rows", ParsedConfig.sample_rows), MIN_SAMPLE_ROWS
        ),
        max_depth=_whole(
            "parsed.max_depth", value.get("max_depth", ParsedConfig.max_depth), 1, MAX_DEPTH_LIMIT
        ),
        max_columns=_whole(
            "parsed.max_columns", value.get("max_columns", ParsedConfig.max_columns), 1, MAX_COLUMNS_LIMIT
        ),
        database=_identifier(
            "parsed.database", value.get("database", ParsedConfig.database), MAX_DATABASE_NAME
        ),
        table=_identifier("parsed.table", value["table"], MAX_PARSED_TABLE_NAME) if "table" in value else "",
        expectations=_expectations(value.get("expectations", [])),
        latest_by_key=latest_by_key,
        changelog=changelog,
    )


def with_format(parsed: ParsedConfig, value: Any) -> ParsedConfig:
    """``parsed`` for a topic whose ``format`` is ``value`` (None: json).

    ``debezium`` needs the parsed tables (the change history is the parsed table, the source table
    as it is the current-state table beside it) and takes the latest-row table's place; its
    tombstones (after each delete) are counted as tombstones, not dead letters.
    """
    if value != "debezium":
        # Every other format (and an unknown one, refused naming the formats) is the topic's
        # concern: kafkalake.config.topic_validation.
        return parsed
    if not parsed.enabled:
        raise ParsedConfigError(
            "format",
            "debezium needs the parsed tables (the change history and the current state): not parsed: false",
        )
    if parsed.latest_by_key:
        raise ParsedConfigError(
            "parsed.latest_by_key",
            "a debezium topic keeps the source table's current state (<table>_current) instead of the "
            "latest record per key: leave latest_by_key out",
        )
    return replace(parsed, format="debezium", changelog=True)


def _evolution(mode: Any) -> str:
    if mode in EVOLUTION_MODES:
        return str(mode)
    hint = ""
    if isinstance(mode, str):
        by_lower = {m.lower(): m for m in EVOLUTION_MODES}
        close = difflib.get_close_matches(mode.lower().replace("_", ""), by_lower, n=1)
        if close:
            hint = f"; did you mean {by_lower[close[0]]!r}?"
    raise ParsedConfigError(
        "parsed.evolution", f"must be one of {', '.join(EVOLUTION_MODES)}, not {mode!r}{hint}"
    )


def _schema(schema: Any) -> tuple[tuple[str, str], ...]:
    fields = _types("parsed.schema", schema, dotted=False)
    if not fields:
        raise ParsedConfigError(
            "parsed.schema", "a pinned schema needs at least one field (omit it to infer)"
        )
    seen: set[str] = set()
    for name, _ in fields:
        lower = clash_key(name)
        if lower.startswith("_kafka") or lower == "_rescued_data":
            raise ParsedConfigError(
                f"parsed.schema.{name}", "reserved for the table's own columns (_kafka*, _rescued_data)"
            )
        if clash_key(name) in seen:
            # Spark resolves column names case-insensitively, and the column of `first name` is
            # first_name.
            raise ParsedConfigError(
                f"parsed.schema.{name}", f"given twice (its column {column_name(name)!r} is another's)"
            )
        seen.add(clash_key(name))
    return tuple(fields)


def _types(field: str, mapping: Any, *, dotted: bool) -> list[tuple[str, str]]:
    if not isinstance(mapping, Mapping):
        raise ParsedConfigError(field, f"must map field names to Spark SQL types, not {mapping!r}")
    pairs: list[tuple[str, str]] = []
    for name, spark_type in mapping.items():
        if not isinstance(name, str) or not name or (dotted and "" in name.split(".")):
            what = "a dotted field path such as customer.id" if dotted else "a non-empty field name"
            # YAML 1.1 reads on/off/yes/no/true/false (any case) unquoted as booleans, 1 as a number.
            hint = ": quote it, YAML read it as a boolean or a number" if not isinstance(name, str) else ""
            raise ParsedConfigError(field, f"{name!r} is not {what}{hint}")
        if not isinstance(spark_type, str):
            raise ParsedConfigError(f"{field}.{name}", f"must be a Spark SQL type string, not {spark_type!r}")
        try:
            validate_spark_type(spark_type)
        except ValueError as err:
            raise ParsedConfigError(f"{field}.{name}", f"{spark_type!r}: {err}") from None
        levels = type_depth(spark_type) + (name.count(".") if dotted else 0)
        if levels > MAX_DEPTH_LIMIT:
            raise ParsedConfigError(
                f"{field}.{name}",
                f"{spark_type!r} nests {levels} levels deep; other engines (delta-rs) cannot open a table "
                f"nested past {MAX_DEPTH_LIMIT}",
            )
        pairs.append((name, spark_type))
    return pairs


def _whole(field: str, number: Any, least: int, most: int = MAX_INT32) -> int:
    if isinstance(number, bool) or not isinstance(number, int) or not least <= number <= most:
        raise ParsedConfigError(field, f"must be a whole number from {least} to {most}, not {number!r}")
    return number


def _identifier(field: str, name: Any, most: int) -> str:
    problem = identifier_problem(name, most)
    if problem is not None:
        raise ParsedConfigError(field, problem)
    return name  # type: ignore[no-any-return]


def identifier_problem(name: Any, most: int) -> str | None:
    """Why ``name`` cannot be a table's or a database's name of at most ``most`` characters; None
    when it can."""
    if not isinstance(name, str) or not SQL_IDENTIFIER.fullmatch(name):
        return f"must be a lower-case SQL identifier, not {name!r}"
    if len(name) > most:
        return f"must be at most {most} characters, not {len(name)} ({name[:40]}...)"
    return None


def _expectations(entries: Any) -> tuple[Expectation, ...]:
    if not isinstance(entries, list):
        raise ParsedConfigError("parsed.expectations", "must be a list of {name, rule, action} mappings")
    result: list[Expectation] = []
    for index, entry in enumerate(entries):
        where = f"parsed.expectations[{index}]"
        if not isinstance(entry, Mapping) or set(entry) != set(_EXPECTATION_KEYS):
            raise ParsedConfigError(
                where, f"must be a mapping with exactly name, rule, action; not {entry!r}"
            )
        name, rule, action = (entry[k] for k in _EXPECTATION_KEYS)
        if not isinstance(name, str) or not _EXPECTATION_NAME.fullmatch(name):
            raise ParsedConfigError(
                f"{where}.name", f"must be an identifier (letters, digits, _), not {name!r}"
            )
        if any(e.name == name for e in result):
            raise ParsedConfigError(f"{where}.name", f"{name!r} is used by an earlier expectation")
        if not isinstance(rule, str) or not rule.strip():
            raise ParsedConfigError(f"{where}.rule", "must be a non-empty Spark SQL boolean expression")
        try:
            check_boolean_expression(rule)
        except ValueError as err:
            raise ParsedConfigError(f"{where}.rule", f"{rule.strip()!r} does not parse: {err}") from None
        if action not in EXPECTATION_ACTIONS:
            raise ParsedConfigError(
                f"{where}.action", f"must be one of {', '.join(EXPECTATION_ACTIONS)}, not {action!r}"
            )
        result.append(Expectation(name=name, rule=rule.strip(), action=action))
    return tuple(result)


def _latest(value: Mapping[str, Any]) -> tuple[bool, bool]:
    """`latest_by_key: true | false | {changelog: bool}` and `changelog: bool`, which implies it."""
    latest = value.get("latest_by_key")
    changelog = value.get("changelog")
    if changelog is not None and not isinstance(changelog, bool):
        raise ParsedConfigError("parsed.changelog", f"must be true or false, not {changelog!r}")
    if isinstance(latest, Mapping):
        if set(latest) - {"changelog"} or not isinstance(latest.get("changelog", False), bool):
            raise ParsedConfigError(
                "parsed.latest_by_key",
                f"must be true, false or {{changelog: true|false}}, not {dict(latest)!r}",
            )
        nested = latest.get("changelog", False)
        if changelog is not None and changelog != nested:
            raise ParsedConfigError("parsed.changelog", "contradicts parsed.latest_by_key.changelog")
        return True, nested
    if latest is not None and not isinstance(latest, bool):
        raise ParsedConfigError(
            "parsed.latest_by_key", f"must be true, false or {{changelog: true}}, not {latest!r}"
        )
    if latest is False and changelog:
        raise ParsedConfigError(
            "parsed.changelog",
            "needs the latest table: a tombstone deletes its key there (latest_by_key: false)",
        )
    changelog = bool(changelog)
    return bool(latest) or changelog, changelog
