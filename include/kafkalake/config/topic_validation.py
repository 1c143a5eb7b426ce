"""One topic's catalog entry validated into a :class:`~kafkalake.config.topic.TopicConfig`.

Every field is checked against what Kafka, Spark, Delta and Airflow accept, so a bad entry fails the
load naming the file, the topic and the field instead of failing a run later.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from kafkalake.config.family import pattern_problem
from kafkalake.config.freshness import SCHEDULES, FreshnessSchedule
from kafkalake.config.locations import unsupported
from kafkalake.config.maintenance import parse_maintenance
from kafkalake.config.parsed import (
    MAX_DATABASE_NAME,
    MAX_PARSED_TABLE_NAME,
    MAX_TABLE_NAME,
    ParsedConfig,
    identifier_problem,
    parse_parsed,
    with_format,
)
from kafkalake.config.schedule import run_interval
from kafkalake.config.spark_credentials import CREDENTIAL_ADVICE, credential_settings
from kafkalake.config.topic import (
    DECODED_KEY_FORMATS,
    FRAMED_JSON_FORMATS,
    KEY_FORMATS,
    MAX_OFFSETS_BRONZE_ONLY,
    MAX_OFFSETS_PARSED,
    REGISTRY_FORMATS,
    VALUE_FORMATS,
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
#: The watcher polls about this often at most: a shorter floor would not be kept anyway.
MIN_FLOOR = timedelta(seconds=10)

TOPIC_FIELDS = {
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
    "format",
    "registry_conn_id",
    "key_format",
    "maintenance",
    "spark_task_timeout",
    "topics",
    "topic_pattern",
    "table_per_topic",
    "schedule",
}
#: A family entry gives one of these instead of `name` (kafkalake.config.family).
FAMILY_FIELDS = ("topics", "topic_pattern")


def validate_topic(file: Path, index: int, entry: Mapping[str, Any], lake_root: Path) -> TopicConfig:
    """The topic of the catalog's entry number ``index`` (from 0), its defaults merged in already.

    Raises:
        CatalogError: the first field that cannot be used, named with the file and the topic.
    """
    family = [f for f in FAMILY_FIELDS if f in entry]
    name = entry.get("table") if family else entry.get("name")
    label = name if isinstance(name, str) else f"#{index + 1}"

    def fail(field_name: str, message: str) -> CatalogError:
        return CatalogError(file, message, label, field_name)

    unknown = sorted(str(k) for k in set(entry) - TOPIC_FIELDS)
    if unknown:
        raise fail(unknown[0], f"unknown field; allowed: {sorted(TOPIC_FIELDS)}")
    if family:
        members, pattern = _family(entry, family, fail)
        return replace(
            validate_topic(file, index, _as_single(entry, family), lake_root),
            members=members,
            topic_pattern=pattern,
        )
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
        parsed = with_format(parse_parsed(entry.get("parsed")), entry.get("format"))
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
    if secrets := credential_settings(spark_conf):
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
    value_format, registry_conn = _format(entry, parsed, fail)
    key_format = _key_format(entry, value_format, fail)
    schedule, freshness = _schedule(entry.get("schedule", "interval"), sla, fail)

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
        format=value_format,
        registry_conn_id=registry_conn,
        key_format=key_format,
        maintenance=parse_maintenance(file, name, entry.get("maintenance"), parsed),
        spark_task_timeout=task_timeout,
        schedule=schedule,
        freshness=freshness,
    )


def _family(entry: Mapping[str, Any], given: list[str], fail: Any) -> tuple[tuple[str, ...], str | None]:
    """A family entry's members (``topics``) or pattern (``topic_pattern``), checked."""
    if "name" in entry:
        raise fail("name", f"a family entry gives {given[0]} instead of name, not both")
    if len(given) > 1:
        raise fail("topic_pattern", "give topics (a list) or topic_pattern (a regex), not both")
    if entry.get("table") is None:
        raise fail("table", f"required with {given[0]}: the one table every member lands in")
    if (problem := identifier_problem(entry["table"], MAX_TABLE_NAME)) is not None:
        raise fail("table", problem)
    if entry.get("schedule", "interval") != "interval":
        # The watcher reads one topic's watermarks; a family's members are found by the pre-flight.
        raise fail("schedule", "a family runs on the fixed interval for now: leave schedule out")
    if given[0] == "topic_pattern":
        pattern = entry["topic_pattern"]
        if (problem := pattern_problem(pattern)) is not None:
            raise fail("topic_pattern", problem)
        return (), pattern
    topics = entry["topics"]
    if not isinstance(topics, list) or not topics:
        raise fail("topics", "must be a non-empty list of Kafka topic names")
    for topic in topics:
        if not isinstance(topic, str) or not _TOPIC_NAME.fullmatch(topic) or topic in {".", ".."}:
            raise fail("topics", f"{topic!r} is not a Kafka topic name (letters, digits, '.', '_', '-')")
    if duplicate := next((t for i, t in enumerate(topics) if t in topics[:i]), None):
        raise fail("topics", f"{duplicate!r} is listed twice")
    return tuple(topics), None


def _as_single(entry: Mapping[str, Any], given: list[str]) -> dict[str, Any]:
    """The entry validated as a single topic's would be, named after its table (its DAG's id)."""
    return {**{k: v for k, v in entry.items() if k not in given}, "name": entry["table"]}


