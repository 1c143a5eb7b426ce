"""The private PostgreSQL cluster's pure parts: URLs without secrets where they may be shown."""

from __future__ import annotations

import stat

import pytest

from kafkalake.dev.postgres import Database, LocalPostgres, PostgresError, write_secret


def test_a_secret_file_is_readable_by_its_owner_only(tmp_path):
    path = tmp_path / "secrets" / "airflow.password"
    write_secret(path, "s3cret")
    write_secret(path, "again")  # a new start replaces it
    assert path.read_text() == "again"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


def test_the_jdbc_url_carries_no_password_and_the_sqlalchemy_one_reads_the_file(tmp_path):
    secret = tmp_path / "pw"
    write_secret(secret, "abc-123")
    db = Database("metastore", "hive", "127.0.0.1", 5433, secret)
    assert db.jdbc_url == "jdbc:postgresql://127.0.0.1:5433/metastore"
    assert db.sqlalchemy_url() == "postgresql+psycopg2://hive:abc-123@127.0.0.1:5433/metastore"


def test_a_stopped_cluster_names_the_missing_password_file(tmp_path):
    db = Database("airflow", "airflow", "127.0.0.1", 5433, tmp_path / "nope")
    with pytest.raises(PostgresError, match="is the cluster running"):
        db.password()


def test_odd_database_names_are_refused_before_any_sql(tmp_path):
    with pytest.raises(PostgresError, match="letters, digits and _"):
        LocalPostgres(tmp_path).database("air flow; drop")
