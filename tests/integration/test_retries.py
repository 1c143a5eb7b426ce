"""Retries on-call can trust: transient failures retry with backoff, the others fail at once.

The tests go through Airflow (``airflow dags test``, which runs retries in-process and really waits
for the retry delay). Their topics have a 3m freshness SLA: a 1 minute run interval, which caps the
retry backoff at 1 minute (the catalog's documented schedule rule), so a retry costs one minute.
The tasks after ``ingest`` are marked successful instead of run: not under test, each a JVM.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from kafkalake.cli import run_job
from kafkalake.config.catalog import load_catalog
from kafkalake.config.topic import TopicConfig
from kafkalake.core import kill_points
from kafkalake.core.errors import EXIT_CODES, Kind
from kafkalake.core.run_metrics import ENV_METRICS_FILE, JobMetrics
from kafkalake.dev import local_airflow, producer
from kafkalake.dev.broker import LocalKafka
from kafkalake.dev.local_airflow import DagRunError
from kafkalake.dev.producer import Record
from kafkalake.dev.standalone_airflow import wait_for
from kafkalake.kafka.offsets import topic_id, watermarks
from kafkalake.lake import run_history
from kafkalake.lake.run_history import RunRecord
from kafkalake.launch import jobs

from .helpers import assert_exactly_once, offsets_read_by_runs, read_rows, run_to_end

pytestmark = pytest.mark.integration

#: Tasks not under test, marked successful instead of run (each would cost a JVM).
NOT_REGISTERED = "refresh_schema|register_table|maintain_table"


def planned_batches(checkpoint: Path) -> int:
    folder = checkpoint / "offsets"
    return len([p for p in folder.iterdir() if p.name.isdigit()]) if folder.is_dir() else 0


def records(count: int, partitions: int, start: int = 0) -> list[Record]:
    return [
        Record(str(i).encode(), f'{{"n": {i}}}'.encode(), i % partitions) for i in range(start, start + count)
    ]


def failed_then_retried(topic: TopicConfig, events: int, kafka: LocalKafka, kind: Kind) -> list[RunRecord]:
    """Bronze holds the ``events`` once each, and the ingest's history rows are its failed try (of
    ``kind``) and its successful retry, which between them landed and read every bronze row once."""
    rows = read_rows(Path(topic.path))
    assert len(rows) == events
    assert_exactly_once(rows, topic.name, kafka.bootstrap_servers)
    tries = [r for r in run_history.read(topic.history_path) if r.task_id == "ingest"]
    assert [(r.try_number, r.outcome, r.failure_kind) for r in tries] == [
        (1, "failed", str(kind)),
        (2, "success", None),
    ]
    assert sum(r.rows for r in tries) == events
    assert offsets_read_by_runs(tries) == Counter((topic.name, r["partition"], r["offset"]) for r in rows)
    return tries


# ---------------------------------------------------------------------------------------------
# a. transient: the broker goes away during the ingest task and comes back

RETRY_TOPIC = "it-retry"  # max_offsets_per_trigger: 500, so the ingest runs for many micro-batches
RETRY_EVENTS = 2_500  # 5 micro-batches: the broker stops after the 2nd is planned


def test_broker_stopped_during_ingest_then_started_task_succeeds_on_retry_exactly_once(
    airflow_env, private_kafka: LocalKafka, catalog_file, lake, tmp_path
):
    """On a broker of the test's own (the run's shared broker serves the other tests meanwhile),
    which the DAG's Kafka connection names."""
    kafka = private_kafka
    topic = load_catalog(catalog_file, lake).topic(RETRY_TOPIC)
    producer.create_topic(kafka.bootstrap_servers, RETRY_TOPIC, partitions=2)
    producer.produce(kafka.bootstrap_servers, RETRY_TOPIC, records(RETRY_EVENTS, 2))
    home = Path(airflow_env["AIRFLOW_HOME"])
    checkpoint = Path(topic.checkpoint_path)
    output = tmp_path / "dags-test.log"

    env = local_airflow.dags_test_environment(local_airflow.with_kafka(airflow_env, kafka.bootstrap_servers))
    run = local_airflow.start_airflow(
        env, *local_airflow.dags_test_args(topic.dag_id, NOT_REGISTERED), output=output
    )
    try:
        # The stream is running (micro-batches planned) when the broker goes away.
        wait_for(
            lambda: planned_batches(checkpoint) >= 2 or run.poll() is not None, what="ingest", timeout=240
        )
        assert run.poll() is None, output.read_text()[-5000:]
        assert local_airflow.task_tries(home, topic.dag_id, "ingest") == ("running", 1)
        stopped = time.monotonic()
        kafka.stop()
        try:
            # Bounded: the job's Kafka timeouts fail it in about a minute, it does not hang.
            wait_for(
                lambda: (
                    (local_airflow.task_tries(home, topic.dag_id, "ingest") or ("", 0))[0] == "up_for_retry"
                    or run.poll() is not None
                ),
                what="the first ingest attempt to fail",
                timeout=150,
            )
            failed_after = time.monotonic() - stopped
        finally:
            kafka.start()  # same object, same ports: the DAG's connection finds it again
        assert local_airflow.task_tries(home, topic.dag_id, "ingest") == ("up_for_retry", 1)
        assert run.wait(timeout=300) == 0, output.read_text()[-5000:]
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
        kafka.start()

    text = output.read_text()
    _run_id, state, tasks = local_airflow.latest_run(home, topic.dag_id)
    assert state == "success", tasks
    assert local_airflow.task_tries(home, topic.dag_id, "ingest") == ("success", 2)
    assert local_airflow.task_tries(home, topic.dag_id, "check_new_offsets") == ("success", 1)
    # The job named the failure itself and the policy retried it as transient.
    assert f"KAFKALAKE_FAILURE kind={Kind.BROKER_UNREACHABLE}" in text
    assert "Error code is: 75." in text
    assert "transient failure: retrying with exponential backoff" in text
    assert failed_after < 120, f"the job took {failed_after:.0f}s to give up on the broker"
    # The run history: the failed try with what it landed before the broker went, then the retry
    # with the rest; together, every row once.
    tries = failed_then_retried(topic, RETRY_EVENTS, kafka, Kind.BROKER_UNREACHABLE)
    assert tries[0].rows < RETRY_EVENTS
    assert len({r.run_id for r in tries}) == 1


