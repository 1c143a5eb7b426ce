"""A topic's DAG, run through Airflow against the real broker, Spark and Delta.

The tests run in order and share one topic: first no events at all, then 10,000 events, then 5,000
more, then nothing new. The runs with 10,000 events and with nothing new send their run metrics to
a StatsD server in the test (Airflow's ``[metrics] statsd_on``), which checks them against the
tables read back; the run history's rows are checked against the tables last.
"""

from __future__ import annotations

import re
import subprocess
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from kafkalake.config.catalog import load_catalog
from kafkalake.config.tables import topic_tables
from kafkalake.config.topic import TopicConfig
from kafkalake.dev import local_airflow, producer
from kafkalake.dev.broker import LocalKafka
from kafkalake.dev.producer import Record
from kafkalake.lake import run_history
from kafkalake.launch import jobs
from kafkalake.launch.job_host import ENV_JOB_HOST
from kafkalake.launch.spark_conf import ENV_DRIVER_JAVA_OPTIONS

from .conftest import C1_ONLY
from .helpers import (
    StatsdReceiver,
    assert_contents,
    assert_exactly_once,
    metric_values,
    offsets_read_by_runs,
    read_rows,
    started_a_job,
    table_version,
)

pytestmark = pytest.mark.integration

TOPIC = "it-events"

# Keys and values a byte-exact store must keep as they are.
ODD_RECORDS = [
    Record(None, None, 0),
    Record(b"", b"", 1),
    Record(None, b"", 2),
    Record(b"", None, 0),
    Record(b"\xff\xfe\x00", b"\x80\x81\xfe\xff", 1),
    Record(b"\xc3\x28", b'{"broken": "\xe2\x28\xa1"}', 2),
    Record(b"k", b'{"ok": 1}', 0, headers=[("trace", b"\x00\x01\xff"), ("empty", b""), ("none", None)]),
    Record("ключ".encode(), "значение ✓".encode(), 1),
]


def json_events(start: int, count: int) -> list[Record]:
    return [
        Record(f"user-{i % 101}".encode(), f'{{"seq": {i}, "kind": "click"}}'.encode(), i % 3)
        for i in range(start, start + count)
    ]


@pytest.fixture(scope="module")
def topic(catalog_file: Path, lake: Path, kafka: LocalKafka) -> TopicConfig:
    config = load_catalog(catalog_file, lake).topic(TOPIC)
    producer.create_topic(kafka.bootstrap_servers, TOPIC, partitions=3)
    return config


@pytest.fixture(scope="module")
def produced() -> dict[tuple[int, int], Record]:
    """Every record produced by this module, by where it landed."""
    return {}


@pytest.fixture(scope="module")
def statsd() -> Iterator[StatsdReceiver]:
    receiver = StatsdReceiver()
    yield receiver
    receiver.close()


@pytest.fixture(scope="module")
def airflow_env(airflow_env: dict[str, str]) -> dict[str, str]:
    """The shared environment without the job host: this module's runs are spark-submits, one
    driver JVM each, whose peak memory the run history holds. Their queries compile as Spark's
    defaults have them (the suite's other JVMs interpret them: conftest.INTERPRETED), so the
    suite's flagship DAG runs run what production runs."""
    env = {key: value for key, value in airflow_env.items() if key != ENV_JOB_HOST}
    return {**env, ENV_DRIVER_JAVA_OPTIONS: C1_ONLY}


@pytest.fixture(scope="module")
def metrics_env(airflow_env: dict[str, str], statsd: StatsdReceiver) -> dict[str, str]:
    """The DAG runs' environment with Airflow's StatsD metrics on, sent to the test's receiver."""
    return {
        **airflow_env,
        "AIRFLOW__METRICS__STATSD_ON": "True",
        "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
        "AIRFLOW__METRICS__STATSD_PORT": str(statsd.port),
    }


def topic_metrics(statsd: StatsdReceiver) -> dict[tuple[str, str], float]:
    """This module's topic's metrics received since the last call, Airflow's prefix and ours removed."""
    return metric_values(statsd.drain(), f"airflow.kafkalake.{TOPIC}.")


def newest_ms(rows: list[dict[str, Any]]) -> int:
    newest: datetime = max(r["kafka_timestamp"] for r in rows)
    return round(newest.timestamp() * 1000)


def produce(kafka: LocalKafka, records: list[Record], produced: dict[tuple[int, int], Record]) -> None:
    spots = producer.produce(kafka.bootstrap_servers, TOPIC, records)
    assert len(spots) == len(records)
    produced.update(zip(spots, records, strict=True))


