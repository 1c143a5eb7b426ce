"""Topics in a schema registry's wire format with Protobuf values (``format: protobuf``).

A value is the magic byte 0, the writer schema's id (4 bytes), the message indexes (which message
type of the schema's file, :mod:`kafkalake.kafka.protobuf_schema`), then the message. Open-source
Spark's ``from_protobuf`` is not on the Maven mirror the project resolves from, so a micro-batch is
decoded by kafkalake's JVM extension (``kafkalake_protobuf_decode``, ``spark/jvm/KafkalakeProtobuf.scala``,
on protobuf-java), or, in a session without it (``KAFKALAKE_JVM_EXTENSION=off``) or where a writer's
messages hold a well-known type other than Timestamp, in Python, vectorised (one ``pandas_udf``
over the batch). Both give the same JSON byte for byte and the same dead-letter reasons
(tests/unit/kafka/protobuf_vectors.py):

* the batch's distinct (schema id, message indexes) pairs are read on the driver in one pass over
  the batch (:func:`index_prefix`), each writer schema fetched once a run and kept beside the schema
  history (as for Avro: :class:`~kafkalake.kafka.schema_registry.WriterSchemas`), and each pair's
  message type named there: the table's columns are the fields of every message type the topic's
  records were written with (a field of a later version becomes a column under ``addNewColumns``;
  one a later version dropped keeps its column, null), each change a schema-history version;
* each record is decoded with its own writer schema to JSON typed as the table's columns, then read
  with ``from_json`` by field name: fields a message type lacks are null.

Dead letters, each with its reason: ``bad_magic_byte``, ``unknown_schema_id``,
``unknown_message_index`` (the indexes name no message type of the writer's file),
``undecodable`` (the message does not decode with it, or the writer schema cannot be read).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from kafkalake.core.errors import UnusableSchemaError
from kafkalake.kafka import protobuf_schema
from kafkalake.kafka.schema_registry import RegisteredSchema
from kafkalake.spark import json_functions, parse_columns, registry_keys, wire_format
from kafkalake.spark.extension import resolve
from kafkalake.spark.parse_columns import DETAIL, KAFKA_COLUMN, REASON, VALUE
from kafkalake.spark.registry_parser import (
    SCHEMA_ID,
    AvroTopicParser,
    frame_checks,
    nullable_everywhere,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)

_DECODED = "_kafka_decoded"
_VALUES = "_kafka_values"
_DECODED_TYPE = "name string, json string, reason string, detail string"
#: The hex of bytes that are each below 0x80: varints of one byte each.
_ONE_BYTE_VARINTS = "^([0-7][0-9A-F])*$"


def _decode_one(schema: RegisteredSchema | None, sid: int, payload: bytes | None) -> tuple[Any, ...]:
    """(message type, JSON, reason, detail) of one framed payload whose schema id the registry has."""
    from google.protobuf.message import DecodeError

    if schema is None or payload is None:
        return None, None, None, None
    if schema.schema_type.upper() != "PROTOBUF":
        return None, None, "undecodable", f"schema id {sid} is a {schema.schema_type} schema, not Protobuf"
    if schema.descriptors is None:
        return None, None, "undecodable", f"the writer schema cannot be read: {schema.problem}"
    try:
        name, text = protobuf_schema.decode(schema.descriptors, payload)
    except protobuf_schema.MessageIndexError as err:
        return None, None, "unknown_message_index", f"schema id {sid}: {err}"
    except (DecodeError, ValueError, UnusableSchemaError) as err:
        return None, None, "undecodable", f"the payload does not decode with writer schema id {sid}: {err}"
    except Exception as err:  # anything else one record makes the decoder raise
        # A dead letter of its own, never a failed UDF: that would fail every later run on this record.
        detail = f"the payload does not decode with writer schema id {sid}: {type(err).__name__}: {err}"
        return None, None, "undecodable", detail
    return name, text, None, None


def _vectorised(function: Any, return_type: str, returns: type) -> Any:
    """``function`` of two pandas Series as a pandas UDF. Its annotations, which pandas_udf reads
    to tell the UDF's kind, are strings under ``from __future__ import annotations``: given as
    the classes here."""
    import pandas as pd
    from pyspark.sql.functions import pandas_udf

    function.__annotations__ = {"ids": pd.Series, "payloads": pd.Series, "return": returns}
    return pandas_udf(function, return_type)


def _readable(writers: dict[int, RegisteredSchema | None]) -> dict[int, str]:
    """The resolved descriptors of the writers that are Protobuf schemas which resolved."""
    return {
        i: w.descriptors
        for i, w in writers.items()
        if w is not None and w.schema_type.upper() == "PROTOBUF" and w.descriptors is not None
    }


#: The well-known types the JVM decoder writes as :func:`protobuf_schema.plain` does; any other
#: (Duration, wrappers, Struct, Any...) is printed by protobuf's json_format, which it does not mirror.
_JVM_WELL_KNOWN = {protobuf_schema.TIMESTAMP}


def jvm_decodes(writers: dict[int, RegisteredSchema | None], *, use_extension: bool | None = None) -> bool:
    """Whether :func:`decoded` runs in the JVM for these writers: the session has kafkalake's
    extension and no writer's messages hold a well-known type it does not write."""
    if not resolve(use_extension):
        return False
    for descriptors in _readable(writers).values():
        try:
            if protobuf_schema.well_known_used(descriptors) - _JVM_WELL_KNOWN:
                return False
        except UnusableSchemaError:
            continue  # its records are dead letters either way
    return True


