"""The topic catalog: YAML in, frozen and validated objects out.

Every error names the file, the topic and the field, so a typo is fixed in one look. In strict mode
(tests, CI) the first broken topic raises; in lenient mode (the DAG processor) broken topics are
reported and the others still get their DAGs.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import yaml

from kafkalake.durations import parse_duration
from kafkalake.maintenance_config import MaintenanceConfig, parse_maintenance
from kafkalake.schedule import run_interval

# Kafka's own rule for topic names.
_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")
_IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]*")
STARTING_OFFSETS = ("earliest", "latest")
# Airflow's own limits; an entry past them would break the DAG file for every topic.
MAX_DAG_ID_LENGTH = 250
MAX_TAG_LENGTH = 100

_TOPIC_FIELDS = {
    "name",
    "freshness_sla",
    "starting_offsets",
    "max_offsets_per_trigger",
    "database",
    "table",
    "path",
    "kafka_conn_id",
    "fail_on_data_loss",
    "owner",
    "tags",
    "spark_conf",
    "maintenance",
}
_DEFAULTS_FIELDS = _TOPIC_FIELDS - {"name", "table", "path"}


class CatalogError(ValueError):
    """A catalog file that cannot be used, with the file, topic and field it is about."""

    def __init__(self, file: Path, message: str, topic: str | None = None, field: str | None = None) -> None:
        where = str(file)
        if topic is not None:
            where += f": topic {topic!r}"
        if field is not None:
            where += f": field {field!r}"
        super().__init__(f"{where}: {message}")
        self.file = file
        self.topic = topic
        self.field = field


@dataclass(frozen=True)
class TopicConfig:
    """One Kafka topic and the Delta table it lands in."""

    name: str
    freshness_sla: timedelta
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int | None = 100_000
    database: str = "bronze"
    table: str = ""
    #: Absolute table location; derived from the lake root when the catalog gives none.
    path: str = ""
    kafka_conn_id: str = "kafka_default"
    fail_on_data_loss: bool = True
    owner: str = "data-platform"
    tags: tuple[str, ...] = ()
    spark_conf: tuple[tuple[str, str], ...] = ()
    maintenance: MaintenanceConfig = field(default_factory=MaintenanceConfig)

    @property
    def dag_id(self) -> str:
        return dag_id_for(self.name)

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


@dataclass(frozen=True)
class Catalog:
    file: Path
    topics: tuple[TopicConfig, ...]
    #: Topics that could not be loaded, with their error (lenient mode only).
    errors: tuple[CatalogError, ...] = field(default=())

    def topic(self, name: str) -> TopicConfig:
        for topic in self.topics:
            if topic.name == name:
                return topic
        known = ", ".join(t.name for t in self.topics) or "none"
        raise CatalogError(self.file, f"no topic named {name!r} (known: {known})")


def dag_id_for(topic_name: str) -> str:
    return "ingest_" + sanitize_identifier(topic_name)


def sanitize_identifier(name: str) -> str:
    """``orders-v2`` → ``orders_v2``: a table or DAG name from a topic name."""
    cleaned = re.sub(r"[^a-z0-9_]", "_", name.lower())
    return cleaned if re.match(r"[a-z_]", cleaned) else f"t_{cleaned}"


def load_catalog(file: Path, lake_root: Path, *, strict: bool = True) -> Catalog:
    """Load and validate a catalog file.

    Args:
        file: the YAML catalog.
        lake_root: where tables without an explicit ``path`` live.
        strict: raise on the first broken topic; when false, collect errors and keep the rest.
    """
    try:
        raw = yaml.safe_load(file.read_text())
    except FileNotFoundError:
        raise CatalogError(file, "file not found (set KAFKALAKE_CATALOG to another file?)") from None
    except yaml.YAMLError as err:
        raise CatalogError(file, f"not valid YAML: {err}") from None
    if not isinstance(raw, Mapping) or not isinstance(raw.get("topics"), list):
        raise CatalogError(file, "expected a mapping with a 'topics' list")
    unknown = set(raw) - {"defaults", "topics"}
    if unknown:
        raise CatalogError(file, f"unknown top-level keys {sorted(unknown)}; allowed: defaults, topics")
    defaults = raw.get("defaults") or {}
    if not isinstance(defaults, Mapping):
        raise CatalogError(file, "must be a mapping", field="defaults")
    bad_defaults = set(defaults) - _DEFAULTS_FIELDS
    if bad_defaults:
        raise CatalogError(
            file,
            f"unknown keys {sorted(bad_defaults)}; allowed: {sorted(_DEFAULTS_FIELDS)}",
            field="defaults",
        )

    topics: list[TopicConfig] = []
    errors: list[CatalogError] = []
    for index, entry in enumerate(raw["topics"]):
        try:
            if not isinstance(entry, Mapping):
                raise CatalogError(file, f"topic #{index + 1} must be a mapping of fields, not {entry!r}")
            topics.append(_topic(file, index, {**defaults, **entry}, lake_root))
        except CatalogError as err:
            if strict:
                raise
            errors.append(err)
    kept = _drop_clashes(file, topics, strict, errors)
    return Catalog(file=file, topics=tuple(sorted(kept, key=lambda t: t.name)), errors=tuple(errors))


def _drop_clashes(
    file: Path, topics: list[TopicConfig], strict: bool, errors: list[CatalogError]
) -> list[TopicConfig]:
    """Two topics may not share a name, a DAG id, a table name or a table location."""
    kept: list[TopicConfig] = []
    claimed: dict[tuple[str, str], str] = {}
    for topic in topics:
        keys = [
            ("name", topic.name),
            ("dag_id", topic.dag_id),
            ("table", topic.qualified_table),
            ("path", topic.path),
        ]
        clash = next((key for key in keys if key in claimed), None)
        if clash is None:
            claimed.update(dict.fromkeys(keys, topic.name))
            kept.append(topic)
            continue
        other = claimed[clash]
        message = (
            "listed twice" if other == topic.name else f"clashes with topic {other!r}: both give {clash[1]!r}"
        )
        # A DAG id comes from the name, so that is the field to change.
        err = CatalogError(file, message, topic.name, "name" if clash[0] == "dag_id" else clash[0])
        if strict:
            raise err
        errors.append(err)
    return kept


def _topic(file: Path, index: int, entry: Mapping[str, Any], lake_root: Path) -> TopicConfig:
    name = entry.get("name")
    label = name if isinstance(name, str) else f"#{index + 1}"

    def fail(field_name: str, message: str) -> CatalogError:
        return CatalogError(file, message, label, field_name)

    unknown = set(entry) - _TOPIC_FIELDS
    if unknown:
        raise fail(sorted(unknown)[0], f"unknown field; allowed: {sorted(_TOPIC_FIELDS)}")
    if not isinstance(name, str) or not _TOPIC_NAME.fullmatch(name) or name in {".", ".."}:
        raise fail("name", "required: a Kafka topic name (letters, digits, '.', '_', '-')")
    if len(dag_id_for(name)) > MAX_DAG_ID_LENGTH:
        raise fail(
            "name",
            f"too long for an Airflow DAG id ({dag_id_for(name)!r} would be over {MAX_DAG_ID_LENGTH} "
            "characters): shorten the topic name",
        )

    if "freshness_sla" not in entry:
        raise fail("freshness_sla", "required: how stale the table may get, e.g. 6h")
    try:
        sla = parse_duration(str(entry["freshness_sla"]))
        run_interval(sla)
    except ValueError as err:
        raise fail("freshness_sla", str(err)) from None

    starting = entry.get("starting_offsets", "earliest")
    if starting not in STARTING_OFFSETS:
        raise fail("starting_offsets", f"must be one of {', '.join(STARTING_OFFSETS)}, not {starting!r}")

    max_offsets = entry.get("max_offsets_per_trigger", 100_000)
    if max_offsets is not None and (
        isinstance(max_offsets, bool) or not isinstance(max_offsets, int) or max_offsets < 1
    ):
        raise fail("max_offsets_per_trigger", f"must be a whole number > 0 or null, not {max_offsets!r}")

    database = entry.get("database", "bronze")
    if not isinstance(database, str) or not _IDENTIFIER.fullmatch(database):
        raise fail("database", f"must be a lower-case SQL identifier, not {database!r}")
    table = entry.get("table") or sanitize_identifier(name)
    if not isinstance(table, str) or not _IDENTIFIER.fullmatch(table):
        raise fail("table", f"must be a lower-case SQL identifier, not {table!r}")

    path = entry.get("path")
    if path is None:
        location = str(lake_root / database / table)
    elif isinstance(path, str) and path:
        # Relative paths are relative to the lake root; URIs (s3a://, abfss://) pass through.
        location = path if "://" in path or path.startswith("/") else str(lake_root / path)
        # One spelling per location, so '/data/t' and '/data/t/' are seen as the same table.
        location = location.rstrip("/") if "://" in location else os.path.normpath(location)
    else:
        raise fail("path", "must be a non-empty string: a directory or a URI such as s3a://bucket/x")

    for text_field in ("kafka_conn_id", "owner"):
        value = entry.get(text_field, getattr(TopicConfig, text_field))
        if not isinstance(value, str) or not value:
            raise fail(text_field, "must be a non-empty string")

    fail_on_data_loss = entry.get("fail_on_data_loss", True)
    if not isinstance(fail_on_data_loss, bool):
        raise fail("fail_on_data_loss", "must be true or false")

    tags = entry.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(t, str) and t for t in tags):
        raise fail("tags", "must be a list of strings")
    if too_long := [t for t in tags if len(t) > MAX_TAG_LENGTH]:
        raise fail(
            "tags", f"Airflow takes tags of at most {MAX_TAG_LENGTH} characters: {too_long[0][:40]!r}…"
        )

    spark_conf = entry.get("spark_conf", {})
    if not isinstance(spark_conf, Mapping) or not all(
        isinstance(k, str) and k.startswith("spark.") for k in spark_conf
    ):
        raise fail("spark_conf", "must map Spark settings (keys starting with 'spark.') to values")

    return TopicConfig(
        name=name,
        freshness_sla=sla,
        starting_offsets=starting,
        max_offsets_per_trigger=max_offsets,
        database=database,
        table=table,
        path=location,
        kafka_conn_id=entry.get("kafka_conn_id", TopicConfig.kafka_conn_id),
        fail_on_data_loss=fail_on_data_loss,
        owner=entry.get("owner", TopicConfig.owner),
        tags=tuple(tags),
        spark_conf=tuple(sorted((k, str(v)) for k, v in spark_conf.items())),
        maintenance=parse_maintenance(file, name, entry.get("maintenance")),
    )
