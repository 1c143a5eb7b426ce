"""From bronze rows (Kafka's bytes) to typed rows, rescued data, or a dead-letter reason.

Every record ends in exactly one place, so nothing is lost silently:

* a parsed row, whose typed columns come from the persisted schema; a value that does not fit its
  column's type, or a field the schema does not know, is kept as JSON in ``_rescued_data``
  (evolution modes ``addNewColumns``, ``rescue``, ``failOnNewColumns``);
* a dead-letter row with its reason: an empty value, a value over the size limit, invalid UTF-8,
  malformed JSON, JSON that is not an object, and (mode ``none``, which has no rescue column) a
  type mismatch; a record that breaks a ``drop`` expectation goes there too;
* a tombstone (a null value on a changelog topic), which deletes its key in the latest-row table.

Type mismatches are found by comparing each field's raw JSON text with its parsed value: Spark's
``from_json`` turns a value it cannot convert into a null and carries on, so "raw text present,
parsed value null" is exactly the silent loss to catch. Structs are checked field by field and
arrays element by element, at any depth. A decimal is the other silent loss: ``from_json`` rounds
``12.345`` into a ``decimal(10,2)`` as ``12.35``, so a decimal that differs from its raw text read
with every digit the column's integer part allows is rescued too.

Records are parsed by their JSON keys (the schema history's names); each top-level field then
becomes its table column, :func:`~kafkalake.config.parsed.column_name` of the key at every depth.
Names reach Spark only as literals or quoted
(:func:`~kafkalake.spark.table_settings.quote_identifier`): a key may hold dots, backticks, spaces.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from kafkalake.config.parsed import JSON_NAME, Expectation, ParsedConfig, column_name
from kafkalake.lake import schema_inference
from kafkalake.lake.schema_algebra import (
    RESCUED_COLUMN,
    Schema,
    table_type,
    with_type_hints,
    without_reserved,
)
from kafkalake.spark import wire_format
from kafkalake.spark.json_functions import TRAILING_KEYS, from_json_keyed, utf8_text
from kafkalake.spark.json_functions import from_json as json_from_json
from kafkalake.spark.table_settings import quote_identifier

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

#: The Kafka metadata of a parsed row, in one struct column so no JSON field name can clash with it.
KAFKA_COLUMN = "_kafka"
#: Working columns of a parsed batch; never written to a table.
REASON = "_kafka_reason"
DETAIL = "_kafka_detail"
VALUE = "_kafka_value"
TEXT = "_kafka_text"

TOMBSTONE = "tombstone"
#: Reasons a record lands in the dead-letter table (expectations add ``expectation:<name>``).
DEAD_LETTER_REASONS = (
    "empty_value",
    "oversize",
    "invalid_utf8",
    "malformed_json",
    "not_an_object",
    "type_mismatch",
    "not_rescuable",
    # Topics in a schema registry's format (spark/registry_parser).
    "bad_magic_byte",
    "unknown_schema_id",
    "undecodable",
)
_DECIMAL = re.compile(r"decimal\((\d+),\s*(\d+)\)")


def _balanced(
    combine: Callable[[Column, Column], Column], columns: Sequence[Column], empty: Column
) -> Column:
    """``columns`` combined pairwise as a balanced tree, ``empty`` when there are none.

    A left-deep chain (``a + b + c + ...``) over a record's fields is as deep as the schema is wide,
    and Spark converts and analyses column trees recursively: with a few hundred fields (a record
    with thousands of keys, ``max_columns`` of them columns) the chain overflowed the driver's stack
    (StackOverflowError in ``withColumn``) and parked the parsed side for good. A balanced tree is
    log2(width) deep, with the same value.
    """
    level = list(columns)
    if not level:
        return empty
    while len(level) > 1:
        paired = [combine(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        level = paired + ([level[-1]] if len(level) % 2 else [])
    return level[0]


def _has_unknown(raw_fields: Column, names: Sequence[str]) -> Column:
    """True where the JSON object (as a map) has a key that is not one of ``names``.

    Counted rather than filtered: ``map_filter`` runs an interpreted lambda on every key of every
    record, and almost every record has no unknown key. A key whose JSON value is null still counts
    (``map_contains_key``, not a lookup).
    """
    from pyspark.sql import functions as F

    known = [F.map_contains_key(raw_fields, F.lit(name)).cast("int") for name in names]
    return F.size(raw_fields) > _balanced(operator.add, known, F.lit(0))


def _lossy(
    raw: Column, parsed: Column, data_type: Any, unknown_lost: bool = True, twice_lost: bool = False
) -> Column:
    """True where the raw JSON text holds something the parsed value lost (at any depth).

    Args:
        unknown_lost: whether a struct's key that the schema does not know counts as lost (to
            rescue), or is ignored (mode ``none``, at every depth as at the top). A known key given
            twice is one more key than the schema knows, so it counts too.
        twice_lost: where unknown keys do not count, whether a known key given twice does (mode
            ``none``, which has no rescue column for the value the parse did not keep).
    """
    from pyspark.sql import functions as F

    present = raw.isNotNull()
    if isinstance(data_type, dict) and data_type["type"] in ("struct", "array"):
        return present & _lossy_nested(raw, parsed, data_type, unknown_lost, twice_lost)
    decimal = _DECIMAL.fullmatch(data_type) if isinstance(data_type, str) else None
    if decimal is not None:
        precision, scale = int(decimal.group(1)), int(decimal.group(2))
        # The raw number with as many fraction digits as a decimal(38) with the column's integer
        # digits holds: a value from_json rounded to the column's scale differs from it. (A JSON
        # float's raw text is what a double reads, 17 significant digits.)
        fraction = 38 - (precision - scale)
        if fraction > scale:
            exact = raw.try_cast(f"decimal(38,{fraction})")
            rounded = F.coalesce(parsed != exact, F.lit(False))
        else:
            # A decimal(38, s) (inference's decimal(38,0) for whole numbers past 64 bits) leaves no
            # fraction digit to compare with: one more, and a number too long for that (its integer
            # part fills the column) counts as rounded when written with a fraction or an exponent.
            # Both sides in that type: compared as they are, Spark would round both to the column's.
            wider = f"decimal(38,{min(scale + 1, 38)})"
            rounded = F.coalesce(parsed.try_cast(wider) != raw.try_cast(wider), raw.rlike("[.eE]"))
        return present & (parsed.isNull() | rounded)
    return present & parsed.isNull()


def _lossy_nested(
    raw: Column, parsed: Column, data_type: Any, unknown_lost: bool, twice_lost: bool
) -> Column:
    """:func:`_lossy` of a struct or an array whose raw text is present."""
    from pyspark.sql import functions as F

    if data_type["type"] == "struct":
        fields = data_type["fields"]
        raw_fields = F.from_json(raw, "map<string,string>")
        names = [f["name"] for f in fields]
        if unknown_lost:
            lost = _has_unknown(raw_fields, names)
        elif twice_lost:
            lost = F.size(_given_twice(F.map_keys(raw_fields), names)) > 0
        else:
            lost = F.lit(False)
        inner = [
            _lossy(raw_fields[f["name"]], parsed[f["name"]], f["type"], unknown_lost, twice_lost)
            for f in fields
        ]
        return parsed.isNull() | lost | _any(inner)
    element = data_type["elementType"]
    raw_elements = F.from_json(raw, "array<string>")
    if (isinstance(element, dict) and element["type"] in ("struct", "array")) or (
        isinstance(element, str) and _DECIMAL.fullmatch(element)
    ):
        inner = F.exists(
            F.zip_with(raw_elements, parsed, lambda r, p: _lossy(r, p, element, unknown_lost, twice_lost)),
            lambda x: x,
        )
    else:
        # A scalar element that does not convert makes Spark null the whole array (a decimal
        # that would be rounded does not: checked element by element above).
        inner = F.lit(False)
    return parsed.isNull() | F.coalesce(inner, F.lit(False))


#: Working column: the record is a JSON object whose every key is a schema field it parsed into a
#: non-null scalar (see :func:`_clean`).
CLEAN = "_kafka_clean"


def _clean(parsed: Column, keys: Column, names: Sequence[str], types: Sequence[Any]) -> Column:
    """True where a record provably needs none of the per-field checks: no key the schema lacks, no
    key given twice, no value the typed parse lost.

    ``keys``: the record's top-level keys as the typed parse counted them (null where it did not
    read a JSON object whole; :func:`json_functions.from_json_keyed`). The typed parse gives a
    non-null value only for a key the record has, so when the record has as many top-level keys as
    the typed parse has non-null fields, the keys are exactly those fields: each key known, none
    twice, none whose value was null or did not convert. A struct, an array or a decimal can lose a
    value while its parsed value is not null (a nested field, an element, a rounded digit), so a
    record with one of those present is never clean; nor is ``{}`` (no typed value shows the parse
    read it). This spares most records the map of raw texts, a second JSON parse, and the lookups of
    every field in it: ``parse_batch`` of 500,000 flat events, noop write, 3.9 s -> see docs/benchmarks.md.
    A record that is not clean goes through the checks as before, so the result is the same.
    """
    from pyspark.sql import functions as F

    if not names:
        return F.lit(False)
    present = _balanced(operator.add, [parsed[name].isNotNull().cast("int") for name in names], F.lit(0))
    never_clean = [
        parsed[name].isNull()
        for name, data_type in zip(names, types, strict=True)
        if not isinstance(data_type, str) or _DECIMAL.fullmatch(data_type)
    ]
    possible = (present > 0) & _balanced(operator.and_, never_clean, F.lit(True))
    return F.coalesce(possible & (keys == present), F.lit(False))


def parse_batch(bronze: DataFrame, schema: Schema, config: ParsedConfig) -> DataFrame:
    """Bronze rows → parsed fields, ``_rescued_data`` and a dead-letter reason, one row each.

    Columns: ``_kafka`` (metadata struct), the schema's fields, ``_rescued_data`` (not in mode
    ``none``), and working columns :data:`REASON`, :data:`DETAIL`, :data:`VALUE` (raw bytes).
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import MapType, StringType, StructType

    schema = without_reserved(schema)
    spark_schema = StructType.fromJson(schema)
    frame = bronze.select(kafka_metadata(), F.col("value").alias(VALUE), _text(config).alias(TEXT))
    # One parse gives the typed fields and the count of the record's keys (for _clean).
    frame = frame.withColumn("_kafka_parsed", from_json_keyed(F.col(TEXT), spark_schema))
    parsed = F.col("_kafka_parsed")["value"]
    names = [f["name"] for f in schema["fields"]]
    rescue_mode = config.evolution != "none"
    types = [f["type"] for f in schema["fields"]]
    frame = frame.withColumn(CLEAN, _clean(parsed, F.col("_kafka_parsed")["keys"], names, types))
    clean = F.col(CLEAN)
    # The map of raw texts (a second JSON parse) only for the records the checks below must read.
    frame = frame.withColumn(
        "_kafka_fields", F.when(~clean, json_from_json(F.col(TEXT), MapType(StringType(), StringType())))
    )
    raw_fields = F.col("_kafka_fields")
    # Each check is a column of its own, computed once per record: written inline, a flag sits in
    # the branches of several CASEs (the reason, its detail, the rescued column), where Spark's
    # common-subexpression elimination does not reach, and every map lookup ran four times over
    # (bench: parse_batch of 500,000 records 8.4 s -> see docs/benchmarks.md).
    flags = [
        (~clean & _lossy(raw_fields[n], parsed[n], t, rescue_mode, not rescue_mode)).alias(f"_kafka_lost_{i}")
        for i, (n, t) in enumerate(zip(names, types, strict=True))
    ]
    flags.append((~clean & _has_unknown(raw_fields, names)).alias("_kafka_unknown"))
    if config.evolution == "failOnNewColumns":
        flags += [
            (~clean & _lossy(raw_fields[n], parsed[n], t, False)).alias(f"_kafka_type_lost_{i}")
            for i, (n, t) in enumerate(zip(names, types, strict=True))
        ]
    if not rescue_mode:
        # The schema fields the record gives twice (mode none's dead letter, below): once per record.
        flags.append(F.when(~clean, _given_twice(F.map_keys(raw_fields), names)).alias("_kafka_twice"))
    frame = frame.select("*", *flags)
    lost = [F.col(f"_kafka_lost_{i}") for i in range(len(names))]
    frame = frame.withColumn("_kafka_needs_rescue", F.col("_kafka_unknown") | _any(lost))
    # Per record, the common case costs one boolean per field: which fields were lost and which keys
    # are unknown is only spelled out (arrays, lambdas, a third parse) for the few that need it.
    mismatched = _flagged(lost, names)
    needs_rescue = F.col("_kafka_needs_rescue")
    raw_keys = F.map_keys(raw_fields)

    def to_rescue(key: Column, _value: Column) -> Column:
        # A schema field's key given twice: the typed parse keeps the first value when the last
        # does not convert, so its values are rescued (each of them, as given), as a field given
        # twice inside a struct is rescued whole (_has_unknown).
        return (
            ~key.isin(names)
            | F.array_contains(mismatched, key)
            | (F.size(F.filter(raw_keys, lambda r: r == key)) > 1)
        )

    as_variants = F.to_json(F.map_filter(F.from_json(TEXT, "map<string,variant>"), to_rescue))
    # Spark's variant refuses an object with a key holding a lone surrogate escape ("\ud800") beside
    # any other key: such a record is rescued from the raw texts instead, each value as its JSON
    # text (a string), the key as Spark reads it (the surrogate as "?"); its bytes are in bronze.
    # Not where the keys repeat: which value is meant cannot be told, so that stays a dead letter.
    as_texts = F.when(
        F.size(raw_keys) == F.size(F.array_distinct(raw_keys)),
        F.to_json(F.map_filter(raw_fields, to_rescue)),
    )
    frame = frame.withColumn("_kafka_rescued", F.when(needs_rescue, F.coalesce(as_variants, as_texts)))
    rescued = F.col("_kafka_rescued")
    trailing = F.coalesce(F.col("_kafka_parsed")["keys"] == TRAILING_KEYS, F.lit(False))
    reason = (
        F.when(F.col(VALUE).isNull(), null_value_reason(config))
        .when(F.octet_length(VALUE) == 0, F.lit("empty_value"))
        .when(F.octet_length(VALUE) > config.max_value_bytes, F.lit("oversize"))
    )
    if config.framed:
        id_header = _value_id_header(F.col(KAFKA_COLUMN)["headers"])
        carried = wire_format.carried_schema_id(F.col(VALUE), id_header)
        reason = reason.when(carried.isNull(), F.lit("bad_magic_byte")).when(
            F.octet_length(wire_format.carried_payload(F.col(VALUE), id_header)) == 0, F.lit("empty_value")
        )
    reason = (
        # Present, not empty, not over the limit: no text now means not UTF-8 (_text), which
        # spares a second scan of every value's bytes.
        reason.when(F.col(TEXT).isNull(), F.lit("invalid_utf8"))
        # A second JSON value or other text after the object: the parse read the first only.
        .when(trailing, F.lit("malformed_json"))
        .when(
            ~clean & raw_fields.isNull(),
            F.when(F.expr(f"try_parse_json({TEXT})").isNull(), F.lit("malformed_json")).otherwise(
                F.lit("not_an_object")
            ),
        )
    )
    detail = F.when(
        F.octet_length(VALUE) > config.max_value_bytes,
        F.format_string(
            f"value is %d bytes, over max_value_bytes {config.max_value_bytes}", F.octet_length(VALUE)
        ),
    )
    if config.framed:
        problem = wire_format.carried_problem(F.col(VALUE), id_header, wire_format.VALUE_SCHEMA_ID_HEADER)
        detail = detail.when(F.octet_length(VALUE) > 0, problem)
    detail = detail.when(
        F.col(TEXT).isNotNull() & trailing,
        F.lit("text after the JSON object (two JSON documents in one message?)"),
    )
    if config.evolution == "failOnNewColumns":
        # New fields (at any depth) are rescued, and stop the parsed side until they are accepted;
        # a value of the wrong type is no new field: it is a dead letter, as Auto Loader's mode has it.
        type_lost = [F.col(f"_kafka_type_lost_{i}") for i in range(len(names))]
        reason, detail = _type_mismatch(reason, detail, type_lost, names)
    if not rescue_mode:
        reason, detail = _type_mismatch(reason, detail, lost, names)
        # A schema field's key given twice: the typed parse keeps one value (the first, when the
        # last does not convert) and mode none has no rescue column for the other, which would be
        # in no table but bronze. The other modes rescue both values.
        twice = F.col("_kafka_twice")
        reason = reason.when(F.size(twice) > 0, F.lit("type_mismatch"))
        detail = detail.when(
            F.size(twice) > 0,
            F.concat(
                F.lit("fields given more than once (which value is meant cannot be told): "),
                F.array_join(twice, ", "),
            ),
        )
    else:
        # What must be rescued but cannot be written as JSON (Spark's variant refused it, e.g. a
        # key twice in one object where duplicates are not allowed) is a dead letter, not a loss.
        reason = reason.when(needs_rescue & rescued.isNull(), F.lit("not_rescuable"))
        detail = detail.when(
            needs_rescue & rescued.isNull(),
            F.lit("fields to rescue could not be written as JSON (a key given twice in one object?)"),
        )
    frame = frame.select("*", reason.alias(REASON), detail.alias(DETAIL))
    columns = [F.col(KAFKA_COLUMN), *(_as_column(parsed[f["name"]], f) for f in schema["fields"])]
    if rescue_mode:
        columns.append(F.when(F.col(REASON).isNull(), rescued).alias(RESCUED_COLUMN))
    return frame.select(*columns, F.col(REASON), F.col(DETAIL), F.col(VALUE))


