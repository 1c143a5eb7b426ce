"""A topic's schema history: every version, one file each, beside the bronze table.

Each version is kept as a file (``<table>/_kafkalake/schemas/000001.json``, ...), never rewritten
and never vacuumed (VACUUM skips ``_``-prefixed directories). A version is written to a temporary
file and linked into place (or, on an object store, put in one conditional PUT), so a reader never
sees half a file, and only when :func:`~kafkalake.lake.schema_algebra.schema_problems` finds nothing
a table or another engine could not take. What a schema is, and how two compare, is
:mod:`kafkalake.lake.schema_algebra`.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kafkalake.core.errors import UnusableSchemaError
from kafkalake.lake import small_files, store_settings
from kafkalake.lake.schema_algebra import Schema, diff, schema_problems

_VERSION_FILE = re.compile(r"(\d{6})\.json")


@dataclass(frozen=True)
class SchemaVersion:
    version: int
    created_at: str
    source: str
    schema: Schema
    changes: tuple[str, ...]

    def to_json(self) -> str:
        body = {
            "version": self.version,
            "created_at": self.created_at,
            "source": self.source,
            "changes": list(self.changes),
            "schema": self.schema,
        }
        return json.dumps(body, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> SchemaVersion:
        body = json.loads(text)
        return cls(
            body["version"], body["created_at"], body["source"], body["schema"], tuple(body["changes"])
        )


class SchemaHistory:
    """Every version of a topic's schema, one file each; the highest number is the current one.

    A new version is written only when the schema differs from the current one, and a version file
    is created exclusively (locally with O_EXCL, on S3 with a conditional PUT), so two writers cannot
    both claim a number.
    The folder may be local or on an object store, beside the table (``<table>/_kafkalake/schemas``).
    """

    def __init__(self, directory: str | Path) -> None:
        text = str(directory)
        #: Where the versions live: a local path, or an object-store URI kept as it is.
        self.directory: str | Path = text if store_settings.is_object_store(text) else small_files.local(text)

    @property
    def _local(self) -> Path | None:
        return self.directory if isinstance(self.directory, Path) else None

    def _file(self, name: str) -> str:
        return small_files.join(self.directory, name)

    def versions(self) -> list[int]:
        return sorted(
            int(m.group(1))
            for name in small_files.names(self.directory)
            if (m := _VERSION_FILE.fullmatch(name))
        )

    def read(self, version: int) -> SchemaVersion:
        text = small_files.read_text(self._file(f"{version:06d}.json"))
        if text is None:
            raise FileNotFoundError(self._file(f"{version:06d}.json"))
        return SchemaVersion.from_json(text)

    def current(self) -> SchemaVersion | None:
        versions = self.versions()
        return self.read(versions[-1]) if versions else None

    def write(self, schema: Schema, source: str, now: datetime | None = None) -> SchemaVersion | None:
        """Persist ``schema`` as the next version, unless it equals the current one (then None).

        Raises:
            UnusableSchemaError: the schema has :func:`schema_problems`; nothing is written.
        """
        problems = schema_problems(schema)
        if problems:
            raise UnusableSchemaError(
                f"schema from {source} not recorded in {self.directory}: {'; '.join(problems)}"
            )
        current = self.current()
        if current is not None and current.schema == schema:
            return None
        version = SchemaVersion(
            version=current.version + 1 if current else 1,
            created_at=(now or datetime.now(UTC)).isoformat(timespec="seconds"),
            source=source,
            schema=schema,
            changes=tuple(str(c) for c in diff(current.schema if current else None, schema)),
        )
        name = f"{version.version:06d}.json"
        if self._local is None:
            # One PUT: the object appears whole or not at all.
            small_files.create_text(self._file(name), version.to_json())
            return version
        self._local.mkdir(parents=True, exist_ok=True)
        with self._staged(version.to_json()) as staged:
            # A hard link claims the name atomically and fails when it exists: a concurrent writer
            # that picked the same number fails instead of overwriting, and a crash never leaves a
            # half-written version (which would fail every later run that reads it).
            os.link(staged, self._local / name)
        return version

    @contextlib.contextmanager
    def _staged(self, text: str) -> Iterator[Path]:
        """``text`` in a temporary file of the (local) directory, flushed to disk; removed afterwards."""
        assert self._local is not None
        fd, name = tempfile.mkstemp(dir=self._local, prefix=".staged-", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(name, 0o644)
            yield Path(name)
        finally:
            Path(name).unlink(missing_ok=True)

    # A schema proposed by a run that refused it (failOnNewColumns): accepting it is one command.
    @property
    def _pending_file(self) -> str:
        return self._file("pending.json")

    def propose(self, schema: Schema, reason: str) -> None:
        problems = schema_problems(schema)
        if problems:
            raise UnusableSchemaError(f"proposed schema ({reason}) refused: {'; '.join(problems)}")
        small_files.write_text(
            self._pending_file, json.dumps({"reason": reason, "schema": schema}, indent=2) + "\n"
        )

    def pending(self) -> Mapping[str, Any] | None:
        text = small_files.read_text(self._pending_file)
        if text is None:
            return None
        body: Mapping[str, Any] = json.loads(text)
        return body

    def accept_pending(self) -> SchemaVersion | None:
        """Make the proposed schema the current one; the proposal is removed either way."""
        body = self.pending()
        if body is None:
            raise FileNotFoundError(f"no schema change waits for acceptance in {self.directory}")
        version = self.write(body["schema"], source=f"accepted: {body['reason']}")
        small_files.delete(self._pending_file)
        return version
