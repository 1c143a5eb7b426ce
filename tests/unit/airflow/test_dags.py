"""The DAG file as Airflow sees it: parsed by the real DagBag, from fixture catalogs.

No broker, no Spark, no metadata database: these tests never use the session fixtures of
tests/integration/conftest.py. What they check:

* parsing ``dags/`` builds exactly one DAG per topic and makes no database query, no connection
  lookup and no network call (with sanity tests proving each recorder would catch one);
* a broken catalog entry is an import error in strict mode, an errors DAG in lenient mode;
* the run policy of every generated DAG (schedule from the SLA, retries, owner, docs, wiring) and
  the retry policy every task carries: non-retryable errors fail at once, the rest retry;
* the Spark connection falls back to ``local[*]``, never to the provider's YARN default;
* Kafka secrets reach spark-submit in a private file, never on its command line;
* the replay DAG: manual, one run at a time, the parsed topics as a param, in the Spark pool.
"""

from __future__ import annotations

import contextlib
import errno
import inspect
import itertools
import json
import logging
import os
import socket
import stat
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import sqlalchemy
from airflow.dag_processing.dagbag import DagBag
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import Asset, AsyncCallback, BaseHook, Connection, DeadlineReference
from airflow.sdk.definitions.retry_policy import ExceptionRetryPolicy, RetryAction
from airflow.sdk.definitions.timetables.interval import DeltaDataIntervalTimetable
from airflow.sdk.definitions.timetables.simple import NullTimetable
from airflow.sdk.definitions.timetables.trigger import DeltaTriggerTimetable
from airflow.sdk.exceptions import AirflowException, AirflowNotFoundException
from airflow.serialization.serialized_objects import DagSerialization

from kafkalake.airflow import run_metrics_emit
from kafkalake.airflow.assets import topic_assets
from kafkalake.airflow.dag_factory import REPLAY_DAG_ID, RETRIES, retry_policy
from kafkalake.airflow.pools import DEFAULT_SPARK_SLOTS, SPARK_POOL
from kafkalake.airflow.sla_alerts import ENV_DEADLINE_ALERTS, ENV_WEBHOOK_CONN_ID
from kafkalake.airflow.tasks import MaintenanceOperator
from kafkalake.config.catalog import load_catalog
from kafkalake.config.schedule import run_interval, sla_plan
from kafkalake.core import run_metrics
from kafkalake.core.durations import parse_duration
from kafkalake.core.errors import (
    BadConfigError,
    BrokerUnreachableError,
    CatalogError,
    CheckpointLockedError,
    DriverLostError,
    IngestUnfinishedError,
    KafkaConfigError,
    OffsetsExpiredError,
    TopicMissingError,
    TransientError,
)
from kafkalake.kafka import client_config as kafka_client
from kafkalake.kafka import offsets as kafka_offsets
from kafkalake.launch import handover, submit

REPO = Path(__file__).resolve().parents[3]
DAGS_DIR = REPO / "dags"
DAG_FILE = DAGS_DIR / "kafka_topics.py"
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
CATALOGS = FIXTURES / "dag_catalogs"

FOUR_TOPICS = CATALOGS / "four_topics.yaml"
BROKEN_SLA = CATALOGS / "broken_sla.yaml"
POLICY = CATALOGS / "policy.yaml"

#: four_topics.yaml: topic name -> the DAG id it must get (sanitised by hand, not by the code under test).
FOUR_DAG_IDS = {
    "orders-v2": "ingest_orders_v2",
    "Web.Clicks": "ingest_web_clicks",
    "payments": "ingest_payments",
    "9lives": "ingest_t_9lives",
}


@dataclass(frozen=True)
class Expected:
    """What policy.yaml says about one topic, written out by hand."""

    topic: str
    dag_id: str
    table: str
    sla: str
    interval: timedelta
    owner: str
    extra_tags: tuple[str, ...] = ()
    priority: int = 1


POLICY_TOPICS = [
    Expected(
        "payments",
        "ingest_payments",
        "bronze.payments",
        "15m",
        timedelta(minutes=5),
        "lake-team",
        priority=10,
    ),
    Expected(
        "clickstream", "ingest_clickstream", "bronze.clickstream", "1h", timedelta(minutes=20), "web-team"
    ),
    Expected(
        "orders-v2",
        "ingest_orders_v2",
        "bronze.orders_v2",
        "6h",
        timedelta(hours=2),
        "lake-team",
        ("orders", "pii"),
    ),
    Expected(
        "ledger.daily",
        "ingest_ledger_daily",
        "bronze.ledger_daily",
        "1d",
        timedelta(hours=8),
        "lake-team",
        ("from-defaults",),
    ),
    # 7m / 3 = 2m20s, rounded down to the minute.
    Expected("odd-seven", "ingest_odd_seven", "bronze.odd_seven", "7m", timedelta(minutes=2), "lake-team"),
]
POLICY_IDS = [e.topic for e in POLICY_TOPICS]
#: policy.yaml: topic -> (deadline after the run is queued = SLA - interval, SLA webhook connection).
POLICY_DEADLINES = {
    "payments": (timedelta(minutes=10), None),
    "clickstream": (timedelta(minutes=40), "web_team_alerts"),
    "orders-v2": (timedelta(hours=4), None),
    "ledger.daily": (timedelta(hours=16), None),
    "odd-seven": (timedelta(minutes=5), None),  # 7m - 2m
}
TASK_ORDER = ["check_new_offsets", "ingest", "refresh_schema", "register_table", "maintain_table"]


# ---------------------------------------------------------------------------------------------
# helpers


def _forget_dag_modules() -> None:
    """Drop every module loaded from dags/ so the next parse executes the DAG file again."""
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if file and Path(file).resolve().parent == DAGS_DIR:
            del sys.modules[name]


def parse_dags() -> DagBag:
    _forget_dag_modules()
    return DagBag(dag_folder=str(DAGS_DIR), safe_mode=True)


def set_catalog(mp: pytest.MonkeyPatch, catalog: Path, lake: Path, *, strict: bool) -> None:
    mp.setenv("KAFKALAKE_CATALOG", str(catalog))
    mp.setenv("KAFKALAKE_LAKE_ROOT", str(lake))
    if strict:
        mp.setenv("KAFKALAKE_STRICT", "1")
    else:
        mp.delenv("KAFKALAKE_STRICT", raising=False)


def unset_env_for_test(mp: pytest.MonkeyPatch, name: str) -> None:
    """Unset ``name`` so that it is also removed again at teardown if the code under test sets it.

    ``monkeypatch.delenv`` records nothing when the variable is absent, so a value set later by
    the code under test would leak into other tests; setting it first makes monkeypatch remember
    the original state.
    """
    mp.setenv(name, "placeholder")
    mp.delenv(name)


