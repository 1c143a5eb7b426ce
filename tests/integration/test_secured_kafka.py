"""The pipeline against a broker that only speaks TLS, authenticates everyone and enforces ACLs.

One broker for the module (:class:`kafkalake.dev.secured_broker.SecuredKafka`): SASL_SSL with
SCRAM-SHA-512 and an mTLS listener; the pipeline's principal ``lander`` may read only its topics.
Its own catalog and Airflow home, with one connection per mechanism in the documented form.

The SCRAM user's password is a canary, unique to this run: after a DAG run killed mid-job and a
whole DAG run, it must not be found in the task logs, Airflow's database (rendered fields, XCom,
serialized DAGs), the Spark event log, the lake, the temp folder, or any command line seen in
``ps`` while the runs went on.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from kafkalake.config.catalog import load_catalog
from kafkalake.core.errors import (
    AuthenticationFailedError,
    AuthorizationFailedError,
    TlsUntrustedError,
)
from kafkalake.core.job_failures import parse_failure_line
from kafkalake.dev import local_airflow, producer
from kafkalake.dev.broker import SMALL_LOAD_JAVA_OPTIONS
from kafkalake.dev.producer import Record
from kafkalake.dev.secured_broker import PIPELINE_USER, SecuredKafka, client_connection
from kafkalake.kafka import client_config
from kafkalake.kafka.offsets import watermarks
from kafkalake.launch import handover, jobs
from kafkalake.launch.job_host import ENV_JOB_HOST

from .helpers import PsWatcher, assert_exactly_once, files_containing, read_rows

pytestmark = [pytest.mark.integration, pytest.mark.secured]

SCRAM_TOPIC = "sec-scram"
MTLS_TOPIC = "sec-mtls"
DENIED_TOPIC = "sec-denied"  # exists, but no ACL lets the pipeline read it
#: The SCRAM user's password: unique to this run, so finding it anywhere is a leak.
CANARY = f"canary{uuid.uuid4().hex}"


def catalog_text(event_log: Path) -> str:
    return f"""\
topics:
  - name: {SCRAM_TOPIC}
    freshness_sla: 1h
    kafka_conn_id: kafka_scram
    parsed: false
    spark_conf:
      spark.eventLog.enabled: "true"
      spark.eventLog.dir: "file://{event_log}"
  - name: {MTLS_TOPIC}
    freshness_sla: 1h
    kafka_conn_id: kafka_mtls
    parsed: false
  - name: {DENIED_TOPIC}
    freshness_sla: 1h
    kafka_conn_id: kafka_scram
    parsed: false
"""


def records(start: int, count: int) -> list[Record]:
    return [Record(f"k{i}".encode(), f'{{"n": {i}}}'.encode(), i % 2) for i in range(start, start + count)]


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredKafka]:
    broker = SecuredKafka(
        tmp_path_factory.mktemp("secured-kafka"), java_options=SMALL_LOAD_JAVA_OPTIONS
    ).start()
    try:
        broker.add_scram_user(PIPELINE_USER, CANARY)
        for topic in (SCRAM_TOPIC, MTLS_TOPIC, DENIED_TOPIC):
            producer.create_topic(broker.admin_config(), topic, partitions=2)
        broker.allow_read(PIPELINE_USER, [SCRAM_TOPIC, MTLS_TOPIC])
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("secured")
    paths = {name: root / name for name in ("lake", "airflow", "tmp", "eventlog")}
    for path in paths.values():
        path.mkdir()
    paths["catalog"] = root / "topics.yaml"
    paths["catalog"].write_text(catalog_text(paths["eventlog"]))
    return paths


@pytest.fixture(scope="module")
def secured_env(secured: SecuredKafka, work: dict[str, Path]) -> Iterator[dict[str, str]]:
    env = local_airflow.environment(
        work["airflow"],
        kafka_bootstrap=secured.bootstrap_servers,
        catalog=work["catalog"],
        lake_root=work["lake"],
    )
    # spark-submit, not the worker's job host: what ps shows and what the runs leave behind is checked.
    env.pop(ENV_JOB_HOST, None)
    env["AIRFLOW_CONN_KAFKA_SCRAM"] = json.dumps(
        client_connection(secured.scram_config(PIPELINE_USER, CANARY))
    )
    env["AIRFLOW_CONN_KAFKA_MTLS"] = json.dumps(client_connection(secured.mtls_config()))
    # A temp folder of the runs' own, so what they leave behind can be searched exactly.
    env["TMPDIR"] = str(work["tmp"])
    env["KAFKALAKE_STRICT"] = "1"
    with local_airflow.served_home(env) as served:
        yield served


def key_line(secured: SecuredKafka) -> str:
    """A line of the mTLS client's private key: its secret, as text."""
    key = secured.pki.client(PIPELINE_USER).key.read_text()
    return next(line for line in key.splitlines() if len(line) == 64 and "-" not in line)


