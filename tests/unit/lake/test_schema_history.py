"""Schema history: atomic versions, never one a table cannot take, proposals. Files in a temporary
directory."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kafkalake.core.errors import UnusableSchemaError
from kafkalake.lake.schema_history import SchemaHistory


def field(name: str, data_type: object) -> dict[str, object]:
    return {"name": name, "type": data_type, "nullable": True, "metadata": {}}


def struct(*fields: dict[str, object]) -> dict[str, object]:
    return {"type": "struct", "fields": list(fields)}


def test_a_version_is_linked_into_place_whole_and_never_over_another(tmp_path):
    history = SchemaHistory(tmp_path)
    first = history.write(struct(field("a", "long")), "batch 0")
    assert first is not None and first.version == 1
    assert history.write(struct(field("a", "long")), "batch 1") is None
    # No temporary file stays behind; the version file holds the whole version.
    assert sorted(os.listdir(tmp_path)) == ["000001.json"]
    assert json.loads((tmp_path / "000001.json").read_text())["schema"] == struct(field("a", "long"))
    # A writer that picked a number another took fails instead of overwriting it.
    (tmp_path / "000002.json").write_text("{}")
    with pytest.raises(FileExistsError):
        _write_as(history, 2, struct(field("b", "long")))
    assert (tmp_path / "000002.json").read_text() == "{}"


def _write_as(history: SchemaHistory, version: int, schema: dict[str, object]) -> None:
    with history._staged(json.dumps(schema)) as staged:
        os.link(staged, history.directory / f"{version:06d}.json")


def test_a_schema_a_table_cannot_take_is_never_recorded(tmp_path):
    history = SchemaHistory(tmp_path)
    with pytest.raises(UnusableSchemaError, match="same column"):
        history.write(struct(field("Name", "long"), field("name", "long")), "batch 0")
    with pytest.raises(UnusableSchemaError):
        history.propose(struct(field("s", struct())), "new fields")
    assert list(Path(tmp_path).iterdir()) == []


def test_a_proposal_replaces_the_last_one_atomically(tmp_path):
    history = SchemaHistory(tmp_path)
    history.propose(struct(field("a", "long")), "first")
    history.propose(struct(field("b", "long")), "second")
    pending = history.pending()
    assert pending is not None and pending["reason"] == "second"
    assert sorted(os.listdir(tmp_path)) == ["pending.json"]
