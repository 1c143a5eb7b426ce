"""What the catalog tests share: the fixture catalogs, writing one, and checking where an error points."""

from __future__ import annotations

from pathlib import Path

from kafkalake.core.errors import CatalogError

CATALOGS = Path(__file__).resolve().parents[2] / "fixtures" / "catalogs"


def write_catalog(tmp_path: Path, text: str) -> Path:
    file = tmp_path / "catalog.yaml"
    file.write_text(text)
    return file


def assert_names_where(err: CatalogError, file: Path, topic: str | None, field: str | None) -> None:
    message = str(err)
    assert str(file) in message
    assert err.file == file
    assert err.topic == topic
    assert err.field == field
    if topic is not None:
        assert f"topic {topic!r}" in message
    if field is not None:
        assert f"field {field!r}" in message