# ---------------------------------------------------------------------------------------------
# fast failures: each with its own kind, in seconds, from the pre-flight's client


def connection_config(secured: SecuredKafka, **changes: object) -> dict[str, str]:
    """librdkafka settings through the documented connection form, as the pre-flight gets them."""
    conn = client_connection(secured.scram_config(PIPELINE_USER, CANARY))
    extra = dict(conn["extra"])
    for key in ("login", "password"):
        if key in changes:
            conn[key] = changes.pop(key)
    extra.update(changes)
    return client_config.librdkafka_config(
        "kafka_scram", str(conn["host"]), int(conn["port"]), extra, str(conn["login"]), str(conn["password"])
    )


@pytest.mark.parametrize(
    ("changes", "topic", "error", "says"),
    [
        ({"password": "not-the-password"}, SCRAM_TOPIC, AuthenticationFailedError, "invalid credentials"),
        ({}, DENIED_TOPIC, AuthorizationFailedError, "authorization failed"),
        ({"ssl_ca_pem": None}, SCRAM_TOPIC, TlsUntrustedError, "certificate verify failed"),
    ],
    ids=["wrong password", "ACL-denied topic", "untrusted CA"],
)
def test_the_preflight_fails_fast_with_the_kind(secured, changes, topic, error, says):
    if "ssl_ca_pem" in changes:
        changes = {"ssl_ca_pem": secured.pki.other_ca.read_text()}
    config = connection_config(secured, **changes)
    started = time.monotonic()
    with pytest.raises(error) as excinfo:
        watermarks(config, topic, timeout=15)
    took = time.monotonic() - started
    assert took < 5, f"took {took:.1f}s: should not wait for the timeout"
    message = str(excinfo.value)
    assert says in message.lower()
    assert f"topic {topic!r}" in message and "NOT retrying" in message
    assert CANARY not in message


def test_a_dag_run_on_an_acl_denied_topic_fails_at_once_without_retrying(secured_env):
    topic = load_catalog(Path(secured_env["KAFKALAKE_CATALOG"]), Path(secured_env["KAFKALAKE_LAKE_ROOT"]))
    dag_id = topic.topic(DENIED_TOPIC).dag_id
    started = time.monotonic()
    with pytest.raises(local_airflow.DagRunError) as excinfo:
        local_airflow.test_dag(secured_env, dag_id, sync=False)
    took = time.monotonic() - started
    run = excinfo.value.result
    assert run is not None
    assert run.task_states["check_new_offsets"] == "failed"
    assert run.task_states["ingest"] in ("upstream_failed", None)
    assert "[authorization_failed]" in run.output
    state = local_airflow.task_tries(Path(secured_env["AIRFLOW_HOME"]), dag_id, "check_new_offsets")
    assert state == ("failed", 1), state  # no retry: the policy failed it at once
    assert took < 120


def test_the_job_reports_a_wrong_password_as_authentication_failed(secured, work, secured_env):
    """The Java side once: Spark's Kafka source meets the same refusal, the job names its kind."""
    config = connection_config(secured, password="not-the-password")
    java = client_config.java_client_config(config)
    catalog, lake = work["catalog"], work["lake"]
    cmd = jobs.command("ingest_topic", DENIED_TOPIC, catalog=catalog, lake=lake)
    with handover.config_file(java) as path:
        env = {**jobs.environment(catalog, lake), handover.ENV_CLIENT_CONFIG_FILE: str(path)}
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, check=False)
        assert not path.exists(), "the job deletes its settings file once read"
    assert done.returncode == 79, done.stderr[-3000:]
    reported = parse_failure_line(done.stdout + done.stderr)
    assert reported is not None, done.stdout[-2000:] + done.stderr[-2000:]
    assert reported.kind == "authentication_failed", reported.message
    assert "SaslAuthenticationException" in reported.message
    assert "not-the-password" not in done.stdout + done.stderr


# ---------------------------------------------------------------------------------------------
# whole DAG runs: every record once; the canary nowhere