def _format(
    entry: Mapping[str, Any], parsed: ParsedConfig, fail: Callable[[str, str], CatalogError]
) -> tuple[str, str | None]:
    """The values' format and the schema registry's connection (registry formats need one)."""
    value_format = entry.get("format", TopicConfig.format)
    if value_format not in VALUE_FORMATS:
        raise fail("format", f"must be one of {', '.join(VALUE_FORMATS)}, not {value_format!r}")
    registry_conn = entry.get("registry_conn_id")
    if registry_conn is not None and (not isinstance(registry_conn, str) or not registry_conn):
        raise fail(
            "registry_conn_id", "must be the id of an Airflow connection to a schema registry, or left out"
        )
    if value_format in REGISTRY_FORMATS:
        if registry_conn is None:
            raise fail(
                "registry_conn_id",
                f"required with format {value_format}: the Airflow connection of the schema registry "
                "(its URL, and login/password for basic auth)",
            )
        if parsed.enabled and (parsed.schema is not None or parsed.type_hints):
            raise fail(
                "parsed.schema" if parsed.schema is not None else "parsed.type_hints",
                f"does nothing with format {value_format}: the registry's schema is the table's",
            )
    elif registry_conn is not None and value_format in FRAMED_JSON_FORMATS:
        raise fail(
            "registry_conn_id",
            f"does nothing with format {value_format}: its JSON is read after the frame, the schema ids "
            "are not looked up; leave it out",
        )
    elif registry_conn is not None:
        raise fail(
            "registry_conn_id",
            f"does nothing with format {value_format}: set format to one of "
            f"{', '.join(REGISTRY_FORMATS)}, or leave it out",
        )
    return str(value_format), registry_conn


def _key_format(
    entry: Mapping[str, Any], value_format: str, fail: Callable[[str, str], CatalogError]
) -> str | None:
    """The keys' registry format, if they are framed: only beside a registry format of the values
    (an Avro key's schemas are asked of the values' registry)."""
    key_format = entry.get("key_format")
    if key_format is None:
        return None
    if key_format not in KEY_FORMATS:
        raise fail("key_format", f"must be one of {', '.join(KEY_FORMATS)}, or left out, not {key_format!r}")
    if key_format in DECODED_KEY_FORMATS and value_format not in REGISTRY_FORMATS:
        raise fail(
            "key_format",
            f"{key_format} keys are decoded with the registry's schemas: the values' format must be "
            f"one of {', '.join(REGISTRY_FORMATS)} (its registry_conn_id is the keys' registry too)",
        )
    if value_format not in (*REGISTRY_FORMATS, *FRAMED_JSON_FORMATS):
        raise fail(
            "key_format",
            f"does nothing with format {value_format}: registry-framed keys are read beside a registry "
            f"format's values ({', '.join((*REGISTRY_FORMATS, *FRAMED_JSON_FORMATS))})",
        )
    return str(key_format)


#: The keys of a ``schedule`` mapping: ``{mode: freshness, floor: 2m, file_bytes: 67108864}``.
SCHEDULE_FIELDS = ("mode", "floor", "file_bytes")


def _schedule(
    value: Any, sla: timedelta, fail: Callable[[str, str], CatalogError]
) -> tuple[str, FreshnessSchedule | None]:
    """``interval`` (the default, SLA / 3) or ``freshness``, written alone or as a mapping with its
    ``floor`` (the shortest gap between runs) and ``file_bytes`` (what waits that is worth a run)."""
    settings: Mapping[str, Any] = value if isinstance(value, Mapping) else {"mode": value}
    if unknown := sorted(str(k) for k in settings if k not in SCHEDULE_FIELDS):
        raise fail(f"schedule.{unknown[0]}", f"unknown field; allowed: {list(SCHEDULE_FIELDS)}")
    mode = settings.get("mode")
    if mode not in SCHEDULES:
        where = "schedule.mode" if isinstance(value, Mapping) else "schedule"
        raise fail(where, f"must be one of {', '.join(SCHEDULES)}, not {mode!r}")
    if mode == "interval":
        if len(settings) > 1:
            raise fail("schedule", "floor and file_bytes are settings of mode freshness only")
        return "interval", None
    freshness = FreshnessSchedule()
    if "floor" in settings:
        try:
            floor = parse_duration(str(settings["floor"]))
        except ValueError as err:
            raise fail("schedule.floor", str(err)) from None
        if not MIN_FLOOR <= floor <= run_interval(sla):
            raise fail(
                "schedule.floor",
                f"must be from {format_duration(MIN_FLOOR)} to the SLA's third "
                f"({format_duration(run_interval(sla))}), not {settings['floor']!r}",
            )
        freshness = replace(freshness, floor=floor)
    if "file_bytes" in settings:
        size = settings["file_bytes"]
        if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_INT64:
            raise fail("schedule.file_bytes", f"must be a whole number of bytes from 1, not {size!r}")
        freshness = replace(freshness, file_bytes=size)
    return "freshness", freshness


def _conf_value(value: Any) -> str:
    """A Spark setting's value as Spark reads it: YAML's true is "true", not Python's "True"."""
    return str(value).lower() if isinstance(value, bool) else str(value)