def _jvm_call(
    writers: dict[int, RegisteredSchema | None],
    sid: Column,
    payload: Column,
    *,
    names_only: bool,
    table_type: StructType | None = None,
) -> Column:
    """kafkalake_protobuf_decode over the readable writers, handed as a literal map of schema id to
    FileDescriptorSet bytes (once per batch plan). The other known writers' records get
    :func:`_decode_one`'s reason and detail; with ``names_only``, a null name, as
    :func:`message_type_names` gives them. With ``table_type``, a fifth field ``values``: the record
    in that type where its message type fits it (its ``json`` then null)."""
    import base64

    from pyspark.sql import functions as F

    readable = _readable(writers)
    pairs = [
        c
        for i, d in sorted(readable.items())
        for c in (F.lit(i).cast("long"), F.lit(bytearray(base64.b64decode(d))))
    ]
    literal = F.create_map(*pairs) if pairs else F.create_map().cast("map<bigint,binary>")
    arguments = [sid, payload, literal, F.lit(names_only)]
    if table_type is not None:
        arguments.append(F.lit(table_type.json()))
    result = F.call_function("kafkalake_protobuf_decode", *arguments)
    if names_only:
        return result["name"]
    none = F.lit(None).cast("string")
    for i, writer in sorted(writers.items()):
        if writer is not None and i not in readable:
            _, _, reason, detail = _decode_one(writer, i, b"")
            fields = [
                none.alias("name"),
                none.alias("json"),
                F.lit(reason).alias("reason"),
                F.lit(detail).alias("detail"),
            ]
            if table_type is not None:
                fields.append(F.lit(None).cast(table_type).alias("values"))
            result = F.when(sid == i, F.struct(*fields)).otherwise(result)
    return result


def decoded(
    writers: dict[int, RegisteredSchema | None],
    sid: Column,
    payload: Column,
    *,
    use_extension: bool | None = None,
    table_type: StructType | None = None,
) -> Column:
    """A struct per record: its message type's full name and its values as JSON, or the reason
    (and detail) it did not decode; all null where there is no known schema id or no payload.
    In the JVM where :func:`jvm_decodes`, else in a Python UDF; the same results. With
    ``table_type``, in the JVM, a fifth field ``values``: see :func:`values_of`."""
    import pandas as pd

    if jvm_decodes(writers, use_extension=use_extension):
        return _jvm_call(writers, sid, payload, names_only=False, table_type=table_type)

    def decode(ids: pd.Series, payloads: pd.Series) -> pd.DataFrame:
        rows = [
            _decode_one(writers.get(int(i)), int(i), p) if pd.notna(i) and p is not None else (None,) * 4
            for i, p in zip(ids, payloads, strict=True)
        ]
        return pd.DataFrame(rows, columns=["name", "json", "reason", "detail"])

    return _vectorised(decode, _DECODED_TYPE, pd.DataFrame)(sid, payload)


def values_of(result: Column, table_type: StructType, *, direct: bool) -> Column:
    """A decoded record's values in the table's type: with ``direct`` (:func:`decoded` was given
    ``table_type`` and ran in the JVM), those it decoded straight into that type, else ``from_json``
    of its JSON; without, ``from_json`` of the JSON."""
    from pyspark.sql import functions as F

    from_text = json_functions.from_json(result["json"], table_type)
    return F.coalesce(result["values"], from_text) if direct else from_text