def kafka_metadata() -> Column:
    """A bronze row's Kafka metadata as the parsed row's :data:`KAFKA_COLUMN` struct."""
    from pyspark.sql import functions as F

    return F.struct(
        "topic",
        "partition",
        "offset",
        F.col("kafka_timestamp").alias("timestamp"),
        F.col("kafka_timestamp_type").alias("timestamp_type"),
        "key",
        "headers",
        "ingested_at",
    ).alias(KAFKA_COLUMN)


def null_value_reason(config: ParsedConfig) -> Column:
    """Where a null value goes: on a changelog topic a keyed one is a tombstone (the latest table
    only); without a key, or on other topics, it is a dead letter ``empty_value``. A tombstone lands
    in the latest table only, which keeps no keyless record: a keyless one would be in no table."""
    from pyspark.sql import functions as F

    if not config.changelog:
        return F.lit("empty_value")
    keyed = F.col(KAFKA_COLUMN)["key"].isNotNull()
    return F.when(keyed, F.lit(TOMBSTONE)).otherwise(F.lit("empty_value"))


def _given_twice(raw_keys: Column, names: list[str]) -> Column:
    """The ``names`` the record's top-level keys hold more than once, as an array (empty when none).

    Spelled out only for a record with a key twice (rare): the names are each looked up in the keys."""
    from pyspark.sql import functions as F

    none = F.array().cast("array<string>")
    if not names:
        return none
    repeated = F.size(F.array_distinct(raw_keys)) < F.size(raw_keys)
    twice = F.filter(
        F.array(*(F.lit(n) for n in names)), lambda n: F.size(F.filter(raw_keys, lambda k: k == n)) > 1
    )
    return F.when(F.coalesce(repeated, F.lit(False)), twice).otherwise(none)


