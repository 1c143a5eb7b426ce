"""A topic's DAG, run through Airflow against the real broker, Spark and Delta.

The tests run in order and share one topic: first no events at all, then 10,000 events, then 5,000
more, then nothing new.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from deltalake import DeltaTable
from kafkalake import local_airflow, producer, spark_jobs
from kafkalake.broker import LocalKafka
from kafkalake.catalog import TopicConfig, load_catalog
from kafkalake.producer import Record
from kafkalake.tables import topic_tables

from .helpers import assert_contents, assert_exactly_once, read_rows, table_version

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


def test_first_events_land_once_each(airflow_env, kafka, topic, produced):
    produce(kafka, json_events(0, 10_000 - len(ODD_RECORDS)) + ODD_RECORDS, produced)

    run = local_airflow.test_dag(airflow_env, topic.dag_id, sync=False)

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


def test_next_run_adds_exactly_the_new_events(airflow_env, kafka, topic, produced):
    before = {(r["partition"], r["offset"]) for r in read_rows(Path(topic.path))}
    produce(kafka, json_events(10_000, 5_000), produced)

    local_airflow.test_dag(airflow_env, topic.dag_id, sync=False)

    rows = read_rows(Path(topic.path))
    assert len(rows) == 15_000
    new = {(r["partition"], r["offset"]) for r in rows} - before
    assert len(new) == 5_000
    assert_exactly_once(rows, TOPIC, kafka.bootstrap_servers)
    assert_contents(rows, produced)


def test_idle_run_launches_no_spark_job_and_adds_no_version(airflow_env, kafka, topic):
    version = table_version(Path(topic.path))

    run = local_airflow.test_dag(airflow_env, topic.dag_id, sync=False)

    assert run.task_states == {
        "check_new_offsets": "success",
        "ingest": "skipped",
        "refresh_schema": "skipped",
        "register_table": "skipped",
        "maintain_table": "skipped",  # not due: the table is new
    }
    assert "Spark-Submit cmd" not in run.output
    assert "nothing new since the last run" in run.output
    assert "no table maintenance due (no Spark job started)" in run.output
    assert table_version(Path(topic.path)) == version
    assert len(read_rows(Path(topic.path))) == 15_000


def test_every_registered_table_is_read_by_name_from_a_new_spark_session(catalog_file, lake, topic):
    # A separate JVM: nothing of the registering session survives but the metastore itself.
    cmd = spark_jobs.command("show_table", topic.name, catalog=catalog_file, lake=lake)
    shown = subprocess.run(
        cmd, env=spark_jobs.environment(catalog_file, lake), capture_output=True, text=True, timeout=300
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
