"""kafkalake's JSON functions (``spark/jvm``, built at set-up), as columns, and the UTF-8 check before them.

Each gives Spark's own result record for record (``from_json``; with its keys, also what
``size(json_object_keys(...))`` gives, or :data:`TRAILING_KEYS` where text follows the object, which
Spark drops unseen), reading the record's UTF-8 bytes with Jackson's byte-based
parser instead of a ``Reader`` built per record: half the time of Spark's pair on the bench's events
(docs/benchmarks.md); counting the keys in the same parse spares a second one. Their sessions get
the functions through ``spark.sql.extensions`` (:mod:`kafkalake.launch.spark_conf`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column
    from pyspark.sql.types import DataType, StructType


def from_json(text: Column, schema: DataType) -> Column:
    """``from_json(text, schema)`` (no options) of a struct, array or map schema."""
    from pyspark.sql import functions as F

    return F.call_function("kafkalake_from_json", text, F.lit(schema.json()))


#: ``keys`` of a record whose JSON object is followed by more than whitespace (or NUL bytes): a
#: second document, or other text, which ``from_json`` would drop without a word.
TRAILING_KEYS = -1


def from_json_keyed(text: Column, schema: StructType) -> Column:
    """A struct of ``value``, ``from_json(text, schema)``, and ``keys``: the number of the record's
    top-level keys that parse read, where it read a JSON object whole (every value converted); null
    where it did not; :data:`TRAILING_KEYS` where more follows the object. Where ``keys`` is neither,
    it is ``size(json_object_keys(text))``."""
    from pyspark.sql import functions as F

    return F.call_function("kafkalake_from_json_keyed", text, F.lit(schema.json()))


def utf8_text(value: Column) -> Column:
    """The binary ``value`` as a string where it is valid UTF-8, null where it is not: what
    ``try_validate_utf8(cast(value AS STRING))`` gives, eight bytes at a time where they are ASCII."""
    from pyspark.sql import functions as F

    return F.call_function("kafkalake_utf8_text", value)
