"""The policy of every generated DAG: schedule and deadline from the SLA, retries and the retry
policy, owner, docs, task order, the Spark pool and priorities, execution timeouts, assets."""

from __future__ import annotations

import itertools
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.dag_processing.dagbag import DagBag
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import Asset, AsyncCallback, DeadlineReference
from airflow.sdk.definitions.retry_policy import ExceptionRetryPolicy, RetryAction
from airflow.serialization.serialized_objects import DagSerialization

from kafkalake.airflow.assets import topic_assets
from kafkalake.airflow.dag_factory import REPLAY_DAG_ID, RETRIES, retry_policy
from kafkalake.airflow.pools import DEFAULT_SPARK_SLOTS, SPARK_POOL
from kafkalake.airflow.sla_alerts import ENV_DEADLINE_ALERTS, ENV_WEBHOOK_CONN_ID
from kafkalake.airflow.tasks import MaintenanceOperator
from kafkalake.config.catalog import load_catalog
from kafkalake.config.schedule import run_interval, sla_plan
from kafkalake.core.durations import parse_duration
from kafkalake.core.errors import (
    OffsetsExpiredError,
)

from .dag_helpers import (
    DAGS_DIR,
    FOUR_DAG_IDS,
    FOUR_TOPICS,
    POLICY,
    POLICY_DEADLINES,
    POLICY_IDS,
    POLICY_TOPICS,
    REPO,
    TASK_ORDER,
    ParseGuard,
    forget_dag_modules,
    parse_dags,
    schedule_delta,
    set_catalog,
)

# ---------------------------------------------------------------------------------------------
# policy of every generated DAG


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
def test_doc_md_links_the_topics_freshness_page(policy_bag, expected):
    doc = policy_bag.dags[expected.dag_id].doc_md
    assert f"](/kafkalake/freshness/dags/{expected.dag_id})" in doc


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
# concurrency: one pool for every Spark job, the topic's priority decides who goes first


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
    forget_dag_modules()
    missing = DagBag(dag_folder=str(DAGS_DIR), safe_mode=True, known_pools={"default_pool"})
    assert {w.dag_id for w in missing.dag_warnings} == {*FOUR_DAG_IDS.values(), REPLAY_DAG_ID}
    for warning in missing.dag_warnings:
        assert warning.message == f"Dag '{warning.dag_id}' references non-existent pools: ['kafkalake_spark']"

    forget_dag_modules()
    present = DagBag(dag_folder=str(DAGS_DIR), safe_mode=True, known_pools={"default_pool", SPARK_POOL})
    assert present.dag_warnings == set()


# ---------------------------------------------------------------------------------------------
# assets: each table is an outlet of the task that writes it


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