def _any(flags: list[Column]) -> Column:
    from pyspark.sql import functions as F

    return _balanced(operator.or_, flags, F.lit(False))


def _flagged(lost: list[Column], names: list[str]) -> Column:
    """The names whose ``lost`` flag is true, as an array."""
    from pyspark.sql import functions as F

    flagged = [F.when(hit, F.lit(name)) for hit, name in zip(lost, names, strict=True)]
    return F.array_compact(F.array(*flagged)) if flagged else F.array().cast("array<string>")


def _type_mismatch(
    reason: Column, detail: Column, lost: list[Column], names: list[str]
) -> tuple[Column, Column]:
    """``reason``/``detail`` with a ``type_mismatch`` dead letter where a field lost its value."""
    from pyspark.sql import functions as F

    any_lost = _any(lost)
    return (
        reason.when(any_lost, F.lit("type_mismatch")),
        detail.when(
            any_lost,
            F.concat(F.lit("fields not of their schema type: "), F.array_join(_flagged(lost, names), ", ")),
        ),
    )


def _as_column(value: Column, field: dict[str, Any]) -> Column:
    """A parsed field (named as its JSON key, at every depth) as the table's column: renamed to
    :func:`column_name`, nested fields too (a struct cast is by position), the key kept in the
    column's metadata."""
    from pyspark.sql.types import StructType

    name = column_name(field["name"])
    renamed = table_type(field["type"])
    if renamed != field["type"]:
        wanted = StructType.fromJson({"type": "struct", "fields": [{**field, "type": renamed}]})
        value = value.cast(wanted.fields[0].dataType)
    if name != field["name"]:
        return value.alias(name, metadata={JSON_NAME: field["name"]})
    return value.alias(name)


