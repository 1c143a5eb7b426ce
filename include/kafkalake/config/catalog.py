"""The topic catalog: YAML in, frozen and validated objects out.

Every error names the file, the topic and the field, so a typo is fixed in one look. In strict mode
(tests, CI) the first broken topic raises; in lenient mode (the DAG processor) broken topics are
reported and the others still get their DAGs.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import yaml

from kafkalake.config.locations import unsupported
from kafkalake.config.maintenance import parse_maintenance
from kafkalake.config.parsed import (
    MAX_DATABASE_NAME,
    MAX_PARSED_TABLE_NAME,
    MAX_TABLE_NAME,
    identifier_problem,
    merge_parsed,
    parse_parsed,
)
from kafkalake.config.schedule import run_interval
from kafkalake.config.spark_credentials import CREDENTIAL_ADVICE, credential_settings
from kafkalake.config.topic import (
    MAX_OFFSETS_BRONZE_ONLY,
    MAX_OFFSETS_PARSED,
    TopicConfig,
    beside,
    dag_id_for,
    sanitize_identifier,
)
from kafkalake.core.durations import format_duration, parse_duration
from kafkalake.core.errors import CatalogError, ParsedConfigError

# Kafka's own rule for topic names.
_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")
#: Spark reads maxOffsetsPerTrigger as a Java long.
MAX_INT64 = 2**63 - 1
STARTING_OFFSETS = ("earliest", "latest")
#: Airflow keeps a task's priority_weight in a 32-bit column and silently clamps larger values.
MAX_PRIORITY = 2_147_483_647
# Airflow's own limits; an entry past them would break the DAG file for every topic.
MAX_DAG_ID_LENGTH = 250
MAX_TAG_LENGTH = 100
#: Bounds of a Spark task's execution_timeout: long enough for a first run on a large backlog, short
#: enough that a hung job is killed and retried the same day.
MIN_TASK_TIMEOUT = timedelta(minutes=1)
MAX_TASK_TIMEOUT = timedelta(days=2)
#: Far past any real SLA, and far inside the dates Python and Airflow count: the schema refresh reads
#: back one SLA from now, and Airflow adds run intervals to dates (a 3,000,000-day SLA overflowed).
MAX_FRESHNESS_SLA = timedelta(days=3650)

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
    "parsed",
    "priority",
    "sla_webhook_conn_id",
    "storage_conn_id",
    "maintenance",
    "spark_task_timeout",
}
_DEFAULTS_FIELDS = _TOPIC_FIELDS - {"name", "table", "path"}


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


def load_catalog(file: Path, lake_root: Path, *, strict: bool = True) -> Catalog:
    """Load and validate a catalog file.

    Args:
        file: the YAML catalog.
        lake_root: where tables without an explicit ``path`` live.
        strict: raise on the first broken topic; when false, collect errors and keep the rest.
    """
    try:
        # UTF-8 whatever the locale: YAML files are, and another locale would misread them silently.
        text = file.read_text(encoding="utf-8")
        raw = yaml.safe_load(text)
    except FileNotFoundError:
        raise CatalogError(file, "file not found (set KAFKALAKE_CATALOG to another file?)") from None
    except UnicodeDecodeError as err:
        byte, line = err.object[err.start], err.object[: err.start].count(b"\n") + 1
        raise CatalogError(file, f"not UTF-8 text: byte {byte:#04x} on line {line}") from None
    except OSError as err:
        raise CatalogError(file, f"cannot be read: {err.strerror or err}") from None
    except yaml.YAMLError as err:
        raise CatalogError(file, f"not valid YAML: {err}") from None
    _refuse_hidden_readings(file, text)
    if not isinstance(raw, Mapping) or not isinstance(raw.get("topics"), list):
        raise CatalogError(file, "expected a mapping with a 'topics' list")
    # As text: YAML keys may be numbers, booleans or null, which do not sort with strings.
    unknown = sorted(str(k) for k in set(raw) - {"defaults", "topics"})
    if unknown:
        raise CatalogError(file, f"unknown top-level keys {unknown}; allowed: defaults, topics")
    defaults = {} if raw.get("defaults") is None else raw["defaults"]
    if not isinstance(defaults, Mapping):
        raise CatalogError(file, "must be a mapping", field="defaults")
    bad_defaults = sorted(str(k) for k in set(defaults) - _DEFAULTS_FIELDS)
    if bad_defaults:
        raise CatalogError(
            file,
            f"unknown keys {bad_defaults}; allowed: {sorted(_DEFAULTS_FIELDS)}",
            field="defaults",
        )

    if isinstance(defaults.get("parsed"), Mapping) and "table" in defaults["parsed"]:
        raise CatalogError(file, "a table name is per topic, not a default", field="defaults.parsed.table")

    topics: list[TopicConfig] = []
    errors: list[CatalogError] = []
    for index, entry in enumerate(raw["topics"]):
        try:
            if not isinstance(entry, Mapping):
                raise CatalogError(file, f"topic #{index + 1} must be a mapping of fields, not {entry!r}")
            merged = {**defaults, **entry}
            # Unlike spark_conf, `parsed` merges key by key: defaults set the house style.
            if "parsed" in merged:
                merged["parsed"] = merge_parsed(defaults.get("parsed"), entry.get("parsed"))
            topics.append(_topic(file, index, merged, lake_root))
        except CatalogError as err:
            if strict:
                raise
            errors.append(err)
    kept = _drop_clashes(file, topics, strict, errors)
    return Catalog(file=file, topics=tuple(sorted(kept, key=lambda t: t.name)), errors=tuple(errors))


def load_topic(file: Path, lake_root: Path, name: str) -> TopicConfig:
    """One topic of a catalog, as a job or a task loads it when it runs.

    Leniently, as the DAG processor built the topic's DAG: another topic's broken entry is not this
    topic's problem (a strict load failed every topic's jobs with it). The topic's own entry, when
    broken, raises its own error.
    """
    catalog = load_catalog(file, lake_root, strict=False)
    if not any(topic.name == name for topic in catalog.topics):
        for error in catalog.errors:
            if error.topic == name:
                raise error
    return catalog.topic(name)


_INT_TAG, _FLOAT_TAG = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"
# YAML 1.1 (PyYAML, so the catalog) reads 010 as 8 and 1:30 as 90; YAML 1.2 tools, editors and
# the people reading the file take them as 10 and a time.
_OCTAL = re.compile(r"[-+]?0[0-7_]+")


def _refuse_hidden_readings(file: Path, text: str) -> None:
    """A key given twice in one mapping, or a number YAML 1.1 reads unlike its reader, fails the
    load, naming the topic and the field.

    YAML keeps the last key silently, so a second ``freshness_sla`` further down a topic would win
    unseen; ``max_offsets_per_trigger: 010`` would be 8 and ``spark.…: 1:30`` would reach Spark
    as "90". The file is composed into nodes (it parsed already) and walked with the path to each
    mapping; merge keys (``<<``) are YAML's own way to combine mappings and are left alone. An
    alias is the node of its anchor: each node is walked once, so an alias inside its own anchor
    (``&t [*t]``) or aliases of aliases cannot make the walk endless or exponential.
    """
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    stack: list[tuple[yaml.Node, str, str | None]] = [(root, "", None)] if root is not None else []
    seen: set[int] = set()
    while stack:
        node, path, topic = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                item_topic = topic
                if path == "topics" and isinstance(item, yaml.MappingNode):
                    names = [
                        v.value for k, v in item.value if k.value == "name" and isinstance(v, yaml.ScalarNode)
                    ]
                    item_topic = names[-1] if names else f"#{index + 1}"
                stack.append((item, "" if path == "topics" else f"{path}[{index}]", item_topic))
            continue
        if isinstance(node, yaml.ScalarNode):
            _refuse_hidden_number(file, node, path, topic)
            continue
        if not isinstance(node, yaml.MappingNode):
            continue
        first: dict[str, int] = {}
        for key, value in node.value:
            name = str(key.value)
            if name == "<<":
                continue
            field = f"{path}.{name}" if path else name
            line = key.start_mark.line + 1
            if name in first:
                raise CatalogError(
                    file,
                    f"key {name!r} is given twice in one mapping (lines {first[name]} and {line}); "
                    "YAML would keep the last one silently: keep one",
                    topic,
                    field,
                )
            first[name] = line
            stack.append((value, field, topic))


def _refuse_hidden_number(file: Path, node: yaml.ScalarNode, path: str, topic: str | None) -> None:
    if node.style is not None or node.tag not in (_INT_TAG, _FLOAT_TAG):
        return  # quoted, or not a number
    text = node.value
    if ":" in text:
        reading = "a base-60 number"
    elif node.tag == _INT_TAG and _OCTAL.fullmatch(text):
        reading = "an octal number"
    else:
        return
    value = yaml.safe_load(text)
    raise CatalogError(
        file,
        f"{text} (line {node.start_mark.line + 1}) is read by YAML as {reading}, {value}: write the "
        f"number without a leading zero or a colon, or quote it ('{text}') to keep it as text",
        topic,
        path or None,
    )


def _drop_clashes(
    file: Path, topics: list[TopicConfig], strict: bool, errors: list[CatalogError]
) -> list[TopicConfig]:
    """Two topics may not share a name, a DAG id, a table name or a table location, counting all
    their tables (bronze, parsed, dead letter, latest), and neither may a topic's own tables.

    A table inside another's location is a clash too: VACUUM on the outer one deletes its files.
    """
    kept: list[TopicConfig] = []
    claimed = _Claims()
    for topic in topics:
        claims = _claims_of(topic)
        own = _Claims()
        err: CatalogError | None = None
        for kind, value, field_name in claims:
            if found := own.find(kind, value):
                message = f"two of its own tables {_how(value, found[0])}"
                if field_name.startswith("parsed."):
                    message += ": set parsed.database or parsed.table"
                err = CatalogError(file, message, topic.name, field_name)
                break
            own.add(kind, value, topic.name)
        for kind, value, field_name in claims if err is None else ():
            if found := claimed.find(kind, value):
                other = found[1]
                message = "listed twice" if other == topic.name else f"clashes with topic {other!r}: "
                if other != topic.name:
                    message += f"both give {value!r}" if found[0] == value else _how(value, found[0])
                err = CatalogError(file, message, topic.name, field_name)
                break
        if err is None:
            for kind, value, _ in claims:
                claimed.add(kind, value, topic.name)
            kept.append(topic)
        elif strict:
            raise err
        else:
            errors.append(err)
    return kept


def _claims_of(topic: TopicConfig) -> list[tuple[str, str, str]]:
    """(kind, value, field to change) for all a topic takes; the bronze table's come first."""
    # A DAG id comes from the name, so that is the field to change.
    claims = [
        ("name", topic.name, "name"),
        ("dag_id", topic.dag_id, "name"),
        ("table", topic.qualified_table, "table"),
        ("path", _one_spelling(topic.path), "path"),
    ]
    if topic.parsed.enabled:
        tables = [(topic.parsed_table, topic.parsed_path), (topic.dead_letter_table, topic.dead_letter_path)]
        if topic.parsed.latest_by_key:
            tables.append((topic.latest_table, topic.latest_path))
        for table, path in tables:
            claims += [("table", table, "parsed.table"), ("path", _one_spelling(path), "parsed.table")]
    return claims


