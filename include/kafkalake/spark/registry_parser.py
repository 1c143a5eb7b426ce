"""Topics in a schema registry's wire format (``format: avro``): bronze rows → the parsed frame.

Each value is framed as Confluent's serializers write it: the magic byte 0, the writer schema's id
(4 bytes, big-endian), the Avro payload. A micro-batch is decoded on Spark's own ``from_avro``:

* the batch's distinct schema ids are read on the driver (one small aggregate), and each id's writer
  schema is fetched once a run (:class:`~kafkalake.kafka.schema_registry.WriterSchemas`, which keeps
  it beside the schema history, so later runs and replays need no registry for it);
* every record is decoded with its own writer schema and resolved to the topic's reader schema, the
  subject's latest version (``from_avro`` with ``avroSchema``: Avro's schema resolution, so a field
  the writer lacks takes its default): one ``CASE`` on the schema id, one pass, no union;
* ``from_avro`` runs in PERMISSIVE mode, which turns a payload it cannot decode into a record of
  nulls without a word (FAILFAST would fail the whole batch on one record). So the reader schema is
  given one more field, :data:`DECODED_MARK` (a boolean with the default true, which no writer has:
  schema resolution fills it in on every record it decodes); a record whose mark is null did not
  decode, and is a dead letter ``undecodable``, never a row of nulls.

Dead letters, each with its reason and detail: ``bad_magic_byte`` (a value shorter than the frame, or
whose first byte is not 0), ``unknown_schema_id`` (the registry has no such id), ``undecodable``;
besides those every topic has (``empty_value``, ``oversize``, tombstones).

The table's schema follows the registry: the reader schema's Spark type (every field nullable) is
the first schema version; a later latest version with new fields adds them under ``addNewColumns``
(``failOnNewColumns`` stops the parsed side with ``schema_rejected``, ``rescue`` and ``none`` leave
them out); a field the reader schema dropped keeps its column, null. Each change is a schema-history
version named after the registry version it came from. The registry unreachable raises
:class:`~kafkalake.core.errors.RegistryUnreachableError`: the batch's bronze rows land, and the parsed
side parks and catches up from bronze later, like any parsed failure.
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from kafkalake.config.topic import DECODED_KEY_FORMATS, TopicConfig
from kafkalake.core.errors import SchemaRejectedError, UnusableSchemaError
from kafkalake.kafka.schema_registry import RegisteredSchema, RegistryClient, WriterSchemas
from kafkalake.lake.schema_algebra import Schema, merge
from kafkalake.spark import parse_columns, registry_keys, wire_format
from kafkalake.spark.parse_columns import DETAIL, KAFKA_COLUMN, REASON, VALUE
from kafkalake.spark.registry_keys import DECODED_MARK, with_decoded_mark
from kafkalake.spark.topic_parser import RunStats, TopicParser

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

log = logging.getLogger(__name__)

#: Working column: the writer schema's id from the frame; null where the value is not framed.
SCHEMA_ID = "_kafka_schema_id"
_DECODED = "_kafka_decoded"


def topic_parser(spark: SparkSession, topic: TopicConfig, stats: RunStats | None = None) -> TopicParser:
    """The parser of the topic's format: JSON's, or the registry's for a registry format."""
    if topic.format == "protobuf":
        from kafkalake.spark.protobuf_parser import ProtobufTopicParser

        return ProtobufTopicParser(spark, topic, stats)
    if topic.uses_registry:
        return AvroTopicParser(spark, topic, stats)
    return TopicParser(spark, topic, stats)


def schema_ids(bronze: DataFrame) -> list[int]:
    """The distinct schema ids of a batch's values (from the frame, or the ``__value_schema_id``
    header), read on the driver. Protobuf's parser reads its ids with their message indexes
    (``ProtobufTopicParser.ensure_schema``)."""
    from pyspark.sql import functions as F

    id_header = wire_format.header(F.col("headers"), wire_format.VALUE_SCHEMA_ID_HEADER)
    ids = (
        bronze.select(wire_format.carried_schema_id(F.col("value"), id_header).alias("id"))
        .where(F.col("id").isNotNull())
        .distinct()
    )
    return sorted(int(row["id"]) for row in ids.collect())


