"""Guarded re-ingest (gap repair) against the real broker, Spark and Delta.

The topic is landed by its stream, then rows go missing from its tables (deleted with delta-rs, as a
bronze restore or lost files would leave them), then more records arrive that the stream has not
read yet. A re-ingest from a Kafka timestamp must fill exactly the gaps, leave the unread records to
the stream, and write nothing when run again. In-process first (the session's SparkSession, the
same code the job runs), then once through Airflow with the DAG's params, then refused when Kafka
has deleted the start of the window.
"""

from __future__ import annotations

import signal
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient
from deltalake import DeltaTable

from kafkalake.cli import run_job
from kafkalake.config.catalog import load_catalog
from kafkalake.config.tables import topic_tables
from kafkalake.config.topic import TopicConfig
from kafkalake.core import kill_points
from kafkalake.core.errors import ReingestRefusedError
from kafkalake.dev import local_airflow, producer
from kafkalake.dev.broker import LocalKafka
from kafkalake.dev.producer import Record
from kafkalake.lake.checkpoint import read_checkpoint
from kafkalake.launch import jobs
from kafkalake.spark.reingest import reingest

from .helpers import assert_exactly_once, kafka_spots, newest_spots, read_rows, run_ingest, run_to_end

pytestmark = pytest.mark.integration

TOPIC = "it-reingest"
PARTITIONS = 3


def events(start: int, count: int) -> list[Record]:
    """JSON events on 17 keys; every 50th is malformed (a dead letter)."""
    return [
        Record(
            f"k{i % 17}".encode(),
            b"{not json" if i % 50 == 0 else f'{{"seq": {i}}}'.encode(),
            i % PARTITIONS,
        )
        for i in range(start, start + count)
    ]


@pytest.fixture(scope="module")
def topic(catalog_file: Path, lake: Path, kafka: LocalKafka) -> TopicConfig:
    producer.create_topic(kafka.bootstrap_servers, TOPIC, partitions=PARTITIONS)
    return load_catalog(catalog_file, lake).topic(TOPIC)


@pytest.fixture(scope="module")
def since() -> datetime:
    """A time before the module's first record: a re-ingest from it covers the whole topic."""
    return datetime.now(UTC) - timedelta(seconds=5)


def delete_rows(path: str, predicate: str) -> int:
    """Remove rows from a table, append-only or not, as a restore to an older copy would."""
    table = DeltaTable(path)
    append_only = table.metadata().configuration.get("delta.appendOnly") == "true"
    if append_only:
        table.alter.set_table_properties({"delta.appendOnly": "false"})
    deleted = int(table.delete(predicate)["num_deleted_rows"])
    if append_only:
        DeltaTable(path).alter.set_table_properties({"delta.appendOnly": "true"})
    return deleted


def spots_of(rows: list[dict[str, Any]]) -> Counter[tuple[int, int]]:
    return Counter(
        (r["_kafka"]["partition"], r["_kafka"]["offset"]) if "_kafka" in r else (r["partition"], r["offset"])
        for r in rows
    )


def table_versions(topic: TopicConfig) -> dict[str, int]:
    return {t.kind: DeltaTable(t.location).version() for t in topic_tables(topic)}


def committed(topic: TopicConfig) -> set[tuple[int, int]]:
    """Every (partition, offset) the checkpoint says the tables hold."""
    state = read_checkpoint(Path(topic.checkpoint_path), TOPIC)
    assert state is not None
    return {(p, o) for p, end in state.committed.items() for o in range(end)}


def assert_tables_agree(topic: TopicConfig, expected: set[tuple[int, int]]) -> None:
    """Bronze holds ``expected`` once each; parsed + dead letters hold the same, once each; the
    latest table has each key's last parsed record."""
    bronze = spots_of(read_rows(Path(topic.path)))
    assert set(bronze) == expected and max(bronze.values()) == 1
    parsed_rows = read_rows(Path(topic.parsed_path))
    both = spots_of(parsed_rows) + spots_of(read_rows(Path(topic.dead_letter_path)))
    assert set(both) == expected and max(both.values()) == 1
    latest = {
        r["_kafka"]["key"]: (r["_kafka"]["partition"], r["_kafka"]["offset"])
        for r in read_rows(Path(topic.latest_path))
    }
    assert latest == newest_spots(kafka_spots(parsed_rows))


