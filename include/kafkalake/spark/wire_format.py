"""Confluent's wire format of a schema registry's serializers, as Spark columns.

A value is the magic byte 0, the writer schema's id (4 bytes, big-endian), then the payload (Avro
binary, the JSON text of the JSON Schema serializer, ...).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafkalake.spark.extension import resolve

if TYPE_CHECKING:
    from pyspark.sql import Column

#: Bytes before the payload: the magic byte and the schema id.
FRAME_BYTES = 5


def framed(value: Column) -> Column:
    """True where the value is long enough for the frame and starts with the magic byte 0."""
    from pyspark.sql import functions as F

    return (F.octet_length(value) >= FRAME_BYTES) & (F.hex(F.substring(value, 1, 1)) == "00")


def schema_id(value: Column, *, use_extension: bool | None = None) -> Column:
    """The schema id of a framed value; null where it is not framed. In the JVM extension's
    ``kafkalake_schema_id`` where the session has it (the same ids, no hex text between)."""
    from pyspark.sql import functions as F

    if resolve(use_extension):
        return F.call_function("kafkalake_schema_id", value)
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


#: The record headers Confluent's newer serializers carry the schema id in (``schema.id.serializer``
#: = ``header_schema_id_serializer``), the key or value then unframed.
VALUE_SCHEMA_ID_HEADER = "__value_schema_id"
KEY_SCHEMA_ID_HEADER = "__key_schema_id"


def header(headers: Column, name: str) -> Column:
    """The first value of the record header ``name``; null when the record has none."""
    from pyspark.sql import functions as F

    return F.get(F.filter(headers, lambda h: h["key"] == name), 0)["value"]


def _header_id(id_header: Column, indexes: bool = False) -> Column:
    """The schema id a header holds: the magic byte 0 and the id, 5 bytes; null otherwise. (Confluent's
    serializers write the magic byte 1 and a 16-byte GUID there, which is not an id: see
    :func:`header_problem`.) ``indexes``: Protobuf's message indexes follow the id in the header."""
    from pyspark.sql import functions as F

    size = F.octet_length(id_header)
    fits = size > FRAME_BYTES if indexes else size == FRAME_BYTES
    return F.when(fits, schema_id(id_header))


def carried_schema_id(value: Column, id_header: Column, indexes: bool = False) -> Column:
    """The schema id from the header when the record has one, else from the value's frame.

    ``indexes``: a Protobuf record's header holds its message indexes after the id (Confluent's
    ``SchemaId.id_to_bytes``), the value then the bare message."""
    from pyspark.sql import functions as F

    return F.when(id_header.isNotNull(), _header_id(id_header, indexes)).otherwise(schema_id(value))


def carried_payload(value: Column, id_header: Column) -> Column:
    """The whole value when the header has the schema id, else what follows the frame."""
    from pyspark.sql import functions as F

    return F.when(id_header.isNotNull(), value).otherwise(payload(value))


def carried_problem(value: Column, id_header: Column, name: str, indexes: bool = False) -> Column:
    """Why a record names no schema id (a dead letter's detail); null where it names one."""
    from pyspark.sql import functions as F

    magic = F.lower(F.hex(F.substring(id_header, 1, 1)))
    header_problem = F.when(
        _header_id(id_header, indexes).isNull(),
        F.when(
            magic == "01",
            F.lit(
                f"header {name} holds a schema GUID (magic byte 0x01): only schema ids (magic byte 0x00, "
                "4 bytes) are looked up"
            ),
        ).otherwise(
            F.format_string(
                f"header {name} of %d bytes starting 0x%s is not a schema id (magic byte 0x00, 4 bytes)",
                F.octet_length(id_header),
                magic,
            )
        ),
    )
    return F.when(id_header.isNotNull(), header_problem).otherwise(frame_problem(value))