@dataclass
class ParseGuard:
    """Records database queries, connection lookups and network calls made inside ``watch()``."""

    queries: list[str] = field(default_factory=list)
    lookups: list[str] = field(default_factory=list)
    network: list[str] = field(default_factory=list)

    def _on_query(self, conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        self.queries.append(statement)

    @contextlib.contextmanager
    def watch(self) -> Iterator[ParseGuard]:
        guard = self

        def wrap_classmethod(owner: type, name: str) -> None:
            original = inspect.getattr_static(owner, name)
            assert isinstance(original, classmethod), f"{owner.__name__}.{name} is no longer a classmethod"

            def recorder(cls: type, conn_id: str, *args: Any, **kwargs: Any) -> Any:
                guard.lookups.append(f"{owner.__name__}.{name}({conn_id!r})")
                return original.__func__(cls, conn_id, *args, **kwargs)

            mp.setattr(owner, name, classmethod(recorder))

        def connect(sock: socket.socket, address: Any) -> None:
            guard.network.append(f"connect {address!r}")
            raise OSError(errno.ENETUNREACH, f"network blocked by test: {address!r}")

        def connect_ex(sock: socket.socket, address: Any) -> int:
            guard.network.append(f"connect_ex {address!r}")
            return errno.ENETUNREACH

        def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
            guard.network.append(f"getaddrinfo {host!r}")
            raise socket.gaierror(socket.EAI_NONAME, f"DNS blocked by test: {host!r}")

        with pytest.MonkeyPatch.context() as mp:
            wrap_classmethod(BaseHook, "get_connection")
            if isinstance(inspect.getattr_static(Connection, "get", None), classmethod):
                wrap_classmethod(Connection, "get")
            mp.setattr(socket.socket, "connect", connect)
            mp.setattr(socket.socket, "connect_ex", connect_ex)
            mp.setattr(socket, "getaddrinfo", getaddrinfo)
            # Class level: every Engine, Airflow's own and any a DAG file could create.
            sqlalchemy.event.listen(sqlalchemy.engine.Engine, "before_cursor_execute", self._on_query)
            try:
                yield self
            finally:
                sqlalchemy.event.remove(sqlalchemy.engine.Engine, "before_cursor_execute", self._on_query)


@contextlib.contextmanager
def fresh_kafkalake_modules() -> Iterator[None]:
    """Import ``kafkalake`` anew inside the block, as a fresh DAG-processor process would.

    Its module-level code then runs under the recorders too. The original modules are put back
    afterwards, so classes seen by other tests keep their identity.
    """

    def ours(name: str) -> bool:
        return name == "kafkalake" or name.startswith("kafkalake.")

    saved = {name: module for name, module in sys.modules.items() if ours(name)}
    for name in saved:
        del sys.modules[name]
    try:
        yield
    finally:
        for name in [name for name in sys.modules if ours(name)]:
            del sys.modules[name]
        sys.modules.update(saved)


def schedule_delta(dag: Any) -> timedelta:
    timetable = dag.timetable
    assert isinstance(timetable, DeltaTriggerTimetable | DeltaDataIntervalTimetable), (
        f"{dag.dag_id}: a timedelta schedule should give a delta timetable, got {type(timetable).__name__}"
    )
    assert isinstance(timetable.delta, timedelta)
    return timetable.delta


# ---------------------------------------------------------------------------------------------
# 1. parse hygiene


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
# 2. broken catalog


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
# 3. policy of every generated DAG


@pytest.fixture(scope="module")
def policy_lake(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("policy-lake")


@pytest.fixture(scope="module")
def policy_bag(policy_lake) -> DagBag:
    with pytest.MonkeyPatch.context() as mp:
        set_catalog(mp, POLICY, policy_lake, strict=True)
        bag = parse_dags()
    assert bag.import_errors == {}
    return bag


def test_policy_catalog_gives_exactly_the_expected_dags(policy_bag):
    assert sorted(policy_bag.dag_ids) == sorted([*(e.dag_id for e in POLICY_TOPICS), REPLAY_DAG_ID])


@pytest.mark.parametrize("expected", POLICY_TOPICS, ids=POLICY_IDS)
def test_dag_run_policy(policy_bag, expected):
    dag = policy_bag.dags[expected.dag_id]
    assert dag.max_active_runs == 1
    assert dag.catchup is False
    assert "kafkalake" in dag.tags
    assert set(expected.extra_tags) <= set(dag.tags)


@pytest.mark.parametrize("expected", POLICY_TOPICS, ids=POLICY_IDS)
def test_schedule_is_a_third_of_the_sla_or_less(policy_bag, expected):
    sla = parse_duration(expected.sla)
    delta = schedule_delta(policy_bag.dags[expected.dag_id])
    assert delta == run_interval(sla)
    assert delta == expected.interval
    assert delta <= sla / 3
    assert delta >= timedelta(minutes=1)


def only_deadline(dag: Any) -> Any:
    alerts = dag.deadline if isinstance(dag.deadline, list) else [dag.deadline]
    assert len(alerts) == 1, f"{dag.dag_id}: expected one Deadline Alert, got {dag.deadline!r}"
    return alerts[0]


@pytest.mark.parametrize("expected", POLICY_TOPICS, ids=POLICY_IDS)
def test_schedule_deadline_and_retries_follow_the_sla_plan(policy_bag, expected):
    dag = policy_bag.dags[expected.dag_id]
    plan = sla_plan(parse_duration(expected.sla))
    deadline, webhook = POLICY_DEADLINES[expected.topic]

    assert schedule_delta(dag) == plan.run_interval == expected.interval
    alert = only_deadline(dag)
    assert alert.reference == DeadlineReference.DAGRUN_QUEUED_AT
    assert alert.interval == plan.deadline == deadline
    assert alert.interval + schedule_delta(dag) == parse_duration(expected.sla)
    assert isinstance(alert.callback, AsyncCallback)  # runs in the triggerer
    assert alert.callback.path == "kafkalake.airflow.sla_alerts.on_sla_miss"
    kwargs = alert.callback.kwargs
    assert kwargs["topic"] == expected.topic
    assert kwargs["table"] == expected.table
    assert parse_duration(kwargs["sla"]) == plan.sla
    assert parse_duration(kwargs["deadline"]) == plan.deadline
    assert kwargs.get("webhook_conn_id") == webhook
    for task in dag.tasks:
        assert task.retries == RETRIES, task.task_id
        # Backoff never pushes a retry past the next run.
        assert task.max_retry_delay <= plan.run_interval, task.task_id


def test_sla_webhook_from_the_environment_reaches_every_topic_without_its_own(monkeypatch, tmp_path):
    set_catalog(monkeypatch, POLICY, tmp_path, strict=True)
    monkeypatch.setenv(ENV_WEBHOOK_CONN_ID, "ops_alerts")
    bag = parse_dags()
    for expected in POLICY_TOPICS:
        own = POLICY_DEADLINES[expected.topic][1]
        kwargs = only_deadline(bag.dags[expected.dag_id]).callback.kwargs
        assert kwargs["webhook_conn_id"] == (own or "ops_alerts")


def test_deadline_alerts_switched_off_only_by_the_dags_test_switch(monkeypatch, tmp_path):
    set_catalog(monkeypatch, FOUR_TOPICS, tmp_path, strict=True)
    monkeypatch.setenv(ENV_DEADLINE_ALERTS, "0")
    bag = parse_dags()
    assert len(bag.dags) == 5
    assert all(not dag.deadline for dag in bag.dags.values())
    monkeypatch.setenv(ENV_DEADLINE_ALERTS, "1")
    ingest_dags = [dag for dag in parse_dags().dags.values() if dag.dag_id != REPLAY_DAG_ID]
    assert len(ingest_dags) == 4 and all(only_deadline(dag) for dag in ingest_dags)


@pytest.mark.parametrize("expected", POLICY_TOPICS, ids=POLICY_IDS)
def test_doc_md_names_topic_table_and_checkpoint(policy_bag, policy_lake, expected):
    doc = policy_bag.dags[expected.dag_id].doc_md
    assert doc and doc.strip()
    assert f"`{expected.topic}`" in doc
    assert f"`{expected.table}`" in doc
    # On-call needs the checkpoint's location, and the word outside that path too (the runbook).
    checkpoint = load_catalog(POLICY, policy_lake).topic(expected.topic).checkpoint_path
    assert f"`{checkpoint}`" in doc
    assert "checkpoint" in doc.replace(checkpoint, "").lower()


@pytest.mark.parametrize("expected", POLICY_TOPICS, ids=POLICY_IDS)
def test_doc_md_points_to_the_runbook_sections(policy_bag, expected):
    doc = policy_bag.dags[expected.dag_id].doc_md
    assert "`RUNBOOK.md`" in doc
    for kind in ("offsets_expired", "checkpoint_locked", "Pool starvation", "Stuck run"):
        assert f"`{kind}`" in doc


@pytest.mark.parametrize("expected", POLICY_TOPICS, ids=POLICY_IDS)
def test_every_task_retries_with_exponential_backoff_and_has_the_catalog_owner(policy_bag, expected):
    dag = policy_bag.dags[expected.dag_id]
    assert sorted(dag.task_ids) == sorted(TASK_ORDER)
    for task in dag.tasks:
        assert task.retries == 3, task.task_id
        assert isinstance(task.retry_delay, timedelta) and task.retry_delay > timedelta(0), task.task_id
        assert task.retry_exponential_backoff, task.task_id
        assert task.owner == expected.owner, task.task_id


@pytest.mark.parametrize("expected", POLICY_TOPICS, ids=POLICY_IDS)
def test_every_task_carries_the_retry_policy(policy_bag, expected):
    dag = policy_bag.dags[expected.dag_id]
    for task in dag.tasks:
        policy = task.retry_policy
        assert isinstance(policy, ExceptionRetryPolicy), task.task_id
        assert policy.serialize() == retry_policy().serialize(), task.task_id
        assert task.has_retry_policy, task.task_id
        # The policy only fails chosen errors at once; everything else keeps the retries above.
        assert policy.evaluate(OffsetsExpiredError("gone"), 1, 4).action is RetryAction.FAIL
        assert policy.evaluate(RuntimeError("?"), 1, 4).action is RetryAction.DEFAULT


@pytest.mark.parametrize("expected", POLICY_TOPICS, ids=POLICY_IDS)
def test_preflight_knows_whether_the_topic_accepts_data_loss(policy_bag, policy_lake, expected):
    check = policy_bag.dags[expected.dag_id].get_task("check_new_offsets")
    topic = load_catalog(POLICY, policy_lake).topic(expected.topic)
    assert check.op_kwargs["fail_on_data_loss"] is topic.fail_on_data_loss


@pytest.mark.parametrize("expected", POLICY_TOPICS, ids=POLICY_IDS)
def test_tasks_run_in_order(policy_bag, expected):
    dag = policy_bag.dags[expected.dag_id]
    for before, after in itertools.pairwise(TASK_ORDER):
        assert dag.get_task(before).downstream_task_ids == {after}
        assert dag.get_task(after).upstream_task_ids == {before}
    assert dag.get_task(TASK_ORDER[0]).upstream_task_ids == set()
    assert dag.get_task(TASK_ORDER[-1]).downstream_task_ids == set()
    assert [t.task_id for t in dag.topological_sort()] == TASK_ORDER


@pytest.mark.parametrize("expected", POLICY_TOPICS, ids=POLICY_IDS)
def test_maintenance_runs_after_register_table_even_on_idle_runs(policy_bag, expected):
    """An idle run skips ``ingest`` and ``register_table`` only: maintenance still checks what is due.

    ``none_failed``: a skipped upstream lets it run, a failed one stops it.
    """
    dag = policy_bag.dags[expected.dag_id]
    check = dag.get_task("check_new_offsets")
    maintain = dag.get_task("maintain_table")
    assert check.ignore_downstream_trigger_rules is False
    assert maintain.trigger_rule == "none_failed"
    assert dag.get_task("register_table").trigger_rule == "all_success"
    assert isinstance(maintain, MaintenanceOperator)
    assert maintain.retries == 3
    assert maintain.retry_policy.serialize() == retry_policy().serialize()
    assert maintain.topic.name == expected.topic


@pytest.mark.parametrize("expected", POLICY_TOPICS, ids=POLICY_IDS)
@pytest.mark.parametrize(
    ("task_id", "job"),
    [
        ("ingest", "ingest_topic.py"),
        ("refresh_schema", "refresh_schema.py"),
        ("register_table", "register_table.py"),
        ("maintain_table", "maintain_table.py"),
    ],
)
def test_spark_tasks_use_spark_default_local_jars_and_an_existing_application(
    policy_bag, expected, task_id, job
):
    task = policy_bag.dags[expected.dag_id].get_task(task_id)
    assert isinstance(task, SparkSubmitOperator)
    assert task._conn_id == "spark_default"
    assert task.packages is None
    assert task.exclude_packages is None
    assert task._repositories is None
    assert Path(task.application).name == job
    assert Path(task.application).is_file()
    assert task.application_args == ["--topic", expected.topic]


# ---------------------------------------------------------------------------------------------
# 4. no YARN fallback


@pytest.fixture
def ingest_task(monkeypatch, tmp_path) -> Any:
    """A fresh ``ingest`` task (tests below change its state) from a parsed DAG."""
    set_catalog(monkeypatch, FOUR_TOPICS, tmp_path / "lake", strict=True)
    # The lag metrics ask Kafka for offsets; these tests' brokers do not exist, and each ask would
    # wait for its timeout. tests/integration/test_ingest_dag.py measures the lag on a real broker.
    monkeypatch.setattr(run_metrics_emit, "lag_now", lambda config, topic: None)
    # Likewise the topic's ID (tests/integration/test_lost_state.py checks it on a real broker).
    monkeypatch.setattr(kafka_offsets, "topic_id", lambda config, topic: "topic-id-1")
    return parse_dags().dags["ingest_payments"].get_task("ingest")


def test_provider_alone_would_fall_back_to_yarn(monkeypatch, ingest_task):
    """Why the guard exists: without it, a missing spark_default means YARN."""
    unset_env_for_test(monkeypatch, "AIRFLOW_CONN_SPARK_DEFAULT")
    assert ingest_task._get_hook()._connection["master"] == "yarn"


def test_missing_spark_connection_runs_on_local_spark(monkeypatch, ingest_task):
    unset_env_for_test(monkeypatch, "AIRFLOW_CONN_SPARK_DEFAULT")
    guard = ParseGuard()

    with guard.watch():
        ingest_task._use_local_spark_if_undefined()
        assert json.loads(os.environ["AIRFLOW_CONN_SPARK_DEFAULT"]) == {
            "conn_type": "spark",
            "host": "local[*]",
        }
        hook = ingest_task._get_hook()

    assert hook._connection["master"] == "local[*]"
    assert not hook._is_yarn
    # Outside a task, Airflow 3.3 looks connections up in env vars (and configured external
    # backends) only: the miss and the hit cost no metadata-DB query and no network call.
    assert "BaseHook.get_connection('spark_default')" in guard.lookups
    assert guard.queries == []
    assert guard.network == []


def test_defined_spark_connection_is_used_as_is(monkeypatch, ingest_task):
    defined = json.dumps({"conn_type": "spark", "host": "spark://example:7077"})
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", defined)

    ingest_task._use_local_spark_if_undefined()

    assert os.environ["AIRFLOW_CONN_SPARK_DEFAULT"] == defined
    assert ingest_task._get_hook()._connection["master"] == "spark://example:7077"


# ---------------------------------------------------------------------------------------------
# 5. secrets never on the command line

PASSWORD = "s3cret-pw"
KAFKA_EXTRA = {
    "bootstrap.servers": "broker-1.example:9093",
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "PLAIN",
    "sasl.username": "alice",
    "sasl.password": PASSWORD,
}


@pytest.mark.parametrize(
    ("spark_conn", "master"),
    [
        pytest.param(None, "local[*]", id="no-spark-connection"),
        # On YARN the provider puts env_vars on the command line (spark.yarn.appMasterEnv.*).
        pytest.param({"conn_type": "spark", "host": "yarn"}, "yarn", id="yarn"),
    ],
)
def test_ingest_execute_hands_secrets_in_a_private_file_not_on_the_command_line(
    monkeypatch, tmp_path, ingest_task, spark_conn, master
):
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "extra": KAFKA_EXTRA}))
    unset_env_for_test(monkeypatch, "AIRFLOW_CONN_SPARK_DEFAULT")
    if spark_conn is not None:
        monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps(spark_conn))
    jar = tmp_path / "delta-spark_2.13-4.0.0.jar"
    jar.write_bytes(b"")
    # Jar resolution is not under test here; a resolved jar set is a list of local files.
    monkeypatch.setattr(submit, "jar_files", lambda conf: [jar])

    seen: dict[str, Any] = {}

    def submit_instead_of_running(self, context):
        """Stands in for the provider's execute(): build the command, run nothing."""
        hook = self._get_hook()
        seen["command"] = hook._build_spark_submit_command(self.application)
        seen["env_vars"] = dict(self.env_vars)
        path = Path(self.env_vars[handover.ENV_CLIENT_CONFIG_FILE])
        seen["path"] = path
        seen["mode"] = stat.S_IMODE(path.stat().st_mode)
        seen["dir_mode"] = stat.S_IMODE(path.parent.stat().st_mode)
        seen["settings"] = json.loads(path.read_text())

    monkeypatch.setattr(SparkSubmitOperator, "execute", submit_instead_of_running)

    guard = ParseGuard()
    with guard.watch():
        ingest_task.execute(context={})

    assert "BaseHook.get_connection('kafka_default')" in guard.lookups
    assert guard.queries == []
    assert guard.network == []
    command = seen["command"]
    assert not any(PASSWORD in arg for arg in command), command
    assert not any(PASSWORD in str(value) for value in seen["env_vars"].values())
    assert "--packages" not in command
    # Driver memory is a setting a topic's spark_conf can raise; --driver-memory would beat it.
    assert "--driver-memory" not in command
    assert any(arg.startswith("spark.driver.memory=") for arg in command)
    assert command[command.index("--jars") + 1] == str(jar)
    assert command[command.index("--master") + 1] == master
    assert command[-2:] == ["--topic", "payments"]
    # The job's metrics file, like the settings file, is named in its environment, never in argv.
    assert run_metrics.ENV_METRICS_FILE in seen["env_vars"]
    if master == "yarn":
        conf_file_setting = f"spark.yarn.appMasterEnv.{handover.ENV_CLIENT_CONFIG_FILE}={seen['path']}"
        assert conf_file_setting in command

    assert seen["mode"] == 0o600
    assert seen["dir_mode"] == 0o700
    settings = seen["settings"]
    assert settings["bootstrap.servers"] == "broker-1.example:9093"
    assert settings["security.protocol"] == "SASL_SSL"
    assert f'password="{PASSWORD}"' in settings["sasl.jaas.config"]
    assert "sasl.password" not in settings
    # The private file lives only as long as the submit.
    assert not seen["path"].exists()