def test_first_run_on_an_empty_topic_leaves_an_empty_table(airflow_env, topic):
    run = local_airflow.test_dag(airflow_env, topic.dag_id, sync=False)

    assert run.task_states == {
        "check_new_offsets": "success",
        "ingest": "success",
        "refresh_schema": "success",
        "register_table": "success",
        "maintain_table": "skipped",  # not due: the table is new
    }
    assert "first run: no checkpoint yet" in run.output
    assert read_rows(Path(topic.path)) == []
    assert DeltaTable(topic.path).metadata().configuration.get("delta.appendOnly") == "true"


def test_first_events_land_once_each(metrics_env, statsd, kafka, topic, produced):
    produce(kafka, json_events(0, 10_000 - len(ODD_RECORDS)) + ODD_RECORDS, produced)
    statsd.drain()

    run = local_airflow.test_dag(metrics_env, topic.dag_id, sync=False)

    assert run.task_states == {
        "check_new_offsets": "success",
        "ingest": "success",
        "refresh_schema": "success",
        "register_table": "success",
        "maintain_table": "skipped",  # not due: the table is new
    }
    rows = read_rows(Path(topic.path))
    assert len(rows) == 10_000
    assert {r["partition"] for r in rows} == {0, 1, 2}
    assert_exactly_once(rows, TOPIC, kafka.bootstrap_servers)
    assert_contents(rows, produced)
    # The same run parsed the JSON values; the odd records are dead letters with their reason.
    parsed = read_rows(Path(topic.parsed_path))
    dead = read_rows(Path(topic.dead_letter_path))
    assert len(parsed) + len(dead) == 10_000
    assert len(parsed) >= 10_000 - len(ODD_RECORDS) and all(r["reason"] for r in dead)

    # Run metrics: what the tables hold, as StatsD gauges, in XCom and in the task log.
    sent = topic_metrics(statsd)
    true_bytes = sum(len(r["key"] or b"") + len(r["value"] or b"") for r in rows)
    assert sent[("rows", "g")] == 10_000
    assert sent[("bytes", "g")] == true_bytes
    assert sent[("dead_letters", "g")] == len(dead) > 0
    assert sent[("lag_before", "g")] == 10_000  # the empty first run left a checkpoint at 0
    assert sent[("lag", "g")] == 0
    assert {sent[(f"partition_lag.{p}", "g")] for p in range(3)} == {0}
    assert sent[("batches", "g")] >= 1
    assert 0 <= sent[("freshness_seconds", "g")] < 900
    assert sent[("duration", "ms")] > sent[("processing", "ms")] > 0
    xcom = local_airflow.xcom_value(Path(metrics_env["AIRFLOW_HOME"]), run, "ingest", "run_metrics")
    assert xcom["rows"] == 10_000 and xcom["bytes"] == true_bytes
    assert xcom["dead_letter_count"] == len(dead)
    assert xcom["parsed_rows"] == len(parsed)
    # The table was empty: each partition's lag before was every row it now holds.
    per_partition = Counter(r["partition"] for r in rows)
    assert xcom["lag_before"] == {str(p): n for p, n in per_partition.items()} and xcom["lag"] == 0
    assert xcom["newest_timestamp_ms"] == newest_ms(rows)
    assert "run metrics of topic it-events" in run.output
    assert "landed:    10,000 rows" in run.output


def test_next_run_adds_exactly_the_new_events(airflow_env, kafka, topic, produced):
    before = {(r["partition"], r["offset"]) for r in read_rows(Path(topic.path))}
    produce(kafka, json_events(10_000, 5_000), produced)

    run = local_airflow.test_dag(airflow_env, topic.dag_id, sync=False)

    rows = read_rows(Path(topic.path))
    assert len(rows) == 15_000
    new = {(r["partition"], r["offset"]) for r in rows} - before
    assert len(new) == 5_000
    assert_exactly_once(rows, TOPIC, kafka.bootstrap_servers)
    assert_contents(rows, produced)
    # One JVM for the whole run: the ingest job refreshed the schema in its own Spark application,
    # and every table was registered by the runs before.
    assert run.output.count("Spark-Submit cmd") == 1, run.output[-5000:]
    assert "done in the ingest job's Spark application (no JVM started): topic it-events:" in run.output
    assert "every table of topic it-events is registered already (no JVM started)" in run.output


def test_idle_run_launches_no_spark_job_and_adds_no_version(metrics_env, statsd, kafka, topic):
    version = table_version(Path(topic.path))
    statsd.drain()

    run = local_airflow.test_dag(metrics_env, topic.dag_id, sync=False)

    assert run.task_states == {
        "check_new_offsets": "success",
        "ingest": "skipped",
        "refresh_schema": "skipped",
        "register_table": "skipped",
        "maintain_table": "skipped",  # not due: the table is new
    }
    assert not started_a_job(run.output)
    assert "nothing new since the last run" in run.output
    assert "no table maintenance due (no Spark job started)" in run.output
    assert table_version(Path(topic.path)) == version
    rows = read_rows(Path(topic.path))
    assert len(rows) == 15_000

    # An idle run still reports: nothing landed, no lag, and how old the newest record is, which
    # the Delta log's statistics give without a Spark job.
    sent = topic_metrics(statsd)
    assert sent[("rows", "g")] == 0
    assert sent[("lag", "g")] == 0
    assert sent[("freshness_seconds", "g")] > 0
    assert ("duration", "ms") not in sent
    xcom = local_airflow.xcom_value(
        Path(metrics_env["AIRFLOW_HOME"]), run, "check_new_offsets", "run_metrics"
    )
    assert xcom["ingested"] is False
    assert xcom["newest_timestamp_ms"] == newest_ms(rows)
    assert "nothing: no new offsets in Kafka" in run.output


