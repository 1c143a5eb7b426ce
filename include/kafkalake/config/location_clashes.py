"""Clashes between a catalog's topics: a name, a DAG id, a table name or a table location taken twice.

Every table of a topic counts (bronze, parsed, dead letter, latest), and a location inside
another's is a clash too: VACUUM on the outer table would delete the inner one's files.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote, urlsplit

from kafkalake.config.topic import TopicConfig
from kafkalake.core.errors import CatalogError


def drop_clashes(
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
    # A DAG id comes from the name (a family's: its table), so that is the field to change.
    named_by = "table" if topic.is_family else "name"
    claims = [
        ("name", topic.name, named_by),
        ("dag_id", topic.dag_id, named_by),
        ("table", topic.qualified_table, "table"),
        ("path", _one_spelling(topic.path), "path"),
    ]
    if topic.parsed.enabled:
        tables = [(topic.parsed_table, topic.parsed_path), (topic.dead_letter_table, topic.dead_letter_path)]
        if topic.parsed.latest_by_key:
            tables.append((topic.latest_table, topic.latest_path))
        if topic.parsed.debezium:
            tables.append((topic.current_table, topic.current_path))
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
