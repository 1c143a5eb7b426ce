"""A pattern routed to a table per topic: ``topic_pattern: 'shop\\.public\\.(.*)'`` with
``table_per_topic: 'shop_\\1'`` gives each matching topic a DAG and a table of its own.

The DAG factory must not ask Kafka which topics match while it parses. A discovery DAG per routed
entry (``discover_<name>``, librdkafka, no JVM) lists the cluster's topics and records the matching
ones in a small JSON file under the lake root (:func:`discovery_file`); the catalog loader reads that
file and expands the entry into one ordinary single-topic entry per recorded topic, so the next
parse of the DAG file builds their DAGs, and every job and task of such a topic loads the same
config. What is pure lives here: the name mapping, its collisions, the file's reading and writing.

A topic that disappears from Kafka keeps its DAG (its table holds its rows; its runs then fail with
``topic_missing``), and the file lists it under ``missing`` so discovery reports it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from kafkalake.config.family import matches
from kafkalake.core.errors import CatalogError

#: A reference to a group of the pattern in ``table_per_topic``: ``\1`` .. ``\9``.
_GROUP_REF = re.compile(r"\\([1-9])")
#: What a template may hold besides group references (a table name's characters).
_LITERAL = re.compile(r"[A-Za-z0-9_.-]*")
#: The discovery file's format version, for a later change of it.
FILE_VERSION = 1


@dataclass(frozen=True)
class Route:
    """A routed catalog entry, as its discovery DAG needs it."""

    #: Its name (:func:`route_name`): the discovery DAG's id is ``discover_<name>``.
    name: str
    topic_pattern: str
    table_per_topic: str
    kafka_conn_id: str
    #: Where discovery records the matching topics (:func:`discovery_file`).
    discovery_file: Path
    #: How often discovery runs: the entry's topics' run interval.
    interval: timedelta = timedelta(minutes=10)
    owner: str = "data-platform"
    tags: tuple[str, ...] = ()

    @property
    def dag_id(self) -> str:
        return f"discover_{self.name}"


@dataclass(frozen=True)
class Discovered:
    """What a discovery file records: the topics the entry routes (each keeps its DAG), and those
    of them Kafka no longer had at the last discovery."""

    topics: tuple[str, ...]
    missing: tuple[str, ...] = ()
    discovered_at: str = ""


def template_problem(template: object, pattern: str) -> str | None:
    """Why ``template`` cannot be the ``table_per_topic`` of ``pattern``; None when it can."""
    if not isinstance(template, str) or not template:
        return r"must be a table name with groups of topic_pattern, e.g. 'shop_\1'"
    refs = [int(n) for n in _GROUP_REF.findall(template)]
    if not refs:
        return (
            f"{template!r} uses no group of topic_pattern (\\1 .. \\9): every topic would map to one "
            "table; to land them together give table instead"
        )
    if not _LITERAL.fullmatch(_GROUP_REF.sub("", template)):
        return f"{template!r}: besides \\1 .. \\9, only letters, digits, '_', '.' and '-'"
    groups = re.compile(pattern).groups
    if max(refs) > groups:
        return f"{template!r} refers to group {max(refs)}, and topic_pattern has {groups}"
    return None


def route_name(template: str) -> str:
    """The entry's name from its template's literal parts: ``shop_\\1`` → ``shop``."""
    literal = re.sub(r"[^a-z0-9]+", "_", _GROUP_REF.sub("_", template).lower()).strip("_")
    return literal or "routed"


def table_for(pattern: str, template: str, topic: str) -> str | None:
    """The table ``topic`` lands in, or None when it does not match (the whole name, as Spark's
    ``subscribePattern``). Groups that did not take part read as empty; the result is made a table
    name as a topic's own table name is (lower case, other characters as ``_``)."""
    if not matches(pattern, topic):
        return None
    found = re.fullmatch(pattern, topic)
    assert found is not None
    name = _GROUP_REF.sub(lambda ref: found.group(int(ref.group(1))) or "", template)
    cleaned = re.sub(r"[^a-z0-9_]", "_", name.lower())
    return cleaned if re.match(r"[a-z_]", cleaned) else f"t_{cleaned}"