def with_expectations(frame: DataFrame, expectations: Sequence[Expectation]) -> DataFrame:
    """Mark each expectation's violations (``_kafka_broke_<name>``) and route ``drop`` ones.

    A rule that is false *or null* for a record is broken: ``amount >= 0`` with no amount is not
    a pass. Only parsed records are checked; dead letters are already out.
    """
    from pyspark.sql import functions as F

    reason = F.col(REASON)
    detail = F.col(DETAIL)
    for expectation in expectations:
        broken = reason.isNull() & ~F.coalesce(F.expr(expectation.rule).cast("boolean"), F.lit(False))
        frame = frame.withColumn(broken_column(expectation), broken)
    for expectation in expectations:
        if expectation.action == "drop":
            hit = reason.isNull() & F.col(broken_column(expectation))
            reason = F.when(hit, F.lit(f"expectation:{expectation.name}")).otherwise(reason)
            detail = F.when(hit, F.lit(expectation.rule)).otherwise(detail)
    return frame.withColumn(REASON, reason).withColumn(DETAIL, detail)


#: A cached parsed frame's Kafka key + value bytes per record (the raw value itself is not kept for
#: every record, see :func:`for_cache`).
RECORD_BYTES = "_kafka_record_bytes"


def record_bytes(key: Column, value: Column) -> Column:
    from pyspark.sql import functions as F

    return F.coalesce(F.octet_length(key), F.lit(0)) + F.coalesce(F.octet_length(value), F.lit(0))