def nullable_everywhere(data_type: Any) -> Any:
    """A Spark JSON type with every struct field, array element and map value nullable: the table
    takes a record of any version of the schema, whatever each version requires."""
    if not isinstance(data_type, dict):
        return data_type
    kind = data_type["type"]
    if kind == "struct":
        fields = [
            {**f, "type": nullable_everywhere(f["type"]), "nullable": True} for f in data_type["fields"]
        ]
        return {**data_type, "fields": fields}
    if kind == "array":
        return {
            **data_type,
            "elementType": nullable_everywhere(data_type["elementType"]),
            "containsNull": True,
        }
    if kind == "map":
        return {
            **data_type,
            "keyType": nullable_everywhere(data_type["keyType"]),
            "valueType": nullable_everywhere(data_type["valueType"]),
            "valueContainsNull": True,
        }
    return data_type


def _conform(value: Column, actual: Any, wanted: Any) -> Column:
    """A decoded field as its table column's type (the table may be wider than the reader schema)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    if actual == wanted:
        return value
    target = (
        StructType.fromJson(
            {"type": "struct", "fields": [{"name": "x", "type": wanted, "nullable": True, "metadata": {}}]}
        )
        .fields[0]
        .dataType
    )
    if nullable_everywhere(actual) == wanted or not isinstance(wanted, dict):
        return value.cast(target)
    # A nested struct that gained or lost fields: by name, which a cast (by position) is not.
    return F.from_json(F.to_json(value), target)


def frame_checks(
    config: Any, id_header: Column, known: list[int], indexes: bool = False
) -> tuple[Column, Column]:
    """The dead-letter reason and detail of what the frame tells (a null, empty or oversize value,
    no frame, a schema id the registry lacks) over the columns :data:`VALUE` and :data:`SCHEMA_ID`:
    ``CASE`` chains the caller goes on with its decoder's own reasons."""
    from pyspark.sql import functions as F

    value, sid = F.col(VALUE), F.col(SCHEMA_ID)
    size = F.octet_length(value)
    framed = sid.isNotNull()
    is_known = sid.isin(known) if known else F.lit(False)
    reason = (
        F.when(value.isNull(), parse_columns.null_value_reason(config))
        .when(size == 0, F.lit("empty_value"))
        .when(size > config.max_value_bytes, F.lit("oversize"))
        .when(~framed, F.lit("bad_magic_byte"))
        .when(~is_known, F.lit("unknown_schema_id"))
    )
    detail = (
        F.when(
            size > config.max_value_bytes,
            F.format_string(f"value is %d bytes, over max_value_bytes {config.max_value_bytes}", size),
        )
        .when(
            value.isNotNull() & (size > 0) & ~framed,
            wire_format.carried_problem(value, id_header, wire_format.VALUE_SCHEMA_ID_HEADER, indexes),
        )
        .when(framed & ~is_known, F.format_string("schema id %d is not in the registry", sid))
    )
    return reason, detail


def parse_registry_batch(
    bronze: DataFrame,
    table: Schema,
    reader: RegisteredSchema,
    reader_type: Schema,
    writers: dict[int, RegisteredSchema | None],
    config: Any,
) -> DataFrame:
    """Bronze rows → the parsed frame :func:`parse_columns.parse_batch` makes for JSON: ``_kafka``,
    the table's fields, and the working columns :data:`REASON`, :data:`DETAIL`, :data:`VALUE`.

    ``writers``: the writer schema of each schema id the batch holds (None: the registry has none).
    """
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro
    from pyspark.sql.types import StructType

    frame = bronze.select(parse_columns.kafka_metadata(), F.col("value").alias(VALUE))
    value = F.col(VALUE)
    size = F.octet_length(value)
    # Values over the limit are never decoded, as no JSON parser runs on them.
    fits = value.isNotNull() & (size > 0) & (size <= config.max_value_bytes)
    id_header = wire_format.header(F.col(KAFKA_COLUMN)["headers"], wire_format.VALUE_SCHEMA_ID_HEADER)
    frame = frame.withColumn(SCHEMA_ID, F.when(fits, wire_format.carried_schema_id(value, id_header)))
    sid = F.col(SCHEMA_ID)
    payload = wire_format.carried_payload(value, id_header)
    options = {"avroSchema": with_decoded_mark(reader.schema), "mode": "PERMISSIVE"}
    known = sorted(i for i, writer in writers.items() if writer is not None)
    decoded: Any = None
    for i in known:
        writer = writers[i]
        assert writer is not None
        branch = from_avro(payload, writer.schema, options)
        decoded = F.when(sid == i, branch) if decoded is None else decoded.when(sid == i, branch)
    if decoded is None:
        mark = {"name": DECODED_MARK, "type": "boolean", "nullable": True, "metadata": {}}
        decoded = F.lit(None).cast(
            StructType.fromJson({**reader_type, "fields": [*reader_type["fields"], mark]})
        )
    frame = frame.withColumn(_DECODED, decoded)
    undecoded = F.col(_DECODED)[DECODED_MARK].isNull()

    reason, detail = frame_checks(config, id_header, known)
    reason = reason.when(undecoded, F.lit("undecodable"))
    detail = detail.when(
        sid.isNotNull() & undecoded,
        F.format_string("the payload does not decode with writer schema id %d", sid),
    )
    frame = frame.select("*", reason.alias(REASON), detail.alias(DETAIL))
    decoded_fields = {f["name"]: f["type"] for f in reader_type["fields"]}
    columns = [F.col(KAFKA_COLUMN)]
    for field in table["fields"]:
        name, wanted = field["name"], field["type"]
        target = StructType.fromJson({"type": "struct", "fields": [field]}).fields[0].dataType
        if name in decoded_fields:
            column = _conform(F.col(_DECODED)[name], decoded_fields[name], wanted)
        else:
            column = F.lit(None).cast(target)
        columns.append(F.when(F.col(REASON).isNull(), column).alias(name))
    return frame.select(*columns, F.col(REASON), F.col(DETAIL), F.col(VALUE))


