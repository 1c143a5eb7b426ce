"""The metastore's database password: from the environment, or from the file compose mounts."""

from __future__ import annotations

import pytest

from kafkalake.dev import metastore


def test_the_password_comes_from_its_file_when_the_variable_is_unset(tmp_path, monkeypatch):
    secret = tmp_path / "metastore-db-password"
    secret.write_text("canary-hive\n")
    monkeypatch.delenv(metastore.ENV_DB_PASSWORD, raising=False)
    monkeypatch.setenv(metastore.ENV_DB_URL, "jdbc:postgresql://postgres:5432/metastore")
    monkeypatch.setenv(metastore.ENV_DB_PASSWORD_FILE, str(secret))
    _, password = metastore._from_environment(tmp_path)
    assert password == "canary-hive"


def test_neither_is_refused_naming_both_ways(tmp_path, monkeypatch):
    monkeypatch.delenv(metastore.ENV_DB_PASSWORD, raising=False)
    monkeypatch.delenv(metastore.ENV_DB_PASSWORD_FILE, raising=False)
    monkeypatch.setenv(metastore.ENV_DB_URL, "jdbc:postgresql://postgres:5432/metastore")
    with pytest.raises(metastore.MetastoreError, match=metastore.ENV_DB_PASSWORD_FILE):
        metastore._from_environment(tmp_path)