def for_cache(frame: DataFrame) -> DataFrame:
    """A parsed frame (expectations applied) as a batch caches it for its writes: the raw value only
    where something still reads it (a dead letter's ``value``, a rescued record's text for the
    schema's evolution), and its size for the run's byte count.

    The raw value is as large as everything else a record holds together; building the cache of it
    for every record was a third of the parse step (bench: 500,000 records).
    """
    from pyspark.sql import functions as F

    needed = F.col(REASON).isNotNull()
    if RESCUED_COLUMN in frame.columns:
        needed = needed | F.col(RESCUED_COLUMN).isNotNull()
    return frame.withColumn(RECORD_BYTES, record_bytes(F.col(KAFKA_COLUMN)["key"], F.col(VALUE))).withColumn(
        VALUE, F.when(needed, F.col(VALUE))
    )


def broken_column(expectation: Expectation) -> str:
    return f"_kafka_broke_{expectation.name}"


def parsed_rows(frame: DataFrame) -> DataFrame:
    """The rows of the parsed table: no dead letters, no tombstones, no working columns."""
    from pyspark.sql import functions as F

    keep = [F.col(quote_identifier(c)) for c in _table_columns(frame)]
    return frame.where(F.col(REASON).isNull()).select(*keep)


def _table_columns(frame: DataFrame) -> list[str]:
    """The parsed table's columns of a parsed frame: all but the working ones."""
    return [c for c in frame.columns if not c.startswith("_kafka_")]