def type_name(schema: RegisteredSchema | None, payload: bytes | None) -> str | None:
    """The full name of the message type ``payload``'s message indexes name in ``schema``; None
    where they name none, cannot be read, or the schema is unknown or unreadable (its records are
    dead letters, the table follows no type for them)."""
    if schema is None or payload is None or schema.descriptors is None:
        return None
    try:
        indexes, _ = protobuf_schema.message_indexes(payload)
        return str(protobuf_schema.message_type(schema.descriptors, indexes).full_name)
    except (protobuf_schema.MessageIndexError, UnusableSchemaError):
        return None


def index_prefix(payload: Column) -> Column:
    """The bytes of each payload's message-index list, read in SQL without a schema, where its count
    and every index are one varint byte each (a path of at most 63 indexes below 64: ``00`` for
    ``[0]``, nearly every record); null where a varint is longer, or there is no payload. The
    count's byte is zigzag ``2n``, so the list is ``n + 1`` bytes; an odd (negative) count is its
    byte alone, which :func:`type_name` refuses as the decoder does."""
    from pyspark.sql import functions as F

    first = F.conv(F.hex(F.substring(payload, 1, 1)), 16, 10).cast("int")
    length = F.when(first % 2 == 0, F.floor(first / 2).cast("int") + 1).otherwise(1)
    prefix = payload.substr(F.lit(1), length)
    return F.when((first < 128) & F.hex(prefix).rlike(_ONE_BYTE_VARINTS), prefix)


def message_type_names(
    writers: dict[int, RegisteredSchema | None],
    sid: Column,
    payload: Column,
    *,
    use_extension: bool | None = None,
) -> Column:
    """The full name of each record's message type; null where its indexes name none. In the JVM
    where the session has kafkalake's extension (the message is not read, so any type will do)."""
    import pandas as pd

    if resolve(use_extension):
        return _jvm_call(writers, sid, payload, names_only=True)

    def names(ids: pd.Series, payloads: pd.Series) -> pd.Series:
        return pd.Series(
            [
                type_name(writers.get(int(i)), p) if pd.notna(i) else None
                for i, p in zip(ids, payloads, strict=True)
            ],
            dtype=object,
        )

    return _vectorised(names, "string", pd.Series)(sid, payload)


