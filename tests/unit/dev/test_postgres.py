"""The private PostgreSQL cluster's pure parts: where its binaries are, URLs without secrets where they
may be shown."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

from kafkalake.dev import postgres
from kafkalake.dev.postgres import Database, LocalPostgres, PostgresError, find_pg_bin, write_secret


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


def fake_bin(folder: Path, *programs: str) -> Path:
    folder.mkdir(parents=True)
    for name in programs:
        (folder / name).write_text("#!/bin/sh\n")
        (folder / name).chmod(0o755)
    return folder


SERVER = ("initdb", "pg_ctl", "psql", "pg_isready")


def fake_pg_config(tmp_path: Path, bindir: Path) -> str:
    """A real program that answers ``--bindir`` as pg_config does."""
    script = tmp_path / "pg_config"
    answer = f"import sys\nassert sys.argv[1:] == ['--bindir']\nprint({str(bindir)!r})\n"
    script.write_text(f"#!{sys.executable}\n{answer}")
    script.chmod(0o755)
    return str(script)


def test_the_newest_major_version_installed_wins_whatever_the_names_sort_as(tmp_path):
    root = tmp_path / "usr-lib-postgresql"
    for major in ("9.6", "15", "16"):
        fake_bin(root / major / "bin", *SERVER)
    # Newer, but only the client package: no server to run.
    fake_bin(root / "17" / "bin", "psql", "pg_dump")
    (root / "README").write_text("not a version")
    found, looked = find_pg_bin({}, root=root, pg_config=None)
    assert found == root / "16" / "bin"
    assert looked == [root / m / "bin" for m in ("17", "16", "15", "9.6")]


def test_without_debian_folders_pg_config_names_the_binaries(tmp_path):
    elsewhere = fake_bin(tmp_path / "opt" / "pgsql" / "bin", *SERVER)
    found, looked = find_pg_bin({}, root=tmp_path / "none", pg_config=fake_pg_config(tmp_path, elsewhere))
    assert (found, looked) == (elsewhere, [elsewhere])


def test_debian_folders_come_before_pg_config_and_a_server_less_one_is_passed_over(tmp_path):
    root = tmp_path / "usr-lib-postgresql"
    fake_bin(root / "15" / "bin", "psql")
    elsewhere = fake_bin(tmp_path / "opt" / "bin", *SERVER)
    found, looked = find_pg_bin({}, root=root, pg_config=fake_pg_config(tmp_path, elsewhere))
    assert found == elsewhere and looked == [root / "15" / "bin", elsewhere]
    fake_bin(root / "16" / "bin", *SERVER)
    assert find_pg_bin({}, root=root, pg_config=fake_pg_config(tmp_path, elsewhere))[0] == root / "16" / "bin"


def test_a_chosen_folder_is_the_only_candidate(tmp_path):
    root = tmp_path / "usr-lib-postgresql"
    fake_bin(root / "16" / "bin", *SERVER)
    chosen = fake_bin(tmp_path / "mine", *SERVER)
    assert find_pg_bin({postgres.ENV_PG_BIN: str(chosen)}, root=root, pg_config=None) == (chosen, [chosen])
    # A chosen folder without a server is not replaced by another version behind one's back.
    empty = fake_bin(tmp_path / "empty")
    assert find_pg_bin({postgres.ENV_PG_BIN: str(empty)}, root=root, pg_config=None) == (None, [empty])


def test_nothing_installed_says_where_it_looked_and_how_to_install(tmp_path, monkeypatch, capsys):
    root = tmp_path / "usr-lib-postgresql"
    fake_bin(root / "15" / "bin", "psql")
    monkeypatch.delenv(postgres.ENV_PG_BIN, raising=False)
    monkeypatch.setattr(postgres, "DEBIAN_PG_ROOT", root)
    monkeypatch.setattr(postgres, "find_pg_bin", lambda: find_pg_bin(root=root, pg_config=None))
    with pytest.raises(PostgresError, match=r"looked at: .*/15/bin\).*make postgresql.*KAFKALAKE_PG_BIN"):
        postgres.pg_bin()
    # `make postgresql` installs the server when this command fails, and skips that when it prints a folder.
    assert postgres.main(["bin"]) == 1
    assert "make postgresql" in capsys.readouterr().err
    fake_bin(root / "16" / "bin", *SERVER)
    assert postgres.main(["bin"]) == 0
    assert capsys.readouterr().out.strip() == str(root / "16" / "bin")


def test_a_pg_config_that_fails_or_is_missing_is_no_answer(tmp_path):
    broken = tmp_path / "pg_config"
    broken.write_text("#!/bin/sh\nexit 2\n")
    broken.chmod(0o755)
    assert find_pg_bin({}, root=tmp_path / "none", pg_config=str(broken)) == (None, [])
    assert find_pg_bin({}, root=tmp_path / "none", pg_config=str(tmp_path / "absent")) == (None, [])