#: The message of the error that stops a direct write (:func:`guarded_rows`) before its commit.
CHECKED_PATH_NEEDED = "kafkalake: a record needs the checked parse path"


def guarded_rows(frame: DataFrame, needs_check: Column) -> DataFrame:
    """:func:`parsed_rows` of a frame known to hold nothing else, with no filter: a record where
    ``needs_check`` holds raises :data:`CHECKED_PATH_NEEDED` instead, so the write's job fails
    before Delta commits.

    No filter, because Spark pushes a filter on the reason below the parse's projections and
    inlines every check into it, computing them twice (a parsed write of 3 s took 39 s). The raise
    rides on the ``_kafka`` column, which every row writes.
    """
    from pyspark.sql import functions as F

    keep = [
        F.when(needs_check, F.raise_error(F.lit(CHECKED_PATH_NEEDED))).otherwise(F.col(c)).alias(c)
        if c == KAFKA_COLUMN
        else F.col(quote_identifier(c))
        for c in _table_columns(frame)
    ]
    return frame.select(*keep)


def needed_checked_path(err: BaseException) -> bool:
    """Whether ``err`` is a direct write stopped by :func:`guarded_rows` (and nothing else)."""
    return CHECKED_PATH_NEEDED in str(err)


def dead_letter_rows(frame: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    kafka = F.col(KAFKA_COLUMN)
    return frame.where(F.col(REASON).isNotNull() & (F.col(REASON) != TOMBSTONE)).select(
        kafka["topic"].alias("topic"),
        kafka["partition"].alias("partition"),
        kafka["offset"].alias("offset"),
        kafka["timestamp"].alias("kafka_timestamp"),
        kafka["key"].alias("key"),
        F.col(VALUE).alias("value"),
        kafka["headers"].alias("headers"),
        F.col(REASON).alias("reason"),
        F.col(DETAIL).alias("detail"),
        kafka["ingested_at"].alias("ingested_at"),
    )


def _text(config: ParsedConfig) -> Column:
    """A bronze row's value as text where it is worth a JSON parser (present, not empty, within the
    size limit, UTF-8); null where it is not.

    ``try_validate_utf8``'s answer, from :func:`json_functions.utf8_text`: Spark's check reads one
    byte at a time (6% of a parsed batch's samples), ours eight where they are ASCII.
    """
    from pyspark.sql import functions as F

    size = F.octet_length("value")
    fits = F.col("value").isNotNull() & (size > 0) & (size <= config.max_value_bytes)
    text = F.col("value")
    if config.framed:
        # The JSON after the registry's frame; a value not framed so has none.
        text = wire_format.carried_payload(text, _value_id_header(F.col("headers")))
        fits = fits & (F.octet_length(text) > 0)
    # Only values that can be parsed are parsed: no JSON parser ever runs on an oversize value.
    return F.when(fits, utf8_text(text))


def sample_texts(bronze: DataFrame, config: ParsedConfig) -> DataFrame:
    """Values of bronze rows to infer a schema from: one string column, at most ``sample_rows``.

    Only the bytes are checked here, not the JSON: :func:`infer_schema` skips what is not a JSON
    object. Parsing the rows with :func:`parse_batch` first to pick the valid ones cost a whole
    parse of the sample (bench: ~4.5 s of a topic's first batch, ~2 s of each schema refresh).
    """
    from pyspark.sql import functions as F

    texts = bronze.select(_text(config).alias("json"))
    return texts.where(F.col("json").isNotNull()).limit(config.sample_rows)


def _value_id_header(headers: Column) -> Column:
    """The ``__value_schema_id`` header: a framed JSON value's schema id may travel there instead."""
    return wire_format.header(headers, wire_format.VALUE_SCHEMA_ID_HEADER)


def valid_json_texts(
    frame: DataFrame, limit: int, only_rescued: bool = False, framed: bool = False
) -> DataFrame:
    """Values fit for schema inference: one string column, at most ``limit`` rows.

    ``framed``: the JSON follows the registry's frame (:attr:`ParsedConfig.framed`)."""
    from pyspark.sql import functions as F

    rows = frame.where(F.col(REASON).isNull())
    if only_rescued:
        rows = rows.where(F.col(RESCUED_COLUMN).isNotNull())
    id_header = _value_id_header(F.col(KAFKA_COLUMN)["headers"])
    value = wire_format.carried_payload(F.col(VALUE), id_header) if framed else F.col(VALUE)
    return rows.select(value.cast("string").alias("json")).limit(limit)


def infer_schema(json_texts: DataFrame, config: ParsedConfig) -> Schema:
    """The schema most of the JSON strings in ``json_texts`` agree on, within the catalog's limits.

    Spark's own inference (``spark.read.json``) widens a field to string when one record
    disagrees and knows no depth or width limit; :mod:`kafkalake.lake.schema_inference` decides by
    most of the sample instead. The strings (at most ``sample_rows`` of them, see
    :func:`sample_texts`) come to the driver one partition at a time; those that are not a JSON
    object are skipped.
    """
    limits = schema_inference.Limits(max_depth=config.max_depth, max_columns=config.max_columns)
    texts = (row[0] for row in json_texts.toLocalIterator() if row[0] is not None)
    return schema_inference.infer(texts, limits)


def ddl_type_json(type_string: str) -> Any:
    """A Spark SQL type string (``decimal(10,2)``, ``array<string>``) in Spark's JSON form.

    Parsed by the active session's JVM.
    """
    from pyspark.sql.types import _parse_datatype_string

    return _parse_datatype_string(type_string).jsonValue()


def pinned_schema(config: ParsedConfig) -> Schema | None:
    """The schema the catalog pins (top-level fields, in catalog order); None when it pins none."""
    if config.schema is None:
        return None
    fields = [
        {"name": name, "type": ddl_type_json(data_type), "nullable": True, "metadata": {}}
        for name, data_type in config.schema
    ]
    return {"type": "struct", "fields": fields}


def with_catalog_hints(schema: Schema, config: ParsedConfig, persisted: Schema | None = None) -> Schema:
    """``schema`` with the catalog's ``type_hints`` forced onto it; with ``persisted`` (the current
    version), onto the fields it lacks only (:func:`with_type_hints`)."""
    hints = [(path, ddl_type_json(t)) for path, t in config.type_hints]
    return with_type_hints(schema, hints, persisted)
