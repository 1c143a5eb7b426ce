"""Keys in a schema registry's wire format (``key_format: avro | protobuf | json_schema``).

A framed key carries its schema id (in its frame, or in the record header ``__key_schema_id``), so
the same key written under two schema ids is two different byte strings: keyed by the raw bytes,
the latest table would keep a row per schema id. It is keyed by the key's **payload** instead, the
frame left out: the parsed frame's ``_kafka.key`` is the payload (bronze and the dead letters keep
the raw bytes). For Avro, the payload is a function of the key and its writer schema (Avro's binary
encoding has one form per value, maps aside, whose entries a writer may order as it likes), so two
records with the same key and writer schema, whatever id or header names that schema, have the same
payload; JSON Schema's payload is the producer's JSON text (Confluent's serializer writes it the same
way each time for the same object).

Each key is checked, and a record whose key fails is a dead letter with its reason: ``bad_magic_byte``
(no frame and no header, or a header that holds no id), and for Avro and Protobuf keys
``unknown_schema_id`` (the registry has no such id) and ``undecodable`` (the payload does not decode
with its writer schema), for Protobuf also ``unknown_message_index``, each detail starting with
``key:``. A Protobuf key's payload is its message indexes and its message, wherever the indexes were
written (after the id in the ``__key_schema_id`` header, or in the frame).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from kafkalake.spark import wire_format
from kafkalake.spark.parse_columns import DETAIL, KAFKA_COLUMN, REASON, TOMBSTONE

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from kafkalake.kafka.schema_registry import RegisteredSchema

#: The field added to an Avro reader schema: true on every record Avro decoded (registry_parser).
DECODED_MARK = "__kafkalake_decoded"


def with_decoded_mark(avro_schema: str) -> str:
    """The schema with :data:`DECODED_MARK` added, when it is a record's (a boolean with the default
    true, which no writer has: Avro's schema resolution fills it in on every record it decodes)."""
    record = json.loads(avro_schema)
    if not isinstance(record, dict) or record.get("type") != "record":
        return avro_schema
    mark = {"name": DECODED_MARK, "type": "boolean", "default": True}
    return json.dumps({**record, "fields": [*record["fields"], mark]})


def _key_header(headers: Column) -> Column:
    return wire_format.header(headers, wire_format.KEY_SCHEMA_ID_HEADER)


def key_schema_id(key: Column, headers: Column, key_format: str | None = None) -> Column:
    """A key's schema id, from its header or its frame; null where it names none."""
    return wire_format.carried_schema_id(key, _key_header(headers), key_format == "protobuf")


def _payload(key: Column, key_header: Column, key_format: str | None) -> Column:
    """A framed key's payload. Protobuf's is its message indexes and its message, wherever the
    indexes were written: with the id in the header, Confluent's serializer puts them there after
    the id (the key then the bare message), so one key gives one payload either way."""
    from pyspark.sql import functions as F

    if key_format != "protobuf":
        return wire_format.carried_payload(key, key_header)
    in_header = F.concat(F.substring(key_header, wire_format.FRAME_BYTES + 1, 2**31 - 1), key)
    return F.when(key_header.isNotNull(), in_header).otherwise(wire_format.payload(key))


def key_payload(key: Column, headers: Column, key_format: str | None = None) -> Column:
    """What the latest table is keyed by: the key's payload, or the raw key where it is not framed
    (such a record is a dead letter on the parsed side; a tombstone bronze holds is matched by it)."""
    from pyspark.sql import functions as F

    return F.coalesce(_payload(key, _key_header(headers), key_format), key)