def test_config_file_holds_the_jaas_config_readable_by_owner_only():
    java = kafka_client.java_client_config(KAFKA_EXTRA)
    with handover.config_file(java) as path:
        mode = stat.S_IMODE(path.stat().st_mode)
        text = path.read_text()
    assert mode == 0o600
    jaas = json.loads(text)["sasl.jaas.config"]
    assert jaas == (
        'org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" '
        f'password="{PASSWORD}";'
    )
    assert not path.exists()


# ---------------------------------------------------------------------------------------------
# 6. the retry policy: which errors fail at once


@pytest.mark.parametrize(
    "error",
    [
        OffsetsExpiredError("gone"),
        TopicMissingError("no topic"),
        BadConfigError("bad"),
        CatalogError(Path("topics.yaml"), "broken", "orders"),
        KafkaConfigError("no broker"),
        AirflowNotFoundException("The conn_id `kafka_default` isn't defined"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_policy_fails_non_retryable_errors_at_once(error):
    decision = retry_policy().evaluate(error, try_number=1, max_tries=4)
    assert decision.action is RetryAction.FAIL
    assert decision.reason and "not retryable" in decision.reason


@pytest.mark.parametrize(
    "error",
    [BrokerUnreachableError("down"), DriverLostError("killed"), TransientError("?")],
    ids=lambda e: type(e).__name__,
)
def test_policy_retries_transient_errors_with_the_tasks_own_backoff(error):
    decision = retry_policy().evaluate(error, try_number=1, max_tries=4)
    assert decision.action is RetryAction.RETRY
    assert decision.retry_delay is None


@pytest.mark.parametrize(
    "error",
    [RuntimeError("?"), AirflowException("Cannot execute"), TimeoutError(), ValueError("?")],
    ids=lambda e: type(e).__name__,
)
def test_policy_leaves_unclassified_errors_to_the_default_retries(error):
    assert retry_policy().evaluate(error, try_number=1, max_tries=4).action is RetryAction.DEFAULT


def test_spark_job_failure_becomes_a_typed_error_the_policy_acts_on(monkeypatch, ingest_task):
    """The provider's error (exit code + last lines) is classified; the on-call message comes first."""
    line = (
        "KAFKALAKE_FAILURE kind=offsets_expired [offsets_expired] topic 'payments': gone "
        "(NOT retrying: a retry cannot fix this). What to do: accept the loss"
    )

    def failing_submit(self, context):
        tail = f"\nLast spark-submit output:\n{line}"
        raise AirflowException(f"Cannot execute: spark-submit ingest_topic.py. Error code is: 65.{tail}")

    monkeypatch.setattr(SparkSubmitOperator, "execute", failing_submit)
    monkeypatch.setattr(submit, "jar_files", lambda conf: [])
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "host": "b:9092"}))
    with pytest.raises(OffsetsExpiredError, match=r"\[offsets_expired\] topic 'payments': gone") as raised:
        ingest_task.execute(context={})
    assert isinstance(raised.value.__cause__, AirflowException)
    assert ingest_task.retry_policy.evaluate(raised.value, 1, 4).action is RetryAction.FAIL