def route_tables(pattern: str, template: str, topics: Iterable[str]) -> dict[str, str]:
    """``{topic: table}`` of the ``topics`` that match, in topic order.

    Raises:
        ValueError: two topics map to one table name (the message names both and the table).
    """
    tables: dict[str, str] = {}
    taken: dict[str, str] = {}
    for topic in sorted(set(topics)):
        table = table_for(pattern, template, topic)
        if table is None:
            continue
        if table in taken:
            raise ValueError(
                f"topics {taken[table]!r} and {topic!r} would both land in table {table!r}; "
                "change table_per_topic (or topic_pattern) so each topic has a table of its own"
            )
        taken[table] = topic
        tables[topic] = table
    return tables


def discovery_file(lake_root: Path, catalog_file: Path, name: str) -> Path:
    """``<lake root>/_discovered/<catalog stem>/<name>.json``. Under the lake root, not beside the
    catalog: the catalog usually ships inside the image or a git-synced DAG folder, which is
    read-only or private to each container, while the lake root is the volume every Airflow
    component already shares (the DAG processor reads the file, a worker's task writes it)."""
    return lake_root / "_discovered" / catalog_file.stem / f"{name}.json"


def read_discovered(file: Path, catalog_file: Path, entry: str) -> Discovered:
    """The discovery file of ``entry``; an empty record when there is none yet.

    Raises:
        CatalogError: the file cannot be read as one (names the file and the entry, and what to do).
    """
    try:
        text = file.read_text()
    except FileNotFoundError:
        return Discovered(())
    except OSError as err:
        raise CatalogError(
            catalog_file, f"cannot read its discovery file {file}: {err}", entry, "table_per_topic"
        ) from None
    try:
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("version") != FILE_VERSION:
            raise ValueError(f"not a version {FILE_VERSION} discovery record")
        topics, missing = data["topics"], data.get("missing", [])
        if not all(isinstance(t, str) for t in [*topics, *missing]) or not isinstance(topics, list):
            raise ValueError("'topics' and 'missing' must be lists of topic names")
        return Discovered(tuple(topics), tuple(missing), str(data.get("discovered_at", "")))
    except (ValueError, KeyError, TypeError) as err:
        raise CatalogError(
            catalog_file,
            f"its discovery file {file} is broken ({err}): delete it and run the DAG "
            f"discover_{entry} to write it again",
            entry,
            "table_per_topic",
        ) from None


def discovery_text(found: Iterable[str], before: Discovered, now: datetime) -> tuple[str, Discovered]:
    """The discovery file's new text from the matching topics Kafka has now (``found``) and the
    file's previous record: topics once recorded stay (their DAGs and tables stay), and those Kafka
    no longer has are listed as missing."""
    present = set(found)
    topics = tuple(sorted(present | set(before.topics)))
    record = Discovered(
        topics, tuple(t for t in topics if t not in present), now.isoformat(timespec="seconds")
    )
    text = json.dumps(
        {
            "version": FILE_VERSION,
            "discovered_at": record.discovered_at,
            "topics": list(record.topics),
            "missing": list(record.missing),
        },
        indent=1,
    )
    return text + "\n", record


def expanded_entries(
    entry: Mapping[str, object], tables: Mapping[str, str]
) -> list[tuple[str, dict[str, object]]]:
    """One single-topic entry per routed topic: the routed entry's fields, with the topic as
    ``name`` and its table as ``table``."""
    base = {k: v for k, v in entry.items() if k not in ("topic_pattern", "table_per_topic")}
    return [(topic, {**base, "name": topic, "table": table}) for topic, table in tables.items()]


def write_discovered(file: Path, text: str) -> None:
    """Replace the discovery file whole: a temporary file in its folder, then a rename, so the DAG
    processor reads the old record or the new one, never half of one."""
    file.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{file.name}.", dir=file.parent)
    try:
        with os.fdopen(handle, "w") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, 0o644)
        os.replace(temporary, file)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