def _one_spelling(location: str) -> str:
    """A location as the clash check compares it: ``file:///data/t`` is the folder ``/data/t``, and a
    scheme is the same in any case (``S3A://b/t`` is ``s3a://b/t``)."""
    if "://" not in location:
        return location
    parts = urlsplit(location)
    if parts.scheme.lower() == "file" and parts.netloc in ("", "localhost"):
        return os.path.normpath(unquote(parts.path))
    return parts.scheme.lower() + location[len(parts.scheme) :]


def _how(value: str, found: str) -> str:
    if found == value:
        return f"would both be {value!r}"
    if found.startswith(value.rstrip("/") + "/"):
        return f"{value!r} would hold the table at {found!r}"
    return f"{value!r} would lie inside the table at {found!r}"


class _Claims:
    """Values taken so far; a location also conflicts with one inside or above it."""

    def __init__(self) -> None:
        self._exact: dict[tuple[str, str], tuple[str, str]] = {}
        self._above: dict[str, tuple[str, str]] = {}  # a folder holding a claimed location

    def add(self, kind: str, value: str, owner: str) -> None:
        self._exact[kind, value] = (value, owner)
        if kind == "path":
            for folder in _folders_above(value):
                self._above.setdefault(folder, (value, owner))

    def find(self, kind: str, value: str) -> tuple[str, str] | None:
        """(the value it conflicts with, its owner), or None."""
        if hit := self._exact.get((kind, value)):
            return hit
        if kind != "path":
            return None
        if hit := self._above.get(value):
            return hit
        return next(filter(None, (self._exact.get(("path", f)) for f in _folders_above(value))), None)