# ---------------------------------------------------------------------------------------------
# 7. concurrency: one pool for every Spark job, the topic's priority decides who goes first


@pytest.mark.parametrize("expected", POLICY_TOPICS, ids=POLICY_IDS)
def test_spark_tasks_take_a_slot_of_the_spark_pool_and_the_preflight_does_not(policy_bag, expected):
    dag = policy_bag.dags[expected.dag_id]
    spark_tasks = {t.task_id for t in dag.tasks if isinstance(t, SparkSubmitOperator)}
    assert {"ingest", "register_table"} <= spark_tasks
    assert SPARK_POOL == "kafkalake_spark"
    for task in dag.tasks:
        if task.task_id in spark_tasks:
            assert (task.pool, task.pool_slots) == ("kafkalake_spark", 1), task.task_id
        else:
            assert task.pool == "default_pool", task.task_id
    assert dag.get_task("check_new_offsets").pool == "default_pool"


def test_the_readme_gives_the_spark_pools_default_size():
    readme = (REPO / "README.md").read_text()
    assert f"Its default size is **{DEFAULT_SPARK_SLOTS}**" in readme


@pytest.mark.parametrize("expected", POLICY_TOPICS, ids=POLICY_IDS)
def test_every_spark_task_has_an_execution_timeout_from_the_catalog(policy_bag, expected):
    dag = policy_bag.dags[expected.dag_id]
    spark_tasks = [t for t in dag.tasks if isinstance(t, SparkSubmitOperator)]
    assert {t.task_id for t in spark_tasks} >= {"ingest", "register_table", "maintain_table"}
    # policy.yaml gives payments its own; the others get the default.
    wanted = timedelta(minutes=40) if expected.topic == "payments" else timedelta(hours=2)
    for task in spark_tasks:
        assert task.execution_timeout == wanted, task.task_id
    # The pre-flight had its bound already.
    assert dag.get_task("check_new_offsets").execution_timeout == timedelta(minutes=5)