# ---------------------------------------------------------------------------------------------
# a2. transient: the ingest job is killed by a signal after some micro-batches, then retried

KILLED_TOPIC = "it-retry-killed"  # max_offsets_per_trigger: 500
KILLED_EVENTS = 2_000  # 4 micro-batches


def test_a_killed_ingest_job_is_recorded_from_its_tables_and_its_retry_lands_the_rest_once(
    airflow_env, kafka: LocalKafka, catalog_file, lake
):
    """SIGKILL after bronze's commit of the 3rd micro-batch (kill point, 2 passes first), before the
    checkpoint records it. The job writes nothing as it dies; its task sees spark-submit exit 137,
    fails the try as job_killed (retried), and writes the try's history row from the tables' Delta
    logs. The retry replays the 3rd batch (bronze skips it: 1 pass) and lands the 4th (2 passes):
    the two rows add up to bronze, each offset once."""
    topic = load_catalog(catalog_file, lake).topic(KILLED_TOPIC)
    producer.create_topic(kafka.bootstrap_servers, KILLED_TOPIC, partitions=2)
    producer.produce(kafka.bootstrap_servers, KILLED_TOPIC, records(KILLED_EVENTS, 2))
    env = {
        **airflow_env,
        kill_points.ENV_KILL_AT: "ingest:after_bronze_commit",
        kill_points.ENV_KILL_AFTER: "2",
    }

    run = local_airflow.test_dag(env, topic.dag_id, sync=False, mark_success=NOT_REGISTERED, first_try=False)

    home = Path(airflow_env["AIRFLOW_HOME"])
    assert local_airflow.task_tries(home, topic.dag_id, "ingest") == ("success", 2)
    assert "was killed (SIGKILL, exit 137)" in run.output or "(SIGKILL, exit -9)" in run.output
    killed, retry = failed_then_retried(topic, KILLED_EVENTS, kafka, Kind.JOB_KILLED)
    # Three micro-batches reached bronze before the signal; the retry's replay of the third added none.
    assert (killed.rows, killed.batches, retry.rows) == (1_500, 3, 500)
    assert killed.jvm_count == 1 and killed.duration_seconds is not None


