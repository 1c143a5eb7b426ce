"""The topic catalog: YAML in, frozen and validated objects out.

Every error names the file, the topic and the field, so a typo is fixed in one look. In strict mode
(tests, CI) the first broken topic raises; in lenient mode (the DAG processor) broken topics are
reported and the others still get their DAGs.

The steps live beside it: :mod:`~kafkalake.config.yaml_reading` (the file's YAML),
:mod:`~kafkalake.config.topic_validation` (one topic's entry) and
:mod:`~kafkalake.config.location_clashes` (topics that take the same name, table or location).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kafkalake.config.family import pattern_problem
from kafkalake.config.location_clashes import drop_clashes
from kafkalake.config.parsed import merge_parsed
from kafkalake.config.routing import (
    Route,
    discovery_file,
    expanded_entries,
    read_discovered,
    route_name,
    route_tables,
    template_problem,
)
from kafkalake.config.topic import TopicConfig
from kafkalake.config.topic_validation import TOPIC_FIELDS, validate_topic
from kafkalake.config.yaml_reading import read_yaml
from kafkalake.core.errors import CatalogError

#: What ``defaults:`` may set: a topic's fields but those naming one topic's own tables.
DEFAULTS_FIELDS = TOPIC_FIELDS - {"name", "table", "path", "topics", "topic_pattern", "table_per_topic"}


@dataclass(frozen=True)
class Catalog:
    file: Path
    topics: tuple[TopicConfig, ...]
    #: Topics that could not be loaded, with their error (lenient mode only).
    errors: tuple[CatalogError, ...] = field(default=())
    #: Entries routing a pattern to a table per topic (each has a discovery DAG); their topics
    #: discovered so far are among ``topics``.
    routes: tuple[Route, ...] = field(default=())

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
    raw = read_yaml(file)
    if not isinstance(raw, Mapping) or not isinstance(raw.get("topics"), list):
        raise CatalogError(file, "expected a mapping with a 'topics' list")
    # As text: YAML keys may be numbers, booleans or null, which do not sort with strings.
    unknown = sorted(str(k) for k in set(raw) - {"defaults", "topics"})
    if unknown:
        raise CatalogError(file, f"unknown top-level keys {unknown}; allowed: defaults, topics")
    defaults = {} if raw.get("defaults") is None else raw["defaults"]
    if not isinstance(defaults, Mapping):
        raise CatalogError(file, "must be a mapping", field="defaults")
    bad_defaults = sorted(str(k) for k in set(defaults) - DEFAULTS_FIELDS)
    if bad_defaults:
        raise CatalogError(
            file,
            f"unknown keys {bad_defaults}; allowed: {sorted(DEFAULTS_FIELDS)}",
            field="defaults",
        )

    if isinstance(defaults.get("parsed"), Mapping) and "table" in defaults["parsed"]:
        raise CatalogError(file, "a table name is per topic, not a default", field="defaults.parsed.table")

    topics: list[TopicConfig] = []
    errors: list[CatalogError] = []
    routes: dict[str, Route] = {}
    for index, entry in enumerate(raw["topics"]):
        try:
            if not isinstance(entry, Mapping):
                raise CatalogError(file, f"topic #{index + 1} must be a mapping of fields, not {entry!r}")
            merged = {**defaults, **entry}
            # Unlike spark_conf, `parsed` merges key by key: defaults set the house style.
            if "parsed" in merged:
                merged["parsed"] = merge_parsed(defaults.get("parsed"), entry.get("parsed"))
            if "table_per_topic" in merged:
                route, expanded = _routed(file, index, merged, lake_root, routes)
                routes[route.name] = route
                for item in expanded:
                    if isinstance(item, CatalogError):
                        if strict:
                            raise item
                        errors.append(item)
                    else:
                        topics.append(item)
                continue
            topics.append(validate_topic(file, index, merged, lake_root))
        except CatalogError as err:
            if strict:
                raise
            errors.append(err)
    kept = drop_clashes(file, topics, strict, errors)
    return Catalog(
        file=file,
        topics=tuple(sorted(kept, key=lambda t: t.name)),
        errors=tuple(errors),
        routes=tuple(routes[name] for name in sorted(routes)),
    )


#: What checks a routed entry's fields before any topic is discovered: a topic name never used.
_CHECK_NAME = "kafkalake-route-check"


def _routed(
    file: Path, index: int, entry: Mapping[str, Any], lake_root: Path, routes: Mapping[str, Route]
) -> tuple[Route, list[TopicConfig | CatalogError]]:
    """A routed entry (``topic_pattern`` + ``table_per_topic``, :mod:`kafkalake.config.routing`):
    its route, and one topic (or that topic's error) per topic its discovery file records.

    Raises:
        CatalogError: the entry itself cannot be used (names the file, the entry and the field).
    """
    template = entry["table_per_topic"]
    label = route_name(template) if isinstance(template, str) and template else f"#{index + 1}"

    def fail(field_name: str, message: str) -> CatalogError:
        return CatalogError(file, message, label, field_name)

    for taken in ("name", "table", "topics", "path"):
        if taken in entry:
            raise fail(taken, f"a routed entry (table_per_topic) names each topic's table; leave {taken} out")
    pattern = entry.get("topic_pattern")
    if pattern is None:
        raise fail("topic_pattern", "required with table_per_topic: the Java regex the topics match")
    if (problem := pattern_problem(pattern)) is not None:
        raise fail("topic_pattern", problem)
    if (problem := template_problem(template, pattern)) is not None:
        raise fail("table_per_topic", problem)
    parsed = entry.get("parsed")
    if isinstance(parsed, Mapping) and "table" in parsed:
        raise fail(
            "parsed.table", "each routed topic's parsed tables are named after its table; leave it out"
        )
    if label in routes:
        raise fail(
            "table_per_topic", f"another routed entry is named {label!r} too (its DAG discover_{label})"
        )
    # The entry's other fields, checked once whether or not any topic is discovered yet.
    check = validate_topic(file, index, expanded_entries(entry, {_CHECK_NAME: "t"})[0][1], lake_root)
    route = Route(
        name=label,
        topic_pattern=pattern,
        table_per_topic=template,
        kafka_conn_id=check.kafka_conn_id,
        discovery_file=discovery_file(lake_root, file, label),
        interval=check.run_interval,
        owner=check.owner,
        tags=check.tags,
    )
    # From here on, errors are the topics': the route (and its discovery DAG, which can mend them)
    # stays.
    try:
        discovered = read_discovered(route.discovery_file, file, label)
        tables = route_tables(pattern, template, discovered.topics)
    except CatalogError as err:
        return route, [err]
    except ValueError as err:
        return route, [fail("table_per_topic", f"{err} (in {route.discovery_file})")]
    expanded: list[TopicConfig | CatalogError] = []
    for _topic, single in expanded_entries(entry, tables):
        try:
            expanded.append(validate_topic(file, index, single, lake_root))
        except CatalogError as err:
            expanded.append(err)
    return route, expanded


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