def test_the_run_history_holds_each_run_as_the_tables_received_it(kafka, topic):
    """The history (read back with delta-rs) of the four runs above: what each landed, read and
    left, against the tables themselves."""
    runs = run_history.read(topic.history_path)
    assert {r.topic for r in runs} == {TOPIC} and {r.dag_id for r in runs} == {topic.dag_id}
    assert [r.started_at for r in runs] == sorted(r.started_at for r in runs)
    ingests = [r for r in runs if r.task_id == "ingest"]
    assert [(r.kind, r.outcome, r.failure_kind) for r in ingests] == [("ingest", "success", None)] * 3
    assert [r.rows for r in ingests] == [0, 10_000, 5_000]
    rows = read_rows(Path(topic.path))
    # Each offset bronze holds was read by exactly one run, as the rows' offsets_read say.
    assert offsets_read_by_runs(ingests) == Counter((TOPIC, r["partition"], r["offset"]) for r in rows)
    assert sum(r.bytes for r in ingests) == sum(len(r["key"] or b"") + len(r["value"] or b"") for r in rows)
    parsed = read_rows(Path(topic.parsed_path))
    dead = read_rows(Path(topic.dead_letter_path))
    assert sum(r.parsed_rows for r in ingests) == len(parsed)
    dead_by_reason = Counter(r["reason"] for r in dead)
    assert sum((Counter(r.dead_letters) for r in ingests), Counter()) == dead_by_reason
    newest = max(r["kafka_timestamp"] for r in rows)
    for run in ingests[1:]:
        assert run.jvm_count == 1 and run.lag_records == 0 and run.lag_seconds == 0.0
        # The driver JVM's peak resident memory: more than an idle JVM's, less than the machine.
        assert run.driver_peak_memory_bytes is not None and 2**27 < run.driver_peak_memory_bytes < 2**35
        assert run.schema_version is not None and run.schema_version >= 1
        assert run.data_age_seconds is not None and run.data_age_seconds >= 0
        assert (
            run.duration_seconds is not None
            and 0 < run.duration_seconds <= (run.ended_at - run.started_at).total_seconds()
        )
    assert ingests[-1].newest_timestamp == newest
    idle = runs[-1]
    assert (idle.kind, idle.outcome, idle.task_id, idle.rows, idle.jvm_count) == (
        "idle",
        "idle",
        "check_new_offsets",
        0,
        0,
    )
    assert idle.offsets_read == "{}" and idle.lag_records == 0 and idle.newest_timestamp == newest
    assert idle.data_age_seconds is not None and idle.data_age_seconds > ingests[-1].data_age_seconds
    # No other kind of row: the refresh was done in the ingest's JVM, care was not due, and the
    # registrations that started their own job each have one.
    assert {r.kind for r in runs} <= {"ingest", "idle", "register"}
    assert all(r.jvm_count == 1 and r.outcome == "success" for r in runs if r.kind == "register")


def test_every_registered_table_is_read_by_name_from_a_new_spark_session(catalog_file, lake, topic):
    # A separate JVM: nothing of the registering session survives but the metastore itself.
    cmd = jobs.command("show_table", topic.name, catalog=catalog_file, lake=lake)
    shown = subprocess.run(
        cmd, env=jobs.environment(catalog_file, lake), capture_output=True, text=True, timeout=300
    )
    assert shown.returncode == 0, shown.stderr[-3000:]
    # show_table prints "table=<name>", then "rows=<count>" for each table it read by name.
    by_name = dict(re.findall(r"^table=(\S+)\nrows=(\d+)", shown.stdout, re.MULTILINE))
    by_path = {t.name: str(len(read_rows(Path(t.location)))) for t in topic_tables(topic)}
    assert [t.kind for t in topic_tables(topic)] == ["bronze", "parsed", "dead_letter", "latest"]
    assert by_name == by_path, shown.stdout[-3000:]
    assert by_name[topic.qualified_table] == "15000"
    assert int(by_name[topic.parsed_table]) + int(by_name[topic.dead_letter_table]) == 15_000
    assert int(by_name[topic.latest_table]) >= 101  # one row per key: user-0 … user-100 at least