# ---------------------------------------------------------------------------------------------
# b. non-retryable: unread offsets expired in Kafka

EXPIRED_TOPIC = "it-expired"
PARTITIONS = 2
LANDED = 200  # 100 per partition
DELETED_UP_TO = {0: 150, 1: 100}  # partition 0 loses offsets 100..149; partition 1 loses nothing


@pytest.fixture(scope="module")
def expired_topic(airflow_env, kafka: LocalKafka, catalog_file, lake) -> TopicConfig:
    """A topic landed once, then more produced, then records past the checkpoint deleted.

    Kafka's retention does the same when a topic's retention.ms runs out before the DAG reads the
    records; the AdminClient's delete_records moves the earliest offset the same way, at once.
    """
    topic = load_catalog(catalog_file, lake).topic(EXPIRED_TOPIC)
    producer.create_topic(kafka.bootstrap_servers, EXPIRED_TOPIC, partitions=PARTITIONS)
    producer.produce(kafka.bootstrap_servers, EXPIRED_TOPIC, records(LANDED, PARTITIONS))
    local_airflow.test_dag(airflow_env, topic.dag_id, sync=False, mark_success=NOT_REGISTERED)
    assert len(read_rows(Path(topic.path))) == LANDED

    producer.produce(kafka.bootstrap_servers, EXPIRED_TOPIC, records(LANDED, PARTITIONS, start=LANDED))
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    deleted = admin.delete_records([TopicPartition(EXPIRED_TOPIC, p, o) for p, o in DELETED_UP_TO.items()])
    for future in deleted.values():
        future.result(timeout=30)
    marks = watermarks({"bootstrap.servers": kafka.bootstrap_servers}, EXPIRED_TOPIC)
    assert marks == {0: (150, 200), 1: (100, 200)}
    return topic


def test_expired_offsets_fail_the_run_at_once_and_the_log_says_what_to_do(airflow_env, expired_topic):
    home = Path(airflow_env["AIRFLOW_HOME"])
    started = time.monotonic()
    with pytest.raises(DagRunError) as raised:
        local_airflow.test_dag(airflow_env, expired_topic.dag_id, sync=False, mark_success=NOT_REGISTERED)
    took = time.monotonic() - started

    result = raised.value.result
    assert result is not None
    assert result.state == "failed"
    assert result.task_states["check_new_offsets"] == "failed"
    assert result.task_states["ingest"] == "upstream_failed"
    # No retry: one try, and no wait for the retry delays (1 minute each, 3 retries).
    assert local_airflow.task_tries(home, expired_topic.dag_id, "check_new_offsets") == ("failed", 1)
    assert took < 120, f"{took:.0f}s: did it wait for a retry?"
    log = result.output
    assert "Retry policy decision" in log
    assert "not retryable: failing at once" in log
    assert "OffsetsExpiredError" in log
    # What happened, where, how much; then what to do.
    assert (
        "[offsets_expired] topic 'it-expired': 50 records expired in Kafka before the table read them" in log
    )
    assert "partition 0: offsets 100..149 (50 records)" in log
    assert "partition 1:" not in log.split("records expired in Kafka", 1)[1].split("What to do")[0]
    assert "cannot be recovered from it" in log
    assert "set `fail_on_data_loss: false` on this topic in the catalog, run the DAG once" in log
    assert "Do NOT delete or move the checkpoint" in log
    # Nothing was written.
    assert len(read_rows(Path(expired_topic.path))) == LANDED
    # The history: the fixture's run that landed, then this one, failed in its pre-flight.
    landed, failed = run_history.read(expired_topic.history_path)
    assert (landed.kind, landed.outcome, landed.rows, run_history.records_read(landed.offsets_read)) == (
        "ingest",
        "success",
        LANDED,
        LANDED,
    )
    assert (
        failed.task_id,
        failed.kind,
        failed.outcome,
        failed.failure_kind,
        failed.rows,
        failed.jvm_count,
    ) == (
        "check_new_offsets",
        "ingest",
        "failed",
        str(Kind.OFFSETS_EXPIRED),
        0,
        0,
    )