def widened(reader: str, writers: list[str]) -> str:
    """The reader schema with each top-level field of ``writers`` it lacks, as an optional field
    (a union with null first, default null).

    A field dropped from the latest version keeps its column in the table; read with the latest
    version alone, a record written before the drop would lose that field's value (a catch-up or a
    replay decodes old records after the change). Widened, schema resolution reads it from the
    writers that have it and gives null for the others.
    """
    record = json.loads(reader)
    if not isinstance(record, dict) or record.get("type") != "record":
        return reader
    names = {f["name"] for f in record["fields"]}
    extra = []
    for text in writers:
        writer = json.loads(text)
        if not isinstance(writer, dict) or writer.get("type") != "record":
            continue
        for field in writer["fields"]:
            if field["name"] in names:
                continue
            names.add(field["name"])
            kind = field["type"]
            union = kind if isinstance(kind, list) else [kind]
            optional = ["null", *(t for t in union if t != "null")]
            extra.append({"name": field["name"], "type": optional, "default": None})
    if not extra:
        return reader
    return json.dumps({**record, "fields": [*record["fields"], *extra]})


class AvroTopicParser(TopicParser):
    """:class:`TopicParser` for ``format: avro``: the schema comes from the registry, not inference."""

    def __init__(self, spark: SparkSession, topic: TopicConfig, stats: RunStats | None = None) -> None:
        super().__init__(spark, topic, stats)
        self.writer_schemas = WriterSchemas(topic.registry_schema_dir)
        self._writers: dict[int, RegisteredSchema | None] = {}
        #: The writer schemas of the keys' ids (``key_format: avro | protobuf``): ids are the registry's, one
        #: space for keys and values, kept in the same place.
        self._key_writers: dict[int, RegisteredSchema | None] = {}
        self._reader: RegisteredSchema | None = None
        self._reader_type: Schema | None = None

    @property
    def _client(self) -> RegistryClient:
        return self.writer_schemas.client

    def ensure_schema(self, bronze: DataFrame, source: str) -> None:
        """The batch's writer schemas and the topic's reader schema; the table's schema follows it."""
        self._ensure_key_writers(bronze)
        ids = schema_ids(bronze)
        new = [i for i in ids if i not in self._writers]
        if self._reader is None or new:
            # A new id may be a new version: the reader is the subject's latest, asked again.
            latest = self._latest()
            for i in new:
                self._writers[i] = self.writer_schemas.get(i)
                if self._writers[i] is None:
                    log.warning("topic %s: schema id %d is not in the registry", self.topic.name, i)
            self._set_reader(latest, source)

    def _ensure_key_writers(self, bronze: DataFrame) -> None:
        """The writer schemas of the batch's key schema ids, for keys decoded with them."""
        key_format = self.topic.key_format
        if key_format not in DECODED_KEY_FORMATS:
            return
        for i in registry_keys.schema_ids_of_keys(bronze, key_format):
            if i not in self._key_writers:
                self._key_writers[i] = self.writer_schemas.get(
                    i, protobuf=key_format == "protobuf", subject=self.topic.registry_key_subject
                )

    def _latest(self, schema_type: str = "AVRO") -> RegisteredSchema:
        """The subject's latest version, which must be a ``schema_type`` schema."""
        subject = self.topic.registry_subject
        latest = self._client.latest(subject, protobuf=schema_type == "PROTOBUF")
        if latest is None:
            raise UnusableSchemaError(
                f"topic {self.topic.name!r}: {self._client._whose} has no subject {subject!r}: the "
                "topic's records name schemas of another subject, or none is registered yet"
            )
        if latest.schema_type.upper() != schema_type:
            raise UnusableSchemaError(
                f"topic {self.topic.name!r}: subject {subject!r} holds a {latest.schema_type} schema, "
                f"not {schema_type} (format: {self.topic.format})"
            )
        if schema_type == "AVRO":
            # The reader schema, with the named types its references define (writers' are, by get()).
            return self.writer_schemas.self_contained(latest)
        return latest

    def _set_reader(self, latest: RegisteredSchema, source: str) -> None:
        """Read with the latest version widened by the fields of the run's writers it lacks."""
        subject = self.topic.registry_subject
        writers = [w.schema for w in self._writers.values() if w is not None]
        reader = replace(latest, schema=widened(latest.schema, writers))
        if self._reader is not None and reader.schema == self._reader.schema:
            return
        try:
            reader_type = self._spark_type(reader.schema)
        except UnusableSchemaError:
            raise
        except Exception as err:
            # A field that cannot be carried over (a named type defined elsewhere in its writer):
            # the latest version as it is; that field's values are not read.
            log.warning("topic %s: reading with the latest version only (%s)", self.topic.name, err)
            reader = latest
            reader_type = self._spark_type(reader.schema)
        self._reader, self._reader_type = reader, reader_type
        origin = f"registry subject {subject} version {latest.version} (schema id {latest.id})"
        self._follow(nullable_everywhere(reader_type), origin, source)

    def _follow(self, table_type: Schema, origin: str, source: str) -> None:
        """The table's schema follows ``table_type`` (the registry's) under the evolution mode."""
        if self.schema is None:
            self._persist(table_type, origin)
            self.schema = table_type
            return
        merged = merge(self.schema, table_type, max_columns=self.config.max_columns)
        if not merged.added:
            return
        fields = ", ".join(str(c) for c in merged.added)
        if self.config.evolution == "addNewColumns":
            self._persist(merged.schema, f"{origin}, read at {source}")
            self.schema = merged.schema
        elif self.config.evolution == "failOnNewColumns":
            self.history.propose(merged.schema, f"new fields in {origin}: {fields}")
            raise SchemaRejectedError(
                f"topic {self.topic.name!r}: new fields under evolution mode failOnNewColumns: {fields} "
                f"({origin}). The proposed schema is in {self.history.directory}/pending.json"
            )
        else:
            log.info(
                "topic %s: %s adds %s; left out (evolution %s)",
                self.topic.name,
                origin,
                fields,
                self.config.evolution,
            )

    def _spark_type(self, avro_schema: str) -> Schema:
        """The Spark type ``from_avro`` gives records of ``avro_schema``, in Spark's JSON form."""
        from pyspark.sql import functions as F
        from pyspark.sql.avro.functions import from_avro

        probe = self.spark.range(0).select(from_avro(F.lit(None).cast("binary"), avro_schema).alias("v"))
        data_type = probe.schema["v"].dataType.jsonValue()
        if not isinstance(data_type, dict) or data_type.get("type") != "struct":
            raise UnusableSchemaError(
                f"topic {self.topic.name!r}: the registry's schema of subject "
                f"{self.topic.registry_subject!r} is not an Avro record: {json.dumps(data_type)[:200]}"
            )
        return data_type

    def _parsed_frame(self, bronze: DataFrame) -> DataFrame:
        assert self.schema is not None and self._reader is not None and self._reader_type is not None
        frame = parse_registry_batch(
            bronze, self.schema, self._reader, self._reader_type, self._writers, self.config
        )
        if self.topic.key_format is not None:
            frame = registry_keys.checked_keys(frame, self.topic.key_format, self._key_writers)
        return parse_columns.with_expectations(frame, self.config.expectations)