def test_a_killed_run_leaves_no_credential_behind(secured, secured_env, work):
    """SIGKILL the whole `airflow dags test` (task and job) once the job has started: no finally runs."""
    producer.produce(secured.admin_config(), SCRAM_TOPIC, records(0, 40))
    dag_id = load_catalog(work["catalog"], work["lake"]).topic(SCRAM_TOPIC).dag_id
    tmp = work["tmp"]
    output = work["airflow"] / "killed-run.log"  # in AIRFLOW_HOME: searched by the next test too
    with PsWatcher() as ps:
        process = local_airflow.start_airflow(
            local_airflow.dags_test_environment(secured_env),
            *local_airflow.dags_test_args(dag_id),
            output=output,
        )
        try:
            deadline = time.monotonic() + 240
            written: set[Path] = set()
            # The task wrote the settings file; then the job read (and deleted) it.
            while not any(not any(d.iterdir()) for d in written if d.is_dir()):
                written |= {f.parent for f in tmp.glob("kafkalake-secrets-*/kafka-client.json")}
                assert process.poll() is None, (
                    f"the run ended before the job started:\n{output.read_text()[-3000:]}"
                )
                assert time.monotonic() < deadline, "the job never read its settings"
                time.sleep(0.05)
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(30)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
    assert files_containing(tmp, CANARY) == []
    assert not [line for line in ps.lines if CANARY in line]
    # The empty folder the killed task left is swept by the next writer on the machine.
    assert handover.sweep_stale(tmp)
    assert list(tmp.glob("kafkalake-secrets-*")) == []


def test_a_dag_run_over_sasl_ssl_scram_lands_every_record_once_and_leaks_nothing(secured, secured_env, work):
    producer.produce(secured.admin_config(), SCRAM_TOPIC, records(40, 60))
    topic = load_catalog(work["catalog"], work["lake"]).topic(SCRAM_TOPIC)
    try:
        landed_before = len(read_rows(Path(topic.path)))  # by the killed run, if it got that far
    except Exception:
        landed_before = 0
    with PsWatcher() as ps:
        run = local_airflow.test_dag(secured_env, topic.dag_id, sync=False)
    assert run.task_states["ingest"] == "success"
    rows = read_rows(Path(topic.path))
    assert_exactly_once(rows, SCRAM_TOPIC, secured.admin_config())
    assert len(rows) == 100

    assert ps.samples > 10
    assert not [line for line in ps.lines if CANARY in line]
    assert any("ingest_topic.py" in line for line in ps.lines), "ps never saw the job"
    assert CANARY not in run.output
    airflow_home = Path(secured_env["AIRFLOW_HOME"])
    # Logs, and the metadata DB: rendered fields, XCom, serialized DAGs, task instances.
    assert files_containing(airflow_home, CANARY) == []
    assert local_airflow.xcom_value(airflow_home, run, "ingest", "run_metrics")["rows"] == 100 - landed_before
    event_logs = list(work["eventlog"].iterdir())
    assert event_logs, "the topic's Spark event log is on: it must exist to be searched"
    assert files_containing(work["eventlog"], CANARY) == []
    assert files_containing(work["lake"], CANARY) == []
    assert files_containing(work["tmp"], CANARY) == []
    # The JAAS line was there to hide: Spark's redaction covers the Kafka source's option too.
    assert files_containing(work["eventlog"], "ScramLoginModule required username") == []


def test_a_dag_run_over_mutual_tls_lands_every_record_once(secured, secured_env, work):
    produced = producer.produce(secured.admin_config(), MTLS_TOPIC, records(0, 50))
    assert len(produced) == 50
    topic = load_catalog(work["catalog"], work["lake"]).topic(MTLS_TOPIC)
    run = local_airflow.test_dag(secured_env, topic.dag_id, sync=False)
    assert run.task_states["ingest"] == "success"
    rows = read_rows(Path(topic.path))
    assert_exactly_once(rows, MTLS_TOPIC, secured.admin_config())
    assert len(rows) == 50
    secret = key_line(secured)
    assert secret not in run.output
    assert files_containing(Path(secured_env["AIRFLOW_HOME"]), secret) == []
    assert files_containing(work["tmp"], secret) == []


def test_the_broker_keeps_its_admin_password_off_command_lines_and_out_of_readable_files(secured):
    # The storage format took the SCRAM passwords through an @-file, removed once java exited.
    assert not list(secured.directory.glob(".java-args-*"))
    for name in ("server.properties", "admin.password"):
        assert (secured.directory / name).stat().st_mode & 0o077 == 0, name
    assert secured.admin_password in (secured.directory / "server.properties").read_text()
    pid = secured.running_pid()
    assert pid is not None
    assert secured.admin_password.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes()
