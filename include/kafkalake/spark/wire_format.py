"""Confluent's wire format of a schema registry's serializers, as Spark columns.

A value is the magic byte 0, the writer schema's id (4 bytes, big-endian), then the payload (Avro
binary, the JSON text of the JSON Schema serializer, ...).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column

#: Bytes before the payload: the magic byte and the schema id.
FRAME_BYTES = 5


def framed(value: Column) -> Column:
    """True where the value is long enough for the frame and starts with the magic byte 0."""
    from pyspark.sql import functions as F

    return (F.octet_length(value) >= FRAME_BYTES) & (F.hex(F.substring(value, 1, 1)) == "00")


def schema_id(value: Column) -> Column:
    """The schema id of a framed value; null where it is not framed."""
    from pyspark.sql import functions as F

    return F.when(framed(value), F.conv(F.hex(F.substring(value, 2, 4)), 16, 10).cast("long"))


def payload(value: Column) -> Column:
    """What follows the frame; null where the value is not framed."""
    from pyspark.sql import functions as F

    return F.when(framed(value), F.substring(value, FRAME_BYTES + 1, 2**31 - 1))


def frame_problem(value: Column) -> Column:
    """Why a present, non-empty value is not framed (a dead letter's detail); null where it is."""
    from pyspark.sql import functions as F

    size = F.octet_length(value)
    return F.when(
        size < FRAME_BYTES,
        F.format_string(f"value of %d bytes is shorter than the registry's {FRAME_BYTES}-byte frame", size),
    ).when(
        ~framed(value),
        F.format_string(
            "first byte 0x%s is not the magic byte 0x00 (not written by a schema-registry serializer?)",
            F.lower(F.hex(F.substring(value, 1, 1))),
        ),
    )