class ProtobufTopicParser(AvroTopicParser):
    """:class:`TopicParser` for ``format: protobuf``: the table's columns are the fields of the
    message types the records were written with, from the registry's schemas."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: (schema id, message type) pairs the table already follows.
        self._types: set[tuple[int, str]] = set()

    def _id_and_payload(self, value: Column, headers: Column) -> tuple[Column, Column]:
        """The schema id and what the decoder reads: the message indexes, then the message. With
        the id in the ``__value_schema_id`` header, the indexes follow it there, the value is the
        bare message."""
        from pyspark.sql import functions as F

        id_header = wire_format.header(headers, wire_format.VALUE_SCHEMA_ID_HEADER)
        sid = wire_format.carried_schema_id(value, id_header, indexes=True)
        in_header = F.concat(F.substring(id_header, wire_format.FRAME_BYTES + 1, 2**31 - 1), value)
        return sid, F.when(id_header.isNotNull(), in_header).otherwise(wire_format.payload(value))

    def ensure_schema(self, bronze: DataFrame, source: str) -> None:
        from pyspark.sql import functions as F

        self._ensure_key_writers(bronze)
        sid, payload = self._id_and_payload(F.col("value"), F.col("headers"))
        # One pass for the ids and the message indexes they come with; only a record whose
        # indexes are not one byte each (a type beyond the 63rd, a path deeper than 63) needs the
        # decoder's pass, on those records alone.
        prefix = index_prefix(payload)
        longer = prefix.isNull() & (F.octet_length(payload) > 0)
        rows = (
            bronze.select(sid.alias("id"), prefix.alias("prefix"), longer.alias("longer"))
            .where(F.col("id").isNotNull())
            .distinct()
            .collect()
        )
        for i in sorted({int(r["id"]) for r in rows}):
            if i not in self._writers:
                self._writers[i] = self.writer_schemas.get(
                    i, protobuf=True, subject=self.topic.registry_subject
                )
                if self._writers[i] is None:
                    log.warning("topic %s: schema id %d is not in the registry", self.topic.name, i)
        found = {
            (int(r["id"]), type_name(self._writers[int(r["id"])], bytes(r["prefix"])))
            for r in rows
            if r["prefix"] is not None
        }
        if any(r["longer"] for r in rows):
            found |= {
                (int(r["id"]), r["name"])
                for r in bronze.where(sid.isNotNull() & longer)
                .select(sid.alias("id"), message_type_names(self._writers, sid, payload).alias("name"))
                .distinct()
                .collect()
            }
        for i, name in sorted((i, str(name)) for i, name in found if name is not None):
            if (i, name) in self._types:
                continue
            writer = self._writers[i]
            assert writer is not None
            kind = protobuf_schema.message_type_by_name(protobuf_schema.descriptors_of(writer), name)
            self._follow(
                nullable_everywhere(protobuf_schema.spark_type(kind)),
                f"registry schema id {i}, message {name}",
                source,
            )
            self._types.add((i, name))
        if self.schema is None:
            # No record names a message type yet (all dead letters): the table starts from the
            # first message of the subject's latest version, what a producer writes by default.
            latest = self.writer_schemas.resolved(self._latest("PROTOBUF"))
            kind = protobuf_schema.message_type(protobuf_schema.descriptors_of(latest), [0])
            origin = (
                f"registry subject {latest.subject} version {latest.version} (schema id {latest.id}), "
                f"message {kind.full_name}"
            )
            self._follow(nullable_everywhere(protobuf_schema.spark_type(kind)), origin, source)

    def _parsed_frame(self, bronze: DataFrame) -> DataFrame:
        from pyspark.sql import functions as F
        from pyspark.sql.types import StructType

        assert self.schema is not None
        config = self.config
        frame = bronze.select(parse_columns.kafka_metadata(), F.col("value").alias(VALUE))
        value = F.col(VALUE)
        size = F.octet_length(value)
        fits = value.isNotNull() & (size > 0) & (size <= config.max_value_bytes)
        sid, payload = self._id_and_payload(value, F.col(KAFKA_COLUMN)["headers"])
        id_header = wire_format.header(F.col(KAFKA_COLUMN)["headers"], wire_format.VALUE_SCHEMA_ID_HEADER)
        frame = frame.withColumn(SCHEMA_ID, F.when(fits, sid))
        known = sorted(i for i, writer in self._writers.items() if writer is not None)
        is_known = F.col(SCHEMA_ID).isin(known) if known else F.lit(False)
        table_type = StructType.fromJson(self.schema)
        # Straight into the table's type where the JVM decodes: no JSON written and read again
        # for the message types that fit it (the Python decoder gives JSON only).
        direct = jvm_decodes(self._writers)
        ids, payloads = F.when(is_known, F.col(SCHEMA_ID)), F.when(is_known, payload)
        # One answer to "in the JVM?" for the decode and for how its values are read.
        if direct:
            decode = _jvm_call(self._writers, ids, payloads, names_only=False, table_type=table_type)
        else:
            decode = decoded(self._writers, ids, payloads, use_extension=False)
        frame = frame.withColumn(_DECODED, decode)
        result = F.col(_DECODED)
        reason, detail = frame_checks(config, id_header, known, indexes=True)
        reason = reason.when(result["reason"].isNotNull(), result["reason"])
        detail = detail.otherwise(result["detail"])
        # The values in a column of their own: written inline in each field's column, the
        # optimizer gives every field a from_json of its own (pruned to that field), and a table of
        # N columns parsed each record N times.
        values = values_of(result, table_type, direct=direct)
        frame = frame.select("*", reason.alias(REASON), detail.alias(DETAIL), values.alias(_VALUES))
        columns = [F.col(KAFKA_COLUMN)]
        columns += [
            F.when(F.col(REASON).isNull(), F.col(_VALUES)[f.name]).alias(f.name) for f in table_type.fields
        ]
        frame = frame.select(*columns, F.col(REASON), F.col(DETAIL), F.col(VALUE))
        if self.topic.key_format is not None:
            frame = registry_keys.checked_keys(frame, self.topic.key_format, self._key_writers)
        return parse_columns.with_expectations(frame, config.expectations)
