"""Parsing dags/ as Airflow's DagBag does, from fixture catalogs (no broker, no Spark, no metadata
database: never the fixtures of tests/integration/conftest.py).

* parsing builds exactly one DAG per topic and makes no database query, no connection lookup and no
  network call (with sanity tests proving each recorder would catch one);
* a broken catalog entry is an import error in strict mode, an errors DAG in lenient mode.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import sqlalchemy
from airflow.dag_processing.dagbag import DagBag
from airflow.sdk import BaseHook, Connection
from airflow.sdk.definitions._internal.dag_parsing_context import _AIRFLOW_PARSING_CONTEXT_DAG_ID
from airflow.sdk.definitions.timetables.simple import NullTimetable
from airflow.sdk.exceptions import AirflowNotFoundException

from kafkalake.airflow.dag_factory import REPLAY_DAG_ID

from .dag_helpers import (
    BROKEN_SLA,
    CATALOGS,
    DAG_FILE,
    FOUR_DAG_IDS,
    FOUR_TOPICS,
    POLICY,
    POLICY_TOPICS,
    ParseGuard,
    fresh_kafkalake_modules,
    parse_dags,
    set_catalog,
)

# ---------------------------------------------------------------------------------------------
# parse hygiene


def test_dags_folder_parses_to_one_dag_per_topic_without_db_connection_or_network(monkeypatch, tmp_path):
    set_catalog(monkeypatch, FOUR_TOPICS, tmp_path / "lake", strict=True)
    guard = ParseGuard()
    with fresh_kafkalake_modules(), guard.watch():
        bag = parse_dags()

    assert bag.import_errors == {}
    assert sorted(bag.dag_ids) == sorted([*FOUR_DAG_IDS.values(), REPLAY_DAG_ID])
    assert len(bag.dags) == 5
    assert {Path(dag.fileloc).resolve() for dag in bag.dags.values()} == {DAG_FILE}
    assert guard.queries == [], "parsing queried a database"
    assert guard.lookups == [], "parsing looked up an Airflow connection"
    assert guard.network == [], "parsing touched the network"
    # Parsing only reads: it must not create the lake.
    assert not (tmp_path / "lake").exists()


def test_parse_picks_up_a_changed_catalog(monkeypatch, tmp_path):
    """Guards the parse helper: each parse really re-executes the DAG file with the current env."""
    set_catalog(monkeypatch, FOUR_TOPICS, tmp_path, strict=True)
    assert len(parse_dags().dags) == 5
    set_catalog(monkeypatch, POLICY, tmp_path, strict=True)
    assert sorted(parse_dags().dag_ids) == sorted([*(e.dag_id for e in POLICY_TOPICS), REPLAY_DAG_ID])


def test_guard_records_a_database_query():
    guard = ParseGuard()
    engine = sqlalchemy.create_engine("sqlite://")
    with guard.watch(), engine.connect() as conn:
        conn.execute(sqlalchemy.text("SELECT 1"))
    assert any("SELECT 1" in q for q in guard.queries)
    # Outside watch() the listener is gone.
    with engine.connect() as conn:
        conn.execute(sqlalchemy.text("SELECT 2"))
    assert not any("SELECT 2" in q for q in guard.queries)


def test_guard_records_a_connection_lookup_and_keeps_its_behaviour():
    guard = ParseGuard()
    with guard.watch():
        with pytest.raises(AirflowNotFoundException):
            BaseHook.get_connection("kafkalake_test_no_such_conn")
        with pytest.raises(AirflowNotFoundException):
            Connection.get("kafkalake_test_no_such_conn_either")
    assert "BaseHook.get_connection('kafkalake_test_no_such_conn')" in guard.lookups
    assert "Connection.get('kafkalake_test_no_such_conn_either')" in guard.lookups


def test_guard_records_a_connection_lookup_that_succeeds(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_KAFKALAKE_TEST_GUARD", json.dumps({"conn_type": "http", "host": "h"}))
    guard = ParseGuard()
    with guard.watch():
        conn = BaseHook.get_connection("kafkalake_test_guard")
    assert conn.host == "h"
    assert "BaseHook.get_connection('kafkalake_test_guard')" in guard.lookups


def test_guard_records_and_blocks_network_calls():
    guard = ParseGuard()
    with guard.watch():
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock, pytest.raises(OSError):
            sock.connect(("127.0.0.1", 1))
        with pytest.raises(OSError):
            socket.create_connection(("kafka.invalid", 9092), timeout=1)
    assert "connect ('127.0.0.1', 1)" in guard.network
    assert "getaddrinfo 'kafka.invalid'" in guard.network


# ---------------------------------------------------------------------------------------------
# broken catalog


def test_strict_broken_catalog_is_an_import_error_naming_file_topic_and_field(monkeypatch, tmp_path):
    set_catalog(monkeypatch, BROKEN_SLA, tmp_path, strict=True)
    bag = parse_dags()

    assert bag.dags == {}
    assert list(bag.import_errors) == [str(DAG_FILE)]
    error = bag.import_errors[str(DAG_FILE)]
    assert str(BROKEN_SLA) in error
    assert "'late-events'" in error
    assert "freshness_sla" in error
    assert "CatalogError" in error


def test_lenient_broken_catalog_keeps_good_topics_and_adds_an_errors_dag(monkeypatch, tmp_path):
    set_catalog(monkeypatch, BROKEN_SLA, tmp_path, strict=False)
    bag = parse_dags()

    assert bag.import_errors == {}
    assert sorted(bag.dag_ids) == [
        "ingest_clicks",
        "ingest_orders",
        "kafkalake_catalog_errors",
        REPLAY_DAG_ID,
    ]
    errors_dag = bag.dags["kafkalake_catalog_errors"]
    assert "late-events" in errors_dag.doc_md
    assert "freshness_sla" in errors_dag.doc_md
    assert str(BROKEN_SLA) in errors_dag.doc_md
    assert isinstance(errors_dag.timetable, NullTimetable)
    assert "kafkalake" in errors_dag.tags


def test_lenient_good_catalog_has_no_errors_dag(monkeypatch, tmp_path):
    set_catalog(monkeypatch, FOUR_TOPICS, tmp_path, strict=False)
    bag = parse_dags()
    assert bag.import_errors == {}
    assert sorted(bag.dag_ids) == sorted([*FOUR_DAG_IDS.values(), REPLAY_DAG_ID])


LONG_TOPIC = "orders." + "x" * 238  # 245 characters: Kafka accepts up to 249

#: Entries Airflow's DAG() would refuse, so the catalog refuses them: file, broken topic, field.
AIRFLOW_WOULD_REFUSE = [
    pytest.param(CATALOGS / "long_topic_name.yaml", LONG_TOPIC, "name", id="dag-id-over-250-chars"),
    pytest.param(CATALOGS / "long_tag.yaml", "tagged", "tags", id="tag-over-100-chars"),
]


@pytest.mark.parametrize(("catalog", "topic", "field_name"), AIRFLOW_WOULD_REFUSE)
def test_lenient_entry_airflow_refuses_only_costs_its_own_dag(
    monkeypatch, tmp_path, catalog, topic, field_name
):
    set_catalog(monkeypatch, catalog, tmp_path, strict=False)
    bag = parse_dags()

    assert bag.import_errors == {}
    assert sorted(bag.dag_ids) == [
        "ingest_clicks",
        "ingest_orders",
        "kafkalake_catalog_errors",
        REPLAY_DAG_ID,
    ]
    doc = bag.dags["kafkalake_catalog_errors"].doc_md
    assert repr(topic) in doc
    assert repr(field_name) in doc


@pytest.mark.parametrize(("catalog", "topic", "field_name"), AIRFLOW_WOULD_REFUSE)
def test_strict_entry_airflow_refuses_is_reported_with_file_topic_and_field(
    monkeypatch, tmp_path, catalog, topic, field_name
):
    set_catalog(monkeypatch, catalog, tmp_path, strict=True)
    bag = parse_dags()

    assert bag.dags == {}
    error = bag.import_errors[str(DAG_FILE)]
    assert str(catalog) in error
    assert repr(topic) in error
    assert repr(field_name) in error


# ---------------------------------------------------------------------------------------------
# a task's process: Airflow's parsing context names the one DAG it runs


def parse_for(monkeypatch: pytest.MonkeyPatch, dag_id: str) -> DagBag:
    """The DAG file parsed as a task of ``dag_id`` parses it (Airflow's task runner and ``airflow
    dags test`` set the parsing context around the parse)."""
    monkeypatch.setenv(_AIRFLOW_PARSING_CONTEXT_DAG_ID, dag_id)
    try:
        return parse_dags()
    finally:
        monkeypatch.delenv(_AIRFLOW_PARSING_CONTEXT_DAG_ID)


@pytest.mark.parametrize("which", ["topic", "replay"])
def test_a_tasks_parse_builds_only_the_dag_it_runs(monkeypatch, tmp_path, which):
    set_catalog(monkeypatch, FOUR_TOPICS, tmp_path / "lake", strict=True)
    wanted = FOUR_DAG_IDS["payments"] if which == "topic" else REPLAY_DAG_ID
    everything = parse_dags()

    bag = parse_for(monkeypatch, wanted)

    assert bag.import_errors == {}
    assert list(bag.dag_ids) == [wanted]
    # The same DAG as a whole parse builds: its tasks and their arguments.
    alone, whole = bag.dags[wanted], everything.dags[wanted]
    assert alone.task_ids == whole.task_ids
    assert [t.application_args for t in alone.tasks if hasattr(t, "application_args")] == [
        t.application_args for t in whole.tasks if hasattr(t, "application_args")
    ]


@pytest.mark.parametrize("dag_id", ["ingest_not_in_the_catalog", "kafkalake_catalog_errors"])
def test_a_parse_for_a_dag_the_catalog_lacks_builds_them_all(monkeypatch, tmp_path, dag_id):
    """An id the catalog does not make (the errors DAG, a topic since removed): every DAG, as the
    DAG processor's parse has them, so Airflow finds what it would have found."""
    set_catalog(monkeypatch, BROKEN_SLA, tmp_path, strict=False)

    bag = parse_for(monkeypatch, dag_id)

    everything = ["ingest_clicks", "ingest_orders", "kafkalake_catalog_errors", REPLAY_DAG_ID]
    assert sorted(bag.dag_ids) == everything
    assert "late-events" in bag.dags["kafkalake_catalog_errors"].doc_md


def test_a_tasks_parse_in_a_broken_catalog_builds_its_dag_without_the_errors_dag(monkeypatch, tmp_path):
    set_catalog(monkeypatch, BROKEN_SLA, tmp_path, strict=False)

    bag = parse_for(monkeypatch, "ingest_orders")

    assert bag.import_errors == {}
    assert list(bag.dag_ids) == ["ingest_orders"]