def test_the_replay_task_has_an_execution_timeout(replay_bag):
    assert replay_bag.dags[REPLAY_DAG_ID].get_task("replay").execution_timeout == timedelta(hours=6)


@pytest.mark.parametrize("expected", POLICY_TOPICS, ids=POLICY_IDS)
def test_every_task_weighs_the_topics_priority_absolutely(policy_bag, expected):
    dag = policy_bag.dags[expected.dag_id]
    for task in dag.tasks:
        assert task.priority_weight == expected.priority, task.task_id
        assert task.weight_rule == "absolute", task.task_id


def test_a_high_priority_ingest_outranks_a_low_one_as_the_scheduler_weighs_them(policy_bag):
    """The scheduler reads the serialized DAG and asks its weight rule for each task's weight."""

    def scheduler_weight(dag_id: str, task_id: str) -> int:
        serialized = DagSerialization.from_dict(DagSerialization.to_dict(policy_bag.dags[dag_id]))
        task = serialized.get_task(task_id)
        return task.weight_rule.get_weight(SimpleNamespace(task=task))

    # Absolute: the preflight's weight is not the sum of the tasks downstream of it.
    assert scheduler_weight("ingest_payments", "check_new_offsets") == 10
    assert scheduler_weight("ingest_payments", "ingest") == 10
    assert scheduler_weight("ingest_clickstream", "ingest") == 1
    assert scheduler_weight("ingest_payments", "register_table") > scheduler_weight(
        "ingest_clickstream", "ingest"
    )


def test_airflow_flags_every_dag_when_the_spark_pool_does_not_exist(monkeypatch, tmp_path):
    """Without the pool Airflow never queues the Spark tasks; its only signal is this DAG warning."""
    set_catalog(monkeypatch, FOUR_TOPICS, tmp_path / "lake", strict=True)
    _forget_dag_modules()
    missing = DagBag(dag_folder=str(DAGS_DIR), safe_mode=True, known_pools={"default_pool"})
    assert {w.dag_id for w in missing.dag_warnings} == {*FOUR_DAG_IDS.values(), REPLAY_DAG_ID}
    for warning in missing.dag_warnings:
        assert warning.message == f"Dag '{warning.dag_id}' references non-existent pools: ['kafkalake_spark']"

    _forget_dag_modules()
    present = DagBag(dag_folder=str(DAGS_DIR), safe_mode=True, known_pools={"default_pool", SPARK_POOL})
    assert present.dag_warnings == set()


