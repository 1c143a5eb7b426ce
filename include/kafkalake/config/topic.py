"""One topic of the catalog, as the rest of the code sees it: frozen, validated, defaults applied.

:mod:`kafkalake.config.catalog` builds these from YAML; nothing else creates them in production.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from datetime import timedelta

from kafkalake.config.freshness import FreshnessSchedule
from kafkalake.config.locations import is_object_store
from kafkalake.config.maintenance import MaintenanceConfig
from kafkalake.config.parsed import ParsedConfig
from kafkalake.config.schedule import run_interval

#: Records per micro-batch when the catalog sets no ``max_offsets_per_trigger``. A parsed topic
#: caches each batch (and, on its checked path, the parse) for its several writes, so its batches are
#: bounded for the driver's memory; a bronze-only batch is streamed from Kafka to Parquet and never
#: cached, so the bound is only how much work a crash throws away. Each batch also pays ~1.7 s and
#: ~3 CPU-s of fixed cost (planning, Delta's commit and snapshot): ``make bench`` (2,000,000 events,
#: bronze only) took 26.3 s and 44.5 CPU-s in 4 batches, 20.8-21.4 s and 34.4-34.5 CPU-s in 1. With
#: the parsed tables (bench --parsed, ~270-byte events, the driver's 1 GiB heap): 1,000,000 a batch
#: beat 500,000 on both paths (direct 43,544 vs 38,646 rec/s; checked 34,538 vs 31,797) at the same
#: peak memory, and the checked path still held 2,000,000 (slower: 29,617). Topics of records over
#: ~0.5 KiB should set a smaller batch.
MAX_OFFSETS_PARSED = 1_000_000
MAX_OFFSETS_BRONZE_ONLY = 2_000_000
#: How a topic's values are written: plain JSON, Debezium's change events in JSON (docs/cdc.md), or a
#: schema registry's wire format (a magic byte 0, a 4-byte schema id, the payload), decoded with the
#: schema the registry holds for that id (docs/registry.md).
VALUE_FORMATS = ("json", "debezium", "avro", "protobuf", "json_schema")
#: Formats decoded with the registry's schemas: they need its connection.
REGISTRY_FORMATS = ("avro", "protobuf")
#: JSON in the registry's frame (Confluent's JSON Schema serializer): the frame is stripped and the
#: JSON read as plain JSON's (inferred schema); the schema ids are not looked up.
FRAMED_JSON_FORMATS = ("json_schema",)
#: How a topic's keys are written, when a schema registry's serializer frames them too (``key_format``):
#: each key's frame (or its ``__key_schema_id`` header) is checked, an Avro or Protobuf key is decoded
#: with its writer schema, and the latest table is keyed by the key's payload, the frame left out
#: (docs/registry.md).
KEY_FORMATS = ("avro", "protobuf", "json_schema")
#: Key formats decoded with the registry's schemas (the others' keys are checked for their frame).
DECODED_KEY_FORMATS = ("avro", "protobuf")


@dataclass(frozen=True)
class TopicConfig:
    """One Kafka topic, its bronze table (raw bytes) and, when `parsed.enabled`, its parsed tables.

    The parsed table, its dead-letter table and its latest table (with `parsed.latest_by_key`) sit
    side by side: ``<parsed_path>``, ``<parsed_path>_dead_letter`` and ``<parsed_path>_latest``. When
    the catalog gives the bronze table no `path`, ``parsed_path`` is
    ``<lake root>/<parsed.database>/<parsed.table>``; when it does, the parsed tables go in a
    ``<parsed.database>/`` folder beside the bronze table: ``/data/orders`` →
    ``/data/silver/orders``, ``s3a://b/raw/pay`` → ``s3a://b/raw/silver/pay``.
    """

    name: str
    freshness_sla: timedelta
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int | None = MAX_OFFSETS_PARSED
    database: str = "bronze"
    table: str = ""
    #: Absolute table location; derived from the lake root when the catalog gives none.
    path: str = ""
    kafka_conn_id: str = "kafka_default"
    fail_on_data_loss: bool = True
    owner: str = "data-platform"
    tags: tuple[str, ...] = ()
    spark_conf: tuple[tuple[str, str], ...] = ()
    #: Its `table` defaults to this topic's table name.
    parsed: ParsedConfig = field(default_factory=ParsedConfig)
    #: The parsed table's location, set by the loader; when empty, the rule for an explicit `path`.
    parsed_location: str = ""

    def __post_init__(self) -> None:
        if not self.parsed.table and self.table:
            object.__setattr__(self, "parsed", replace(self.parsed, table=self.table))
        if self.format in FRAMED_JSON_FORMATS and not self.parsed.framed:
            object.__setattr__(self, "parsed", replace(self.parsed, framed=True))

    #: The tasks' priority_weight: among tasks waiting for a Spark pool slot, higher goes first.
    priority: int = 1
    #: HTTP connection the SLA-miss alert is POSTed to (kafkalake.airflow.sla_alerts); None: log only.
    sla_webhook_conn_id: str | None = None
    #: Airflow connection (type ``aws``) with the object store's endpoint and credentials, for
    #: tables on ``s3a://``; None: from the workers' environment (kafkalake.lake.store_settings).
    storage_conn_id: str | None = None
    #: :data:`VALUE_FORMATS`: how the parsed side reads the values.
    format: str = "json"
    #: Airflow connection of the schema registry (URL, basic auth) for :data:`REGISTRY_FORMATS`.
    registry_conn_id: str | None = None
    #: :data:`KEY_FORMATS`, or None: the keys are opaque bytes.
    key_format: str | None = None
    maintenance: MaintenanceConfig = field(default_factory=MaintenanceConfig)
    #: Every Spark task of the topic's DAG (ingest, schema refresh, registration, table care) is
    #: killed after this long (Airflow's execution_timeout) and retried: a hung job never holds the
    #: Spark pool's slot, nor the topic, for good.
    spark_task_timeout: timedelta = timedelta(hours=2)
    #: A family entry (:mod:`kafkalake.config.family`): the Kafka topics it lists (``topics``), or
    #: the Java regex its members' whole names match (``topic_pattern``). A family's ``name`` is its
    #: table's name (its DAG id and its jobs' ``--topic`` come from it); not a Kafka topic.
    members: tuple[str, ...] = ()
    topic_pattern: str | None = None
    #: ``interval`` (a run every SLA / 3) or ``freshness`` (queued by an asset watcher from what
    #: waits in Kafka: kafkalake.config.freshness); ``freshness`` holds the latter's settings.
    schedule: str = "interval"
    freshness: FreshnessSchedule | None = None

    @property
    def uses_registry(self) -> bool:
        return self.format in REGISTRY_FORMATS

    @property
    def registry_subject(self) -> str:
        """The registry subject of the values (Confluent's default TopicNameStrategy)."""
        return f"{self.name}-value"

    @property
    def registry_key_subject(self) -> str:
        """The registry subject of the keys (TopicNameStrategy)."""
        return f"{self.name}-key"

    @property
    def registry_schema_dir(self) -> str:
        """The registry's writer schemas this topic's values named, kept with the schema history
        so a replay or catch-up reads them without the registry."""
        return f"{self.schema_dir}/registry"

    @property
    def dag_id(self) -> str:
        return dag_id_for(self.name)

    @property
    def is_family(self) -> bool:
        return bool(self.members) or self.topic_pattern is not None

    @property
    def kafka_source(self) -> str:
        """What it reads from Kafka, for messages: ``topic 'orders'``, ``topics 'a', 'b'`` or
        ``topics matching 'clicks-.*'``."""
        if self.topic_pattern is not None:
            return f"topics matching {self.topic_pattern!r}"
        if self.members:
            return "topics " + ", ".join(repr(t) for t in self.members)
        return f"topic {self.name!r}"

    @property
    def on_object_store(self) -> bool:
        """Whether its tables are on an object store (their checkpoint and small files too)."""
        return is_object_store(self.path)

    @property
    def qualified_table(self) -> str:
        return f"{self.database}.{self.table}"

    @property
    def run_interval(self) -> timedelta:
        return run_interval(self.freshness_sla)

    @property
    def checkpoint_path(self) -> str:
        """One checkpoint per table, found from the table's location.

        A leading underscore keeps it out of VACUUM's reach and out of readers' file listings.
        """
        return f"{self.path.rstrip('/')}/_kafkalake/checkpoint"

    @property
    def schema_dir(self) -> str:
        """The parsed table's schema history, kept beside the bronze checkpoint."""
        return f"{self.path.rstrip('/')}/_kafkalake/schemas"

    @property
    def parsed_backlog_file(self) -> str:
        return parsed_backlog_file(self.path)

    @property
    def gaps_path(self) -> str:
        """The Delta table of offsets Kafka deleted before they were read (``fail_on_data_loss:
        false``): with bronze, so it moves, and is refreshed, with the table it describes."""
        return f"{self.path.rstrip('/')}/_kafkalake/gaps"

    @property
    def history_path(self) -> str:
        """The Delta table of the entry's runs (:mod:`kafkalake.lake.run_history`), one for a family
        too: beside bronze (:func:`history_path`)."""
        return history_path(self.path)

    @property
    def parsed_path(self) -> str:
        return self.parsed_location or beside(self.path, self.parsed.database, self.parsed.table)

    @property
    def dead_letter_path(self) -> str:
        return f"{self.parsed_path}_dead_letter"

    @property
    def latest_path(self) -> str:
        return f"{self.parsed_path}_latest"

    @property
    def current_path(self) -> str:
        """A ``format: debezium`` topic's current-state table: the source table as it is."""
        return f"{self.parsed_path}_current"

    @property
    def current_table(self) -> str:
        return f"{self.parsed_table}_current"

    @property
    def parsed_table(self) -> str:
        return f"{self.parsed.database}.{self.parsed.table}"

    @property
    def dead_letter_table(self) -> str:
        return f"{self.parsed_table}_dead_letter"

    @property
    def latest_table(self) -> str:
        return f"{self.parsed_table}_latest"


def parsed_backlog_file(bronze_path: str) -> str:
    """Where a parsed side that fell behind bronze records what it still has to parse."""
    return f"{bronze_path.rstrip('/')}/_kafkalake/parsed_backlog.json"


def history_path(bronze_path: str) -> str:
    """Where the runs of the entry whose bronze table is at ``bronze_path`` are kept:
    ``<bronze's folder>/_kafkalake_runs/<bronze's name>``, beside bronze, not in it. Delta (Spark)
    refuses to create a table in a folder that already holds another Delta table
    (``DELTA_MISSING_DELTA_TABLE``), so a history inside bronze's folder, written by a run that
    failed before the first bronze commit (a wrong password on day one), stopped bronze from ever
    being created; and beside it, a full refresh leaves the runs before it readable."""
    folder, _, name = bronze_path.rstrip("/").rpartition("/")
    return f"{folder}/_kafkalake_runs/{name}"


def beside(path: str, database: str, table: str) -> str:
    """``<folder of path>/<database>/<table>``: where an explicitly placed table's parsed tables go."""
    scheme, sep, rest = path.rstrip("/").partition("://")
    # At a bucket's root there is no folder above: the result is inside the table, a clash.
    folder = scheme + sep + rest.rsplit("/", 1)[0] if sep else os.path.dirname(path.rstrip("/") or "/")
    return os.path.join(folder, database, table)


def dag_id_for(topic_name: str) -> str:
    return "ingest_" + sanitize_identifier(topic_name)


def sanitize_identifier(name: str) -> str:
    """``orders-v2`` → ``orders_v2``: a table or DAG name from a topic name."""
    cleaned = re.sub(r"[^a-z0-9_]", "_", name.lower())
    return cleaned if re.match(r"[a-z_]", cleaned) else f"t_{cleaned}"
