"""kafkalake's JSON functions (``spark/jvm``, built at set-up), as columns, and the UTF-8 check before them.

Each gives Spark's own result record for record (``from_json``; with its keys, also what
``size(json_object_keys(...))`` gives, or :data:`TRAILING_KEYS` where text follows the object, which
Spark drops unseen), reading the record's UTF-8 bytes with Jackson's byte-based
parser instead of a ``Reader`` built per record: half the time of Spark's pair on the bench's events
(docs/benchmarks.md); counting the keys in the same parse spares a second one. Their sessions get
the functions through ``spark.sql.extensions`` (:mod:`kafkalake.launch.spark_conf`).

A session without the extension (``KAFKALAKE_JVM_EXTENSION=off``, :mod:`kafkalake.spark.extension`)
gets the same results from Spark's built-in functions (``from_json``, ``json_object_keys``,
``try_validate_utf8``), at the cost of the parses the extension spares. Each function takes
``use_extension`` to choose (None: the active session's answer): tests/integration/
test_json_functions.py runs both on its odd bytes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafkalake.spark.extension import resolve

if TYPE_CHECKING:
    from pyspark.sql import Column
    from pyspark.sql.types import DataType, StructType


def from_json(text: Column, schema: DataType, *, use_extension: bool | None = None) -> Column:
    """``from_json(text, schema)`` (no options) of a struct, array or map schema."""
    from pyspark.sql import functions as F

    if not resolve(use_extension):
        return F.from_json(text, schema)
    return F.call_function("kafkalake_from_json", text, F.lit(schema.json()))


#: ``keys`` of a record whose JSON object is followed by more than whitespace (or NUL bytes): a
#: second document, or other text, which ``from_json`` would drop without a word.
TRAILING_KEYS = -1


def from_json_keyed(text: Column, schema: StructType, *, use_extension: bool | None = None) -> Column:
    """A struct of ``value``, ``from_json(text, schema)``, and ``keys``: the number of the record's
    top-level keys that parse read, where it read a JSON object whole (every value converted); null
    where it did not; :data:`TRAILING_KEYS` where more follows the object. Where ``keys`` is neither,
    it is ``size(json_object_keys(text))``.

    Without the extension: ``from_json`` with a corrupt-record column of its own tells whether the
    parse read the record whole (:func:`_from_json_whole`); the count is ``json_object_keys``'
    (:func:`_text_after_value` finds text after the object). The results are the extension's, record
    for record, on tests/integration/test_json_functions.py's odd and random bytes; the one
    difference is in text that is not UTF-8 (never parsed: an ``invalid_utf8`` dead letter first),
    where the built-ins see bytes after the object that the extension's reader-based fallback may not.
    """
    from pyspark.sql import functions as F

    if resolve(use_extension):
        return F.call_function("kafkalake_from_json_keyed", text, F.lit(schema.json()))
    value, whole = _from_json_whole(text, schema)
    # json_object_keys' parser refuses a non-numeric number (NaN) that from_json's reads: then the
    # keys of the map parse (which holds a key given twice once: a rare record within a rare one).
    object_keys = F.coalesce(F.json_object_keys(text), F.map_keys(F.from_json(text, "map<string,string>")))
    keys = (
        F.when(~whole | object_keys.isNull(), F.lit(None))
        .when(_text_after_value(text), F.lit(TRAILING_KEYS))
        .otherwise(F.size(object_keys))
    )
    return F.when(text.isNotNull(), F.struct(value.alias("value"), keys.cast("int").alias("keys")))


def _from_json_whole(text: Column, schema: StructType) -> tuple[Column, Column]:
    """``from_json(text, schema)``, and whether that parse read the record whole (no malformed
    JSON, no value it could not convert): Spark's parse fills a corrupt-record column where it did
    not. That column is one of our own, so a field named as Spark's (``_corrupt_record``) gets what
    ``from_json`` gives it: the record's text where it was not read whole, else null."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    spark_corrupt = SparkSession.active().conf.get("spark.sql.columnNameOfCorruptRecord") or "_corrupt_record"
    names = schema.fieldNames()
    ours = "_kafkalake_corrupt_record"
    while ours in names:
        ours = f"_{ours}"
    fields = [f for f in schema.fields if f.name != spark_corrupt]
    parsed = F.from_json(
        text,
        StructType([*fields, StructField(ours, StringType())]),
        {"columnNameOfCorruptRecord": ours},
    )
    broken = parsed[ours]
    value = F.when(
        parsed.isNotNull(),
        F.struct(*((broken if name == spark_corrupt else parsed[name]).alias(name) for name in names)),
    )
    return value, parsed.isNotNull() & broken.isNull()


#: What may follow a record's JSON value without counting as more text: JSON whitespace, and NUL
#: bytes (a C producer's string terminator), as the extension's parse has it.
_BLANK = "\u0000 \t\r\n".encode().decode("unicode_escape")


def _text_after_value(text: Column) -> Column:
    """True where more than :data:`_BLANK` follows ``text``'s first JSON value (null where ``text``
    is null), with Spark's built-ins only.

    ``from_json`` reads the first value and ignores the rest, so the record is read inside an array
    that ends with a marker of its own: ``[<text>,"<xxhash64 of text>"]``. Where the record is one
    value, that reads as two elements, the marker last. Where more follows it (a second value, junk),
    the array is malformed, or has more elements, or (after a stray ``]``) ends before the marker:
    a record cannot hold its own hash. Blanks at the end are trimmed first (a NUL is no JSON
    whitespace, so it would make the array malformed).
    """
    from pyspark.sql import functions as F

    marker = F.xxhash64(text).cast("string")
    wrapped = F.concat(F.lit("["), F.rtrim(text, F.lit(_BLANK)), F.lit(',"'), marker, F.lit('"]'))
    elements = F.from_json(wrapped, "array<string>")
    return ~F.coalesce((F.size(elements) == 2) & (F.element_at(elements, 2) == marker), F.lit(False))


def utf8_text(value: Column, *, use_extension: bool | None = None) -> Column:
    """The binary ``value`` as a string where it is valid UTF-8, null where it is not: what
    ``try_validate_utf8(cast(value AS STRING))`` gives, eight bytes at a time where they are ASCII
    (without the extension, that expression itself)."""
    from pyspark.sql import functions as F

    if not resolve(use_extension):
        return F.try_validate_utf8(value.cast("string"))
    return F.call_function("kafkalake_utf8_text", value)
