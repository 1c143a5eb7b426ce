"""State you can lose: the checkpoint deleted, the table restored, bronze deleted with its checkpoint.

The tables record the Kafka offsets they hold in their own Delta logs, so each run after the loss
rebuilds its position from them: every offset once in bronze, and once across the parsed and
dead-letter tables, with no gap. Real broker, Spark and Delta; tables read back with delta-rs.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions

from kafkalake.airflow.tasks import check_topic_identity
from kafkalake.config.catalog import load_catalog
from kafkalake.config.parsed import ParsedConfig
from kafkalake.config.topic import TopicConfig
from kafkalake.core.errors import BrokerUnreachableError, TopicRecreatedError
from kafkalake.core.run_metrics import XCOM_KEY as METRICS_XCOM_KEY
from kafkalake.dev import local_airflow, producer
from kafkalake.dev.local_airflow import DagRunError
from kafkalake.dev.producer import Record
from kafkalake.dev.standalone_airflow import wait_for
from kafkalake.kafka.offsets import topic_id
from kafkalake.lake import parsed_backlog
from kafkalake.lake.start_plan import plan_start
from kafkalake.lake.table_position import read_position

from .helpers import assert_exactly_once, make_topic, read_rows, table_version
from .helpers import run_ingest as run

pytestmark = pytest.mark.integration

NAME = "it-lost-state"
#: The follow-up tasks (their own tests cover them): marked successful, not run.
NOT_REGISTERED = "refresh_schema|register_table|maintain_table"


def produce(bootstrap: str, start: int, count: int) -> None:
    records = [
        Record(f"k{i % 13}".encode(), json.dumps({"n": i}).encode() if i % 29 else b"[", i % 2)
        for i in range(start, start + count)
    ]
    producer.produce(bootstrap, NAME, records)


def assert_every_table_holds_each_offset_once(topic: TopicConfig, bootstrap: str, total: int) -> None:
    bronze = read_rows(Path(topic.path))
    assert len(bronze) == total
    assert_exactly_once(bronze, NAME, bootstrap)
    parsed = read_rows(Path(topic.parsed_path))
    dead = read_rows(Path(topic.dead_letter_path))
    spots = [(r["_kafka"]["partition"], r["_kafka"]["offset"]) for r in parsed]
    spots += [(r["partition"], r["offset"]) for r in dead]
    assert sorted(spots) == sorted((r["partition"], r["offset"]) for r in bronze)
    assert parsed_backlog.read(topic) is None


def test_losing_the_checkpoint_or_restoring_the_table_loses_and_duplicates_nothing(spark, kafka, tmp_path):
    topic = make_topic(tmp_path, NAME, ParsedConfig(latest_by_key=True), max_offsets=300)
    producer.create_topic(kafka.bootstrap_servers, NAME, partitions=2)
    bootstrap = kafka.bootstrap_servers
    produce(bootstrap, 0, 300)
    run(spark, topic, bootstrap)
    after_first = table_version(Path(topic.path))
    position = read_position(topic.path)
    assert position is not None and sum(position.end.values()) == 300  # recorded in the Delta log

    # 1. The checkpoint is deleted by hand, and the topic gets a third partition meanwhile: the
    #    position rebuilt from the table names two partitions, where Spark's Kafka source wants every
    #    one named (it stopped every run of such a topic, asserting so).
    shutil.rmtree(topic.checkpoint_path)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_partitions([NewPartitions(NAME, 3)])[NAME].result(timeout=30)
    produce(bootstrap, 300, 200)
    third = [Record(f"k{i % 13}".encode(), json.dumps({"n": i}).encode(), 2) for i in range(20)]
    producer.produce(bootstrap, NAME, third)
    writer = run(spark, topic, bootstrap)
    assert "checkpoint is missing" in writer.recovered
    assert (
        list(Path(topic.checkpoint_path).parent.glob("checkpoint.replaced-*")) == []
    )  # nothing to set aside
    assert_every_table_holds_each_offset_once(topic, bootstrap, 520)
    assert sum(r["partition"] == 2 for r in read_rows(Path(topic.path))) == 20

    # 2. Bronze is restored to an older version; the parsed tables are not.
    spark.sql(f"RESTORE TABLE delta.`{topic.path}` TO VERSION AS OF {after_first}")
    assert len(read_rows(Path(topic.path))) == 300
    produce(bootstrap, 500, 100)
    writer = run(spark, topic, bootstrap)
    assert "restored to an older version" in writer.recovered
    assert len(list(Path(topic.checkpoint_path).parent.glob("checkpoint.replaced-*"))) == 1
    assert_every_table_holds_each_offset_once(topic, bootstrap, 620)

    # 3. Bronze is deleted with its checkpoint inside; the parsed tables are kept. This looks like a
    #    first run: bronze lands everything Kafka holds again, the parsed tables nothing twice.
    shutil.rmtree(topic.path)
    produce(bootstrap, 600, 50)
    run(spark, topic, bootstrap)
    assert_every_table_holds_each_offset_once(topic, bootstrap, 670)
    latest = read_rows(Path(topic.latest_path))
    assert len(latest) == 13 and len({r["_kafka"]["key"] for r in latest}) == 13


def test_a_recreated_topic_is_never_silently_skipped_whether_or_not_it_refilled(spark, kafka, tmp_path):
    name = "it-recreated"
    bootstrap = kafka.bootstrap_servers
    config = {"bootstrap.servers": bootstrap}
    topic = make_topic(tmp_path, name, ParsedConfig(enabled=False))
    producer.create_topic(bootstrap, name, partitions=1)
    producer.produce(bootstrap, name, [Record(None, f"{i}".encode(), 0) for i in range(100)])
    first_id = topic_id(config, name)
    assert first_id
    run(spark, topic, bootstrap)  # a job run by hand, no ID handed: it asks Kafka itself
    position = read_position(topic.path)
    assert position is not None and position.topic_id == first_id and position.end == {0: 100}
    check_topic_identity(config, name, topic.path)  # the same topic: no complaint

    # Kafka does not say the ID (here: no broker answers): the check fails loudly and is retried,
    # in the pre-flight and in the job alike, instead of being skipped.
    silent = {"bootstrap.servers": "127.0.0.1:1"}
    unknown = re.escape(
        f"Kafka did not say the topic's ID, and the table's offsets (version {position.version}"
    )
    with pytest.raises(BrokerUnreachableError, match=unknown) as raised:
        check_topic_identity(silent, name, topic.path)
    assert (
        f"were read from topic ID {first_id}" in str(raised.value)
        and raised.value.kind == "broker_unreachable"
    )
    with pytest.raises(BrokerUnreachableError, match=unknown):
        plan_start(topic, None)

    admin = AdminClient(config)  # kept: a collected client cancels its requests
    admin.delete_topics([name])[name].result(timeout=30)
    wait_for(lambda: topic_id(config, name) is None, what="the topic to be deleted", timeout=60, every=0.5)
    producer.create_topic(bootstrap, name, partitions=1)
    new_id = topic_id(config, name)
    assert new_id and new_id != first_id
    # 40 records: not yet refilled past the table's offset 100; then 210 more: refilled past it.
    for more in (40, 210):
        producer.produce(bootstrap, name, [Record(None, b"new", 0) for _ in range(more)])
        with pytest.raises(
            TopicRecreatedError, match=re.escape(f"re-created in Kafka: its topic ID is now {new_id}")
        ):
            check_topic_identity(config, name, topic.path)  # the pre-flight, before any JVM
        with pytest.raises(TopicRecreatedError, match=re.escape(f"read from topic ID {first_id}")):
            run(spark, topic, bootstrap, new_id)  # and the job, should it be started anyway
    assert len(read_rows(Path(topic.path))) == 100  # nothing was written


def test_a_recreated_topic_that_accepts_data_loss_is_refused_too_when_the_job_is_run_by_hand(
    spark, kafka, tmp_path
):
    # No topic ID handed (the job started by hand): the job asks Kafka for it. Spark, told not to
    # fail on data loss, would plan nothing for a log shorter than where the stream was and go on
    # from its end, so the new log's first records would never be read: the job refuses instead,
    # as the DAG's pre-flight does, and writes nothing. (Where Kafka has no topic IDs at all, the
    # lost offsets are recorded in the gaps table: kafka.gaps.lost_ranges, tests/unit/kafka.)
    name = "it-recreated-lossy"
    bootstrap = kafka.bootstrap_servers
    config = {"bootstrap.servers": bootstrap}
    topic = replace(make_topic(tmp_path, name, ParsedConfig(enabled=False)), fail_on_data_loss=False)
    producer.create_topic(bootstrap, name, partitions=1)
    producer.produce(bootstrap, name, [Record(None, f"{i}".encode(), 0) for i in range(100)])
    run(spark, topic, bootstrap)
    first_id = read_position(topic.path).topic_id  # type: ignore[union-attr]
    assert first_id == topic_id(config, name)
    admin = AdminClient(config)  # kept: a collected client cancels its requests
    admin.delete_topics([name])[name].result(timeout=30)
    wait_for(lambda: topic_id(config, name) is None, what="the topic to be deleted", timeout=60, every=0.5)
    producer.create_topic(bootstrap, name, partitions=1)
    producer.produce(bootstrap, name, [Record(None, b"new", 0) for _ in range(40)])
    with pytest.raises(TopicRecreatedError, match=re.escape(f"read from topic ID {first_id}")):
        run(spark, topic, bootstrap)
    assert len(read_rows(Path(topic.path))) == 100  # nothing was written
    assert not Path(topic.gaps_path).exists()


def test_a_batch_cut_between_its_parsed_and_dead_letter_commits_then_a_lost_checkpoint_loses_nothing(
    spark, kafka, tmp_path
):
    # Two faults in a row: a run killed after a batch's parsed commit and before its dead-letter
    # commit, then the checkpoint lost before the rerun. The position is rebuilt from the tables,
    # so the parsed commit must not claim the batch whole: only the batch's last commit records it.
    name = "it-half-batch"
    bootstrap = kafka.bootstrap_servers
    topic = make_topic(tmp_path, name, ParsedConfig(), max_offsets=300)
    producer.create_topic(bootstrap, name, partitions=2)
    records = [Record(None, json.dumps({"n": i}).encode() if i % 29 else b"[", i % 2) for i in range(600)]
    producer.produce(bootstrap, name, records)
    run(spark, topic, bootstrap)
    dead_log = Path(topic.dead_letter_path) / "_delta_log"
    last = max(int(f.stem) for f in dead_log.glob("*.json"))
    dead_before = len(read_rows(Path(topic.dead_letter_path)))
    assert dead_before == 21  # 0, 29, ..., 580
    # The kill: the dead-letter table's commit of the last batch never happened.
    for leftover in [
        *dead_log.glob(f"{last:020d}.*"),
        *dead_log.glob(f".{last:020d}.*"),
    ]:  # Hadoop's .crc too
        leftover.unlink()
    assert len(read_rows(Path(topic.dead_letter_path))) < dead_before
    shutil.rmtree(topic.checkpoint_path)
    writer = run(spark, topic, bootstrap)
    assert "checkpoint is missing" in writer.recovered
    bronze = read_rows(Path(topic.path))
    assert_exactly_once(bronze, name, bootstrap)
    spots = [(r["_kafka"]["partition"], r["_kafka"]["offset"]) for r in read_rows(Path(topic.parsed_path))]
    dead = read_rows(Path(topic.dead_letter_path))
    assert len(dead) == dead_before
    spots += [(r["partition"], r["offset"]) for r in dead]
    assert sorted(spots) == sorted((r["partition"], r["offset"]) for r in bronze)


# --- the same two losses end to end: the topic's DAG on the real broker --------------------------

DAG_TOPIC = "it-lost-dag"  # parsed, latest_by_key, in the session catalog
RECREATED_DAG_TOPIC = "it-recreated-dag"  # bronze only, in the session catalog


def test_a_dag_run_after_the_checkpoint_was_deleted_rebuilds_its_position_and_says_so(
    spark, kafka, airflow_env, catalog_file, lake
):
    bootstrap = kafka.bootstrap_servers
    topic = load_catalog(catalog_file, lake).topic(DAG_TOPIC)
    producer.create_topic(bootstrap, DAG_TOPIC, partitions=2)
    records = [
        Record(f"k{i % 7}".encode(), json.dumps({"n": i}).encode() if i % 23 else b"[", i % 2)
        for i in range(200)
    ]
    producer.produce(bootstrap, DAG_TOPIC, records[:120])
    run(spark, topic, bootstrap)  # landed before the loss (in-process: the DAG run below is the point)
    shutil.rmtree(topic.checkpoint_path)
    producer.produce(bootstrap, DAG_TOPIC, records[120:])

    result = local_airflow.test_dag(airflow_env, topic.dag_id, sync=False, mark_success=NOT_REGISTERED)

    assert result.task_states["ingest"] == "success"
    assert "the checkpoint is missing, empty or unreadable" in result.output  # the task log says so
    metrics = local_airflow.xcom_value(Path(airflow_env["AIRFLOW_HOME"]), result, "ingest", METRICS_XCOM_KEY)
    assert "checkpoint is missing" in metrics["recovered"]
    assert metrics["rows"] == 80  # only what was new: the table's own record said where to go on
    bronze = read_rows(Path(topic.path))
    assert len(bronze) == 200
    assert_exactly_once(bronze, DAG_TOPIC, bootstrap)
    parsed = read_rows(Path(topic.parsed_path))
    spots = [(r["_kafka"]["partition"], r["_kafka"]["offset"]) for r in parsed]
    spots += [(r["partition"], r["offset"]) for r in read_rows(Path(topic.dead_letter_path))]
    assert sorted(spots) == sorted((r["partition"], r["offset"]) for r in bronze)


def test_a_dag_run_on_a_recreated_topic_fails_at_once_with_topic_recreated(
    spark, kafka, airflow_env, catalog_file, lake
):
    bootstrap = kafka.bootstrap_servers
    config = {"bootstrap.servers": bootstrap}
    topic = load_catalog(catalog_file, lake).topic(RECREATED_DAG_TOPIC)
    producer.create_topic(bootstrap, RECREATED_DAG_TOPIC, partitions=1)
    producer.produce(bootstrap, RECREATED_DAG_TOPIC, [Record(None, b"old", 0) for _ in range(60)])
    first_id = topic_id(config, RECREATED_DAG_TOPIC)
    run(spark, topic, bootstrap, first_id)

    admin = AdminClient(config)
    admin.delete_topics([RECREATED_DAG_TOPIC])[RECREATED_DAG_TOPIC].result(timeout=30)
    wait_for(
        lambda: topic_id(config, RECREATED_DAG_TOPIC) is None,
        what="the topic to be deleted",
        timeout=60,
        every=0.5,
    )
    producer.create_topic(bootstrap, RECREATED_DAG_TOPIC, partitions=1)
    producer.produce(bootstrap, RECREATED_DAG_TOPIC, [Record(None, b"new", 0) for _ in range(90)])  # refilled

    with pytest.raises(DagRunError) as raised:
        local_airflow.test_dag(airflow_env, topic.dag_id, sync=False, mark_success=NOT_REGISTERED)
    result = raised.value.result
    assert result is not None and result.task_states["check_new_offsets"] == "failed"
    assert result.task_states["ingest"] == "upstream_failed"  # no JVM started
    assert local_airflow.task_tries(Path(airflow_env["AIRFLOW_HOME"]), topic.dag_id, "check_new_offsets") == (
        "failed",
        1,
    )  # not retryable: one try
    assert "TopicRecreatedError" in result.output
    assert (
        f"re-created in Kafka: its topic ID is now {topic_id(config, RECREATED_DAG_TOPIC)}" in result.output
    )
    assert f"read from topic ID {first_id}" in result.output
    assert len(read_rows(Path(topic.path))) == 60  # nothing of the new topic was written