def _folders_above(location: str) -> list[str]:
    """``s3a://b/x/t`` → ``s3a://b``, ``s3a://b/x``; ``/data/t`` → ``/``, ``/data``."""
    scheme, sep, rest = location.rpartition("://")
    parts = rest.split("/")
    folders = [scheme + sep + "/".join(parts[:i]) for i in range(1, len(parts)) if "/".join(parts[:i])]
    # The root holds every local location too: a table at `/` would hold all the others.
    return ["/", *folders] if not sep and location.startswith("/") and location != "/" else folders


def _topic(file: Path, index: int, entry: Mapping[str, Any], lake_root: Path) -> TopicConfig:
    name = entry.get("name")
    label = name if isinstance(name, str) else f"#{index + 1}"

    def fail(field_name: str, message: str) -> CatalogError:
        return CatalogError(file, message, label, field_name)

    unknown = sorted(str(k) for k in set(entry) - _TOPIC_FIELDS)
    if unknown:
        raise fail(unknown[0], f"unknown field; allowed: {sorted(_TOPIC_FIELDS)}")
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
    if sla > MAX_FRESHNESS_SLA:
        raise fail(
            "freshness_sla",
            f"must be at most {format_duration(MAX_FRESHNESS_SLA)}, not {entry['freshness_sla']!r}",
        )

    starting = entry.get("starting_offsets", "earliest")
    if starting not in STARTING_OFFSETS:
        raise fail("starting_offsets", f"must be one of {', '.join(STARTING_OFFSETS)}, not {starting!r}")

    database = entry.get("database", "bronze")
    if (problem := identifier_problem(database, MAX_DATABASE_NAME)) is not None:
        raise fail("database", problem)
    # Only a missing (or null) table takes the default: `table: no` or `table: 0` is YAML's false or 0.
    table = sanitize_identifier(name) if entry.get("table") is None else entry["table"]
    if (problem := identifier_problem(table, MAX_TABLE_NAME)) is not None:
        raise fail("table", problem)

    try:
        parsed = parse_parsed(entry.get("parsed"))
    except ParsedConfigError as err:
        raise fail(err.field, str(err)) from None
    if parsed.enabled and not parsed.table and len(table) > MAX_PARSED_TABLE_NAME:
        raise fail(
            "table",
            f"{table[:40]}... is {len(table)} characters: the parsed tables take this name, and their "
            f"dead-letter table's folder ({table[:20]}..._dead_letter) would be longer than a file system "
            f"allows; set parsed.table (at most {MAX_PARSED_TABLE_NAME} characters), or a shorter table",
        )
    parsed = replace(parsed, table=parsed.table or table)

    default_max = MAX_OFFSETS_PARSED if parsed.enabled else MAX_OFFSETS_BRONZE_ONLY
    max_offsets = entry.get("max_offsets_per_trigger", default_max)
    if max_offsets is not None and (
        isinstance(max_offsets, bool) or not isinstance(max_offsets, int) or not 1 <= max_offsets <= MAX_INT64
    ):
        raise fail(
            "max_offsets_per_trigger",
            f"must be a whole number from 1 to {MAX_INT64} or null, not {max_offsets!r}",
        )

    path = entry.get("path")
    if path is None:
        location = str(lake_root / database / table)
        parsed_location = str(lake_root / parsed.database / parsed.table)
    elif isinstance(path, str) and path:
        # Relative paths are relative to the lake root; URIs (s3a://, abfss://) pass through.
        location = path if "://" in path or path.startswith("/") else str(lake_root / path)
        # One spelling per location, so '/data/t' and '/data/t/' are seen as the same table.
        location = location.rstrip("/") if "://" in location else os.path.normpath(location)
        parsed_location = beside(location, parsed.database, parsed.table)
    else:
        raise fail("path", "must be a non-empty string: a directory or a URI such as s3a://bucket/x")
    if problem := unsupported(location):
        raise fail("path", problem)

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
    if secrets := credential_settings(list(spark_conf)):
        raise fail("spark_conf", f"{secrets} look like credentials: {CREDENTIAL_ADVICE}")
    for key, value in spark_conf.items():
        if value is None or isinstance(value, Mapping | list):
            # str() would hand Spark "{'a': 1}" or "None" as the setting's value.
            raise fail(
                f"spark_conf.{key}", f"must be a single value (text, number, true/false), not {value!r}"
            )

    task_timeout = TopicConfig.spark_task_timeout
    if "spark_task_timeout" in entry:
        try:
            task_timeout = parse_duration(str(entry["spark_task_timeout"]))
        except ValueError as err:
            raise fail("spark_task_timeout", str(err)) from None
        if not MIN_TASK_TIMEOUT <= task_timeout <= MAX_TASK_TIMEOUT:
            raise fail(
                "spark_task_timeout",
                f"must be from {format_duration(MIN_TASK_TIMEOUT)} to {format_duration(MAX_TASK_TIMEOUT)}, "
                f"not {entry['spark_task_timeout']!r}",
            )

    priority = entry.get("priority", TopicConfig.priority)
    if isinstance(priority, bool) or not isinstance(priority, int) or not 1 <= priority <= MAX_PRIORITY:
        raise fail("priority", f"must be a whole number from 1 to {MAX_PRIORITY}, not {priority!r}")
    webhook = entry.get("sla_webhook_conn_id")
    if webhook is not None and (not isinstance(webhook, str) or not webhook):
        raise fail("sla_webhook_conn_id", "must be the id of an HTTP connection, or left out")
    storage_conn = entry.get("storage_conn_id")
    if storage_conn is not None and (not isinstance(storage_conn, str) or not storage_conn):
        raise fail("storage_conn_id", "must be the id of an Airflow connection of type aws, or left out")

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
        spark_conf=tuple(sorted((k, _conf_value(v)) for k, v in spark_conf.items())),
        parsed=parsed,
        parsed_location=parsed_location,
        priority=priority,
        sla_webhook_conn_id=webhook,
        storage_conn_id=storage_conn,
        maintenance=parse_maintenance(file, name, entry.get("maintenance"), parsed),
        spark_task_timeout=task_timeout,
    )


def _conf_value(value: Any) -> str:
    """A Spark setting's value as Spark reads it: YAML's true is "true", not Python's "True"."""
    return str(value).lower() if isinstance(value, bool) else str(value)