def test_the_ingest_job_itself_reports_expired_offsets_with_its_exit_code(
    expired_topic, kafka, catalog_file, lake
):
    """Without the pre-flight (a run already under way when retention strikes), Spark's data-loss
    check fails the job; it says so in one line and exits with the non-retryable code."""
    with run_job.kafka_settings(kafka.bootstrap_servers, jobs.environment(catalog_file, lake)) as env:
        done = run_to_end(
            "ingest_topic", EXPIRED_TOPIC, catalog=catalog_file, lake=lake, env=env, timeout=300
        )

    output = done.stdout + done.stderr  # spark-submit hands on the driver's stderr as its stdout
    assert done.returncode == EXIT_CODES[Kind.OFFSETS_EXPIRED], output[-5000:]
    reported = [line for line in output.splitlines() if line.startswith("KAFKALAKE_FAILURE")]
    assert len(reported) == 1, output[-5000:]
    line = reported[0]
    assert line.startswith(
        f"KAFKALAKE_FAILURE kind={Kind.OFFSETS_EXPIRED} [offsets_expired] topic 'it-expired'"
    )
    assert "Could not read records in offset [100, " in line
    assert "for topic partition it-expired-0" in line
    assert "fail_on_data_loss: false" in line
    # The job's line is the last thing it says, after Spark has shut down (py4j's goodbye aside).
    assert line in "\n".join(done.stdout.splitlines()[-3:])
    assert len(read_rows(Path(expired_topic.path))) == LANDED


def test_with_fail_on_data_loss_false_the_loss_is_recorded_in_the_gaps_table_log_and_metrics(
    expired_topic, kafka, catalog_file, lake, tmp_path
):
    """The owner accepts the loss (the catalog says so): the run lands what Kafka still has, and what
    it could not read is in the gaps table, the log and the metrics, never silent."""
    accepting = tmp_path / "topics.yaml"
    accepting.write_text(
        catalog_file.read_text().replace(
            f"- name: {EXPIRED_TOPIC}\n", f"- name: {EXPIRED_TOPIC}\n    fail_on_data_loss: false\n"
        )
    )
    assert load_catalog(accepting, lake).topic(EXPIRED_TOPIC).fail_on_data_loss is False
    metrics_file = tmp_path / "metrics.json"
    base = {**jobs.environment(accepting, lake), ENV_METRICS_FILE: str(metrics_file)}
    with run_job.kafka_settings(kafka.bootstrap_servers, base) as env:
        done = run_to_end("ingest_topic", EXPIRED_TOPIC, catalog=accepting, lake=lake, env=env, timeout=300)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-5000:]

    rows = read_rows(Path(expired_topic.path))
    held = {(r["partition"], r["offset"]) for r in rows}
    assert len(held) == len(rows) == 350  # 200 landed before; 50 of partition 0's and 100 of 1's new ones
    assert held == {(p, o) for p in range(PARTITIONS) for o in range(200) if not (p == 0 and 100 <= o < 150)}
    gaps = read_rows(Path(expired_topic.gaps_path))
    assert [(g["partition"], g["first_offset"], g["end_offset"], g["offsets"]) for g in gaps] == [
        (0, 100, 150, 50)
    ]
    # No task handed it the topic ID: the job asked Kafka itself.
    assert gaps[0]["topic"] == EXPIRED_TOPIC
    assert gaps[0]["topic_id"] == topic_id({"bootstrap.servers": kafka.bootstrap_servers}, EXPIRED_TOPIC)
    assert "LOST 50 offsets that Kafka deleted before they were read" in output
    assert "partition 0: offsets 100..149 (50 offsets)" in output
    assert JobMetrics.from_json(metrics_file.read_text()).lost_offsets == 50