def test_reingest_fills_each_tables_gaps_once_and_leaves_unread_records_to_the_stream(
    spark, kafka, topic, since
):
    bootstrap = kafka.bootstrap_servers
    producer.produce(bootstrap, TOPIC, events(0, 900))
    run_ingest(spark, topic, bootstrap)
    landed = committed(topic)
    assert len(landed) == 900
    # Gaps: bronze loses 70 records of partition 1; the parsed tables lose partition 2's first 30
    # (parsed rows and dead letters alike) and every dead letter of partition 0.
    assert delete_rows(topic.path, "partition = 1 AND offset >= 50 AND offset < 120") == 70
    lost_parsed = delete_rows(topic.parsed_path, "_kafka.partition = 2 AND _kafka.offset < 30")
    lost_parsed += delete_rows(topic.dead_letter_path, "(partition = 2 AND offset < 30) OR partition = 0")
    assert lost_parsed > 30
    # Records the stream has not read yet: the re-ingest must leave them to it.
    producer.produce(bootstrap, TOPIC, events(900, 150))

    outcome = reingest(spark, topic, {"bootstrap.servers": bootstrap}, since)

    assert outcome.window.records == 900  # from offset 0 up to the checkpoint, not to Kafka's end
    assert (outcome.bronze_rows, outcome.parsed_rows) == (70, lost_parsed)
    assert_tables_agree(topic, landed)

    # The same re-ingest again: nothing is missing, so no table gets a new version.
    versions = table_versions(topic)
    again = reingest(spark, topic, {"bootstrap.servers": bootstrap}, since)
    assert (again.bronze_rows, again.parsed_rows) == (0, 0)
    assert table_versions(topic) == versions

    # The stream then lands the 150 new records, once: the checkpoint was never touched.
    run_ingest(spark, topic, bootstrap)
    assert_exactly_once(read_rows(Path(topic.path)), TOPIC, bootstrap)
    assert_tables_agree(topic, committed(topic))
    assert len(committed(topic)) == 1050


def test_trigger_with_config_runs_the_reingest_through_airflow(airflow_env, kafka, topic, since):
    expected = committed(topic)
    assert delete_rows(topic.path, "partition = 0 AND offset < 40") == 40

    run = local_airflow.test_dag(
        airflow_env,
        topic.dag_id,
        sync=False,
        # The re-ingest is under test, not the jobs that follow it (each a Spark start-up).
        mark_success="^(refresh_schema|register_table)$",
        conf={"reingest_from": since.isoformat(), "confirm_reingest": True},
    )

    assert run.task_states["ingest"] == "success"
    assert "re-ingest window: 1050 records" in run.output
    assert "--reingest-from" in run.output
    assert "40 rows to bronze, 0 to the parsed and dead-letter tables" in run.output
    assert_tables_agree(topic, expected)
    assert committed(topic) == expected


def test_a_reingest_killed_between_its_bronze_and_parsed_commits_is_safe_to_run_again(
    spark, kafka, topic, since, catalog_file, lake
):
    expected = committed(topic)
    assert delete_rows(topic.path, "partition = 2 AND offset < 25") == 25
    lost_parsed = delete_rows(topic.parsed_path, "_kafka.partition = 2 AND _kafka.offset < 25")
    lost_parsed += delete_rows(topic.dead_letter_path, "partition = 2 AND offset < 25")
    assert lost_parsed == 25
    env = {**jobs.environment(catalog_file, lake), kill_points.ENV_KILL_AT: "ingest:after_bronze_commit"}

    # The gap fill's bronze commit lands, then the job dies before the parsed side's (on the
    # worker's job host, which goes on once the JVM holds nothing of it: helpers.run_to_end).
    with run_job.kafka_settings(kafka.bootstrap_servers, env) as e:
        killed = run_to_end(
            "ingest_topic",
            TOPIC,
            catalog=catalog_file,
            lake=lake,
            env=e,
            extra_args=["--reingest-from", since.isoformat()],
        )
    assert killed.returncode in (137, -signal.SIGKILL), killed.stdout[-3000:] + killed.stderr[-3000:]
    bronze = spots_of(read_rows(Path(topic.path)))
    assert set(bronze) == expected and max(bronze.values()) == 1  # bronze filled, once

    # The run again in the session: the job's own re-ingest (jobs/ingest_topic.py calls it) on what
    # the killed job left.
    again = reingest(spark, topic, {"bootstrap.servers": kafka.bootstrap_servers}, since)
    assert (again.bronze_rows, again.parsed_rows) == (0, lost_parsed)
    assert_tables_agree(topic, expected)  # the parsed side filled on the rerun, nothing twice
    assert committed(topic) == expected


def test_reingest_from_before_what_kafka_still_holds_is_refused_writing_nothing(spark, kafka, topic, since):
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    for future in admin.delete_records([TopicPartition(TOPIC, 1, 10)]).values():
        future.result(timeout=30)
    versions = table_versions(topic)

    with pytest.raises(ReingestRefusedError) as refused:
        reingest(spark, topic, {"bootstrap.servers": kafka.bootstrap_servers}, since)

    assert "partition 1 starts at offset 10" in str(refused.value)
    assert str(refused.value).startswith("[reingest_refused]")
    assert table_versions(topic) == versions