# ---------------------------------------------------------------------------------------------
# 8. assets: each table is an outlet of the task that writes it


@pytest.mark.parametrize("expected", POLICY_TOPICS, ids=POLICY_IDS)
def test_ingest_updates_the_asset_of_its_table_and_no_other_task_does(policy_bag, policy_lake, expected):
    dag = policy_bag.dags[expected.dag_id]
    topic = load_catalog(POLICY, policy_lake).topic(expected.topic)
    assert dag.get_task("ingest").outlets == [
        Asset(name=expected.table, uri=f"file://{topic.path}"),
        Asset(name=topic.parsed_table, uri=f"file://{topic.parsed_path}"),
        Asset(name=topic.dead_letter_table, uri=f"file://{topic.dead_letter_path}"),
    ]
    assert [t.task_id for t in dag.tasks if t.outlets] == ["ingest"]


def test_table_assets_need_no_warning_no_io_and_keep_object_store_uris(recwarn, tmp_path):
    catalog = load_catalog(
        Path(__file__).resolve().parents[2] / "fixtures" / "catalogs" / "good.yaml", tmp_path
    )
    guard = ParseGuard()
    with guard.watch():  # built at parse time: an object-store scheme asks Airflow for a normaliser
        payments, *_ = topic_assets(catalog.topic("payments"))
        clicks, *_ = topic_assets(catalog.topic("clickstream"))
    assert (payments.name, payments.uri) == ("raw.payments", "s3a://lake-bucket/raw/payments")
    assert (clicks.name, clicks.uri) == ("raw.clickstream", f"file://{tmp_path}/web/clicks")
    assert [str(w.message) for w in recwarn] == []
    assert (guard.queries, guard.lookups, guard.network) == ([], [], [])


# 9. table maintenance: skipped without a JVM when nothing is due


@pytest.fixture
def maintain_task(monkeypatch, tmp_path) -> Any:
    set_catalog(monkeypatch, FOUR_TOPICS, tmp_path / "lake", strict=True)
    return parse_dags().dags["ingest_payments"].get_task("maintain_table")


def _record_submits(monkeypatch) -> list[str]:
    submitted: list[str] = []
    monkeypatch.setattr(SparkSubmitOperator, "execute", lambda self, context: submitted.append(self.task_id))
    monkeypatch.setattr(submit, "jar_files", lambda conf: [])
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[1]"}))
    return submitted


def test_maintenance_is_skipped_without_spark_when_the_table_is_new(monkeypatch, maintain_task):
    import pyarrow as pa
    from airflow.sdk.exceptions import AirflowSkipException
    from deltalake import write_deltalake

    submitted = _record_submits(monkeypatch)
    with pytest.raises(AirflowSkipException, match="no table maintenance due"):
        maintain_task.execute(context={})  # no table yet
    write_deltalake(maintain_task.topic.path, pa.table({"offset": [1, 2]}))
    with pytest.raises(AirflowSkipException, match="no table maintenance due"):
        maintain_task.execute(context={})  # created a moment ago: OPTIMIZE is due in a day
    assert submitted == []


def test_maintenance_submits_its_job_when_a_property_differs(monkeypatch, tmp_path):
    import pyarrow as pa
    from deltalake import write_deltalake

    catalog = tmp_path / "topics.yaml"
    catalog.write_text(
        "topics:\n  - name: payments\n    freshness_sla: 1h\n"
        "    maintenance: {properties: {delta.logRetentionDuration: 'interval 30 days'}}\n"
    )
    set_catalog(monkeypatch, catalog, tmp_path / "lake", strict=True)
    task = parse_dags().dags["ingest_payments"].get_task("maintain_table")
    submitted = _record_submits(monkeypatch)
    write_deltalake(task.topic.path, pa.table({"offset": [1]}))

    task.execute(context={})

    assert submitted == ["maintain_table"]
    assert Path(task.application).name == "maintain_table.py"


# 9b. one JVM per DAG run: the follow-up tasks report what the ingest job did, and start no JVM

FOLLOW_UP_CATALOG = "topics:\n  - name: payments\n    freshness_sla: 15m\n    parsed: {enabled: true}\n"


class FakeTI:
    """What the follow-up tasks read of their task instance: the try number and the ingest's XCom."""

    def __init__(self, try_number: int = 1, follow_ups: Any = None) -> None:
        self.try_number = try_number
        self.follow_ups = follow_ups
        self.pulled: list[tuple[str, str]] = []

    def xcom_pull(self, task_ids: str, key: str) -> Any:
        self.pulled.append((task_ids, key))
        return self.follow_ups


@pytest.fixture
def follow_up_dag(monkeypatch, tmp_path) -> Any:
    catalog = tmp_path / "topics.yaml"
    catalog.write_text(FOLLOW_UP_CATALOG)
    set_catalog(monkeypatch, catalog, tmp_path / "lake", strict=True)
    return parse_dags().dags["ingest_payments"]


def test_refresh_schema_reports_what_the_ingest_job_did_and_starts_no_jvm(monkeypatch, follow_up_dag, caplog):
    submitted = _record_submits(monkeypatch)
    task = follow_up_dag.get_task("refresh_schema")
    # The task's own logger goes to Airflow's task log; a plain one lets caplog read the report.
    monkeypatch.setattr(type(task), "log", property(lambda self: logging.getLogger("follow-up-test")))
    ti = FakeTI(follow_ups={"refresh_schema": "topic payments: 12 values sampled; schema unchanged"})
    with caplog.at_level("INFO", logger="follow-up-test"):
        task.execute(context={"ti": ti})
    assert submitted == []
    assert ti.pulled == [("ingest", "follow_ups")]
    assert "(no JVM started): topic payments: 12 values sampled; schema unchanged" in caplog.text


@pytest.mark.parametrize(
    ("try_number", "follow_ups"),
    [
        (1, None),  # an ingest that pushed nothing (a re-ingest run, an older job)
        (1, {}),  # the refresh failed inside the ingest job
        (1, {"register_table": "x"}),  # the ingest did other work, not this
        (2, {"refresh_schema": "done"}),  # a retry, or a task cleared by hand: do the work
    ],
)
def test_refresh_schema_runs_its_own_job_when_the_ingest_did_not_or_on_a_retry(
    monkeypatch, follow_up_dag, try_number, follow_ups
):
    submitted = _record_submits(monkeypatch)
    follow_up_dag.get_task("refresh_schema").execute(context={"ti": FakeTI(try_number, follow_ups)})
    assert submitted == ["refresh_schema"]