def _decodes(payload: Column, sid: Column, writers: dict[int, RegisteredSchema]) -> Column:
    """True where the Avro key decodes with its writer schema (PERMISSIVE: a failure is a null, or a
    record whose mark is null)."""
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    decodes: Column | None = None
    for i, writer in sorted(writers.items()):
        marked = with_decoded_mark(writer.schema)
        options = {"avroSchema": marked, "mode": "PERMISSIVE"}
        decoded = from_avro(payload, writer.schema, options)
        ok = decoded[DECODED_MARK].isNotNull() if marked != writer.schema else decoded.isNotNull()
        decodes = F.when(sid == i, ok) if decodes is None else decodes.when(sid == i, ok)
    return F.lit(False) if decodes is None else F.coalesce(decodes, F.lit(False))


def checked_keys(
    frame: DataFrame, key_format: str, writers: dict[int, RegisteredSchema | None] | None = None
) -> DataFrame:
    """A parsed frame whose framed keys are checked (dead letters) and keyed by their payload.

    ``writers``: for Avro keys, the writer schema of each key schema id the batch holds (None: the
    registry has none).
    """
    from pyspark.sql import functions as F

    kafka = F.col(KAFKA_COLUMN)
    key, headers = kafka["key"], kafka["headers"]
    key_header = _key_header(headers)
    protobuf = key_format == "protobuf"
    sid = wire_format.carried_schema_id(key, key_header, protobuf)
    payload = _payload(key, key_header, key_format)
    # Only records that would land (a row, or a tombstone): a value's own reason comes first.
    checked = (F.col(REASON).isNull() | (F.col(REASON) == TOMBSTONE)) & key.isNotNull()
    reason = F.when(checked & sid.isNull(), F.lit("bad_magic_byte"))
    problem = wire_format.carried_problem(key, key_header, wire_format.KEY_SCHEMA_ID_HEADER, protobuf)
    detail = F.when(checked & sid.isNull(), F.concat(F.lit("key: "), problem))
    if key_format in ("avro", "protobuf"):
        known = {i: w for i, w in (writers or {}).items() if w is not None}
        is_known = sid.isin(sorted(known)) if known else F.lit(False)
        unknown = checked & sid.isNotNull() & ~is_known
        reason = reason.when(unknown, F.lit("unknown_schema_id"))
        detail = detail.when(unknown, F.format_string("key: schema id %d is not in the registry", sid))
        if protobuf:
            from kafkalake.spark.protobuf_parser import decoded

            # Decoded as a value is (the same decoder): its reason, its detail behind "key: ".
            result = decoded(
                dict(known), F.when(checked & is_known, sid), F.when(checked & is_known, payload)
            )
            failed = checked & is_known & result["reason"].isNotNull()
            reason = reason.when(failed, result["reason"])
            detail = detail.when(failed, F.concat(F.lit("key: "), result["detail"]))
        else:
            undecodable = checked & is_known & ~_decodes(payload, sid, known)
            reason = reason.when(undecodable, F.lit("undecodable"))
            detail = detail.when(
                undecodable, F.format_string("key: the payload does not decode with writer schema id %d", sid)
            )
    # Both against the frame as it was: the detail's test reads the reason before the key's.
    frame = frame.withColumns(
        {
            REASON: F.coalesce(reason, F.col(REASON)),
            DETAIL: F.when(reason.isNotNull(), detail).otherwise(F.col(DETAIL)),
        }
    )
    # The raw key stays on dead letters (dead_letter_rows keeps _kafka.key): their bytes as written.
    lands = F.col(REASON).isNull() | (F.col(REASON) == TOMBSTONE)
    return frame.withColumn(
        KAFKA_COLUMN, kafka.withField("key", F.when(lands & key.isNotNull(), payload).otherwise(key))
    )


def schema_ids_of_keys(bronze: DataFrame, key_format: str | None = None) -> list[int]:
    """The distinct key schema ids of a batch's records, read on the driver."""
    from pyspark.sql import functions as F

    ids = bronze.select(key_schema_id(F.col("key"), F.col("headers"), key_format).alias("id")).where(
        F.col("id").isNotNull()
    )
    return sorted(int(row["id"]) for row in ids.distinct().collect())
