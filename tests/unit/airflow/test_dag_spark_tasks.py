"""The Spark tasks' submission: ``local[*]`` when no Spark connection is defined, never the
provider's YARN default; Kafka secrets in a private file, never on the command line; the retry
policy: which errors fail at once, which retry."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import BaseHook
from airflow.sdk.definitions.retry_policy import RetryAction
from airflow.sdk.exceptions import AirflowException, AirflowNotFoundException

from kafkalake.airflow.dag_factory import retry_policy
from kafkalake.airflow.tasks import KafkalakeSparkSubmitOperator
from kafkalake.config.catalog import load_catalog
from kafkalake.core import run_metrics
from kafkalake.core.errors import (
    BadConfigError,
    BrokerUnreachableError,
    CatalogError,
    DriverLostError,
    KafkaConfigError,
    OffsetsExpiredError,
    TopicMissingError,
    TransientError,
)
from kafkalake.kafka import client_config as kafka_client
from kafkalake.launch import handover, submit
from kafkalake.launch.spark_conf import topic_conf

from .dag_helpers import (
    CATALOGS,
    KAFKA_EXTRA,
    PASSWORD,
    ParseGuard,
    parse_dags,
    set_catalog,
    unset_env_for_test,
)

# ---------------------------------------------------------------------------------------------
# no YARN fallback


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
# secrets never on the command line


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
    monkeypatch.setattr(submit, "jar_files", lambda conf, **_: [jar])

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
# the retry policy: which errors fail at once


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
    monkeypatch.setattr(submit, "jar_files", lambda conf, **_: [])
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "host": "b:9092"}))
    with pytest.raises(OffsetsExpiredError, match=r"\[offsets_expired\] topic 'payments': gone") as raised:
        ingest_task.execute(context={})
    assert isinstance(raised.value.__cause__, AirflowException)
    assert ingest_task.retry_policy.evaluate(raised.value, 1, 4).action is RetryAction.FAIL


def test_catalog_values_are_never_rendered_as_jinja(monkeypatch, tmp_path):
    """Airflow renders an operator's template fields before it runs; kafkalake's Spark tasks have
    none, so a catalog value like ``{{ conn.kafka_default.password }}`` reaches Spark as written."""
    set_catalog(monkeypatch, CATALOGS / "jinja_in_spark_conf.yaml", tmp_path / "lake", strict=True)
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "password": "p4ss"}))
    dag = parse_dags().dags["ingest_payments"]
    for task in dag.tasks:
        if isinstance(task, KafkalakeSparkSubmitOperator):
            assert task.template_fields == ()
            task.render_template_fields(context={"conn": BaseHook, "var": {"value": {"secret": "s3"}}})
            assert task.conf["spark.app.label"] == "{{ conn.kafka_default.password }}", task.task_id
            assert "-Dlabel={{ var.value.secret }}" in task.conf["spark.driver.extraJavaOptions"]


def test_each_spark_task_has_the_topics_settings_in_a_dict_of_its_own(monkeypatch, tmp_path):
    """A DAG's Spark tasks share the topic's settings, made once for the DAG: each task's are the
    whole of them, and a task that changes its own leaves the others' alone."""
    set_catalog(monkeypatch, CATALOGS / "jinja_in_spark_conf.yaml", tmp_path / "lake", strict=True)
    dag = parse_dags().dags["ingest_payments"]
    topic = load_catalog(CATALOGS / "jinja_in_spark_conf.yaml", tmp_path / "lake").topic("payments")
    spark_tasks = [t for t in dag.tasks if isinstance(t, KafkalakeSparkSubmitOperator)]
    assert len(spark_tasks) >= 3

    for task in spark_tasks:
        assert task.conf == topic_conf(topic, tmp_path / "lake"), task.task_id
    spark_tasks[0].conf["spark.app.label"] = "changed"
    assert all(t.conf["spark.app.label"] == "{{ conn.kafka_default.password }}" for t in spark_tasks[1:])