def test_table_care_done_by_the_ingest_job_is_reported_with_no_jvm_and_no_due_check(
    monkeypatch, follow_up_dag, caplog
):
    submitted = _record_submits(monkeypatch)
    task = follow_up_dag.get_task("maintain_table")
    monkeypatch.setattr(type(task), "log", property(lambda self: logging.getLogger("follow-up-test")))
    # The table does not even exist here: the due check would skip; the report comes from the XCom.
    ti = FakeTI(follow_ups={"maintain_table": "bronze.payments: 5 files -> 1 file, OPTIMIZE (bin-packing)"})
    with caplog.at_level("INFO", logger="follow-up-test"):
        task.execute(context={"ti": ti})
    assert submitted == []
    assert "(no JVM started): bronze.payments: 5 files -> 1 file" in caplog.text


@pytest.mark.parametrize(
    ("try_number", "follow_ups"),
    [
        (1, None),  # a backfill or an idle run: the ingest did not run
        (1, {"refresh_schema": "done"}),  # care was not due then, or failed in the ingest job
        (2, {"maintain_table": "done"}),  # a retry, or cleared by hand: do it (when due)
    ],
)
def test_table_care_not_done_by_the_ingest_is_judged_here_as_before(
    monkeypatch, follow_up_dag, try_number, follow_ups
):
    from airflow.sdk.exceptions import AirflowSkipException

    submitted = _record_submits(monkeypatch)
    with pytest.raises(AirflowSkipException, match="no table maintenance due"):
        follow_up_dag.get_task("maintain_table").execute(context={"ti": FakeTI(try_number, follow_ups)})
    assert submitted == []


def test_register_table_starts_no_jvm_only_when_every_existing_table_is_recorded(monkeypatch, follow_up_dag):
    import pyarrow as pa
    from deltalake import write_deltalake

    from kafkalake.config.tables import topic_tables
    from kafkalake.lake import registry

    submitted = _record_submits(monkeypatch)
    task = follow_up_dag.get_task("register_table")
    records = registry.registry_dir(Path(task.lake_root))
    bronze, parsed = topic_tables(task.topic)[:2]

    task.execute(context={"ti": FakeTI()})  # no table yet: nothing to register
    assert submitted == []

    write_deltalake(bronze.location, pa.table({"offset": [1]}))
    task.execute(context={"ti": FakeTI()})  # bronze exists, never registered
    assert submitted == ["register_table"]

    registry.record(records, bronze)
    task.execute(context={"ti": FakeTI()})  # recorded at its location; the parsed table is not there yet
    assert submitted == ["register_table"]

    write_deltalake(parsed.location, pa.table({"offset": [1]}))
    task.execute(context={"ti": FakeTI()})  # the parsed table appeared: register it
    assert submitted == ["register_table", "register_table"]

    registry.record(records, parsed)
    task.execute(context={"ti": FakeTI(try_number=2)})  # cleared by hand: always runs the job
    assert submitted == ["register_table"] * 3
    task.execute(context={"ti": FakeTI()})
    assert submitted == ["register_table"] * 3


# ---------------------------------------------------------------------------------------------
# 10. the replay DAG: one maintenance DAG, triggered by hand with the topic as a param

REPLAY_CATALOG = """\
topics:
  - name: payments
    freshness_sla: 15m
    spark_conf: {spark.sql.shuffle.partitions: "3"}
  - name: audit
    freshness_sla: 1h
    parsed: false
  - name: clicks
    freshness_sla: 1h
"""


@pytest.fixture
def replay_bag(monkeypatch, tmp_path) -> DagBag:
    catalog = tmp_path / "topics.yaml"
    catalog.write_text(REPLAY_CATALOG)
    set_catalog(monkeypatch, catalog, tmp_path / "lake", strict=True)
    bag = parse_dags()
    assert bag.import_errors == {}
    return bag


def test_replay_dag_is_manual_one_run_at_a_time_and_offers_only_parsed_topics(replay_bag):
    dag = replay_bag.dags[REPLAY_DAG_ID]
    assert isinstance(dag.timetable, NullTimetable)  # schedule=None: triggered by hand only
    assert dag.max_active_runs == 1
    assert dag.catchup is False
    assert not dag.deadline
    assert "kafkalake" in dag.tags
    params = dag.params.dump()
    assert params == {"topic": "clicks", "as_of_version": None, "as_of_timestamp": None}
    schema = dag.params.get_param("topic").schema
    assert schema["enum"] == ["clicks", "payments"]  # the bronze-only topic has nothing to replay
    assert dag.params.get_param("as_of_version").schema["minimum"] == 0
    doc = dag.doc_md
    for words in ("as of", "after", "one Delta commit", "never written", "checkpoint lock", "`RUNBOOK.md`"):
        assert words in doc, words


def test_replay_task_runs_the_replay_job_in_the_spark_pool_with_the_retry_policy(replay_bag):
    dag = replay_bag.dags[REPLAY_DAG_ID]
    assert dag.task_ids == ["replay"]
    task = dag.get_task("replay")
    assert isinstance(task, SparkSubmitOperator)
    assert (task.pool, task.pool_slots) == (SPARK_POOL, 1)
    assert task._conn_id == "spark_default"
    assert task.packages is None
    assert Path(task.application).name == "replay_topic.py"
    assert Path(task.application).is_file()
    assert task.retries == RETRIES
    assert task.retry_policy.serialize() == retry_policy().serialize()
    # A bad param or a half-written ingest fails at once; a running ingest is waited out.
    assert task.retry_policy.evaluate(BadConfigError("bad"), 1, 4).action is RetryAction.FAIL
    assert task.retry_policy.evaluate(IngestUnfinishedError("later"), 1, 4).action is RetryAction.FAIL
    assert task.retry_policy.evaluate(CheckpointLockedError("busy"), 1, 4).action is RetryAction.RETRY


