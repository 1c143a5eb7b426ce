"""kafkalake's JSON functions (``spark/jvm``, built at set-up), as columns.

Each gives Spark's own result record for record (``from_json``, ``size(json_object_keys(...))``),
reading the record's UTF-8 bytes with Jackson's byte-based parser instead of a ``Reader`` built per
record: half the time of Spark's pair on the bench's events (README, Benchmark). Their sessions get
the functions through ``spark.sql.extensions`` (:mod:`kafkalake.config.spark_conf`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column
    from pyspark.sql.types import DataType


def from_json(text: Column, schema: DataType) -> Column:
    """``from_json(text, schema)`` (no options) of a struct, array or map schema."""
    from pyspark.sql import functions as F

    return F.call_function("kafkalake_from_json", text, F.lit(schema.json()))


def json_key_count(text: Column) -> Column:
    """``size(json_object_keys(text))``: null where the text is not a JSON object."""
    from pyspark.sql import functions as F

    return F.call_function("kafkalake_json_key_count", text)