@pytest.mark.parametrize(
    ("params", "args"),
    [
        ({"topic": "payments", "as_of_version": None, "as_of_timestamp": None}, []),
        ({"topic": "payments", "as_of_version": 7, "as_of_timestamp": ""}, ["--as-of-version", "7"]),
        (
            {"topic": "payments", "as_of_version": None, "as_of_timestamp": "2026-11-22T10:00:00Z"},
            ["--as-of-timestamp", "2026-11-22T10:00:00Z"],
        ),
    ],
)
def test_replay_task_submits_the_chosen_topic_with_its_spark_settings(monkeypatch, replay_bag, params, args):
    task = replay_bag.dags[REPLAY_DAG_ID].get_task("replay")
    monkeypatch.setattr(submit, "jar_files", lambda conf: [])
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[1]"}))
    seen: dict[str, Any] = {}

    def submit_instead_of_running(self, context):
        seen["command"] = self._get_hook()._build_spark_submit_command(self.application)

    monkeypatch.setattr(SparkSubmitOperator, "execute", submit_instead_of_running)
    guard = ParseGuard()
    with guard.watch():
        task.execute(context={"params": params})

    command = seen["command"]
    assert command[command.index("--name") + 1] == "kafkalake-replay_topic-payments"
    assert "spark.sql.shuffle.partitions=3" in command  # the topic's own spark_conf
    job = command.index(task.application)
    assert command[job + 1 :] == ["--topic", "payments", *args]
    assert guard.queries == [] and guard.network == []


def test_a_catalog_without_parsed_topics_has_no_replay_dag(monkeypatch, tmp_path):
    catalog = tmp_path / "topics.yaml"
    catalog.write_text("topics:\n  - name: audit\n    freshness_sla: 1h\n    parsed: false\n")
    set_catalog(monkeypatch, catalog, tmp_path / "lake", strict=True)
    assert parse_dags().dag_ids == ["ingest_audit"]


# ---------------------------------------------------------------------------------------------
# 11. backfills and the guarded re-ingest (kafkalake.core.run_mode)


@pytest.mark.parametrize("expected", POLICY_TOPICS, ids=POLICY_IDS)
def test_every_dag_offers_the_reingest_params_off_by_default(policy_bag, expected):
    params = policy_bag.dags[expected.dag_id].params
    assert params["reingest_from"] is None
    assert params["confirm_reingest"] is False
    assert "ISO timestamp" in params.get_param("reingest_from").description


def test_a_backfill_run_skips_the_ingest_without_asking_kafka(caplog):
    from kafkalake.airflow.tasks import check_new_offsets

    guard = ParseGuard()
    with guard.watch(), caplog.at_level("INFO"):
        run = check_new_offsets(
            "payments",
            "/nonexistent/checkpoint",
            "no_such_connection",  # looked up, it would fail: a backfill run never gets that far
            dag_run=SimpleNamespace(run_type="backfill"),
            params={"reingest_from": "2026-01-01T00:00:00Z", "confirm_reingest": True},
        )

    assert run is False
    assert guard.lookups == [] and guard.network == []
    assert "backfill run: not ingesting" in caplog.text and "checkpoint-driven" in caplog.text


def test_the_pre_flight_runs_the_job_on_an_unreadable_checkpoint_instead_of_failing(monkeypatch, tmp_path):
    from kafkalake.airflow.tasks import check_new_offsets

    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "extra": KAFKA_EXTRA}))
    # Retention has deleted the first 10 offsets; the table read up to 100 of them.
    monkeypatch.setattr(kafka_offsets, "watermarks", lambda config, topic: {0: (10, 120)})
    checkpoint = tmp_path / "checkpoint"
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "commits").mkdir()
    (checkpoint / "offsets" / "0").write_text("")  # cut short by a power loss
    (checkpoint / "commits" / "0").write_text('v1\n{"nextBatchWatermarkMs":0}')

    # Read as nothing committed, the 10 deleted offsets were reported lost: offsets_expired, no retry.
    assert check_new_offsets("payments", str(checkpoint), "kafka_default") is True


def test_a_corrupt_checkpoint_is_left_to_the_job_which_rebuilds_it(monkeypatch, tmp_path, caplog):
    """The job reads a checkpoint it cannot parse as missing and rebuilds its position from the
    table (start_plan.checkpoint_facts); the pre-flight and the lag read before the job must not
    fail the run first, or no run ever gets to the rebuild."""
    from kafkalake.airflow import tasks

    checkpoint = tmp_path / "orders" / "_kafkalake" / "checkpoint"
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "commits").mkdir()
    (checkpoint / "offsets" / "0").write_text('v1\n{"batchWatermarkMs":0}\n{"orders":{"0":1')  # cut short
    (checkpoint / "commits" / "0").write_text('v1\n{"nextBatchWatermarkMs":0}')
    monkeypatch.setattr(tasks, "kafka_config_for", lambda conn_id: {})
    monkeypatch.setattr(kafka_offsets, "watermarks", lambda config, topic: {0: (0, 10)})

    with caplog.at_level("WARNING"):
        assert tasks.check_new_offsets("orders", str(checkpoint), "kafka_default") is True
    assert "cannot be read" in caplog.text
    topic = SimpleNamespace(name="orders", checkpoint_path=str(checkpoint), starting_offsets="earliest")
    assert run_metrics_emit.lag_now({}, topic) is None  # unknown: a metric never fails the run


def test_a_cleared_ingest_task_of_a_backfill_run_still_does_not_ingest(ingest_task):
    from airflow.sdk.exceptions import AirflowSkipException

    with pytest.raises(AirflowSkipException, match="backfill run: not ingesting"):
        ingest_task.execute(context={"dag_run": SimpleNamespace(run_type="backfill"), "params": {}})


def test_a_confirmed_manual_run_hands_the_reingest_time_to_the_job(monkeypatch, ingest_task):
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "extra": KAFKA_EXTRA}))
    seen: dict[str, Any] = {}
    monkeypatch.setattr(
        SparkSubmitOperator, "execute", lambda self, context: seen.update(args=list(self.application_args))
    )
    params = {"reingest_from": "2026-01-01T01:00:00+01:00", "confirm_reingest": True}

    ingest_task.execute(context={"dag_run": SimpleNamespace(run_type="manual"), "params": params})

    assert seen["args"] == ["--topic", "payments", "--reingest-from", "2026-01-01T00:00:00+00:00"]


@pytest.mark.parametrize("run_type", ["scheduled", "manual"])
def test_without_a_confirmed_reingest_the_job_gets_its_usual_arguments(monkeypatch, ingest_task, run_type):
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "extra": KAFKA_EXTRA}))
    seen: dict[str, Any] = {}
    monkeypatch.setattr(
        SparkSubmitOperator, "execute", lambda self, context: seen.update(args=list(self.application_args))
    )
    params = {"reingest_from": "2026-01-01T00:00:00Z" if run_type == "scheduled" else None}

    ingest_task.execute(context={"dag_run": SimpleNamespace(run_type=run_type), "params": params})

    assert seen["args"] == ["--topic", "payments"]
