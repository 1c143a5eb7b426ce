"""A family of topics (the integration catalog's ``topic_pattern: it-fam-[a-z]+``, table
``it_family``) in one bronze table, through its DAG and its ingest job: three members land, an idle
run starts no JVM, a member created between two runs is picked up and a deleted one reported, a
SIGKILL mid-run and a rerun, a lost checkpoint rebuilt from the table, and a re-ingest that fills
gaps in two members. After each, every
(topic, partition, offset) Kafka holds is in bronze exactly once. Last, the deleted member created
again: the pre-flight stops the run (topic_recreated), no JVM; a full refresh of the family, and
every member lands again once; and with fail_on_data_loss false, a member's records Kafka deleted
before they were read are in the gaps table.

The DAG runs and the killed jobs are Airflow's and spark-submit's; the runs that only land (after
a kill, a lost checkpoint, a full refresh, a loss accepted) are the job's own run (IngestRun) in
the session's SparkSession, a JVM start each saved.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient
from deltalake import DeltaTable

from kafkalake.airflow.dag_factory import REPLAY_DAG_ID
from kafkalake.cli import full_refresh
from kafkalake.config.catalog import load_catalog
from kafkalake.config.topic import TopicConfig
from kafkalake.core import kill_points
from kafkalake.core.run_metrics import XCOM_KEY as METRICS_XCOM_KEY
from kafkalake.dev import local_airflow, producer
from kafkalake.dev.broker import LocalKafka
from kafkalake.dev.local_airflow import DagRunError
from kafkalake.dev.producer import Record
from kafkalake.dev.standalone_airflow import wait_for
from kafkalake.kafka.offsets import end_offsets, topic_id
from kafkalake.lake import run_history
from kafkalake.lake.table_position import read_position, standard_topic_id
from kafkalake.launch import jobs
from kafkalake.launch.handover import ENV_CLIENT_CONFIG_FILE, ENV_KEEP_CLIENT_CONFIG_FILE

from .helpers import (
    offsets_read_by_runs,
    read_rows,
    run_ingest,
    run_to_end,
    started_a_job,
    table_version,
)

pytestmark = [pytest.mark.integration, pytest.mark.families]

FAMILY = "it_family"
#: Partitions of each member; it-fam-d is created between the first runs, it-fam-c deleted.
MEMBERS = {"it-fam-a": 2, "it-fam-b": 1, "it-fam-c": 1}
NEW_MEMBER = "it-fam-d"
#: A DAG run registers nothing (the first would start a JVM for it); table care is not due.
NOT_REGISTERED = "register_table|maintain_table"


@pytest.fixture(scope="module")
def since() -> datetime:
    """A time before the module's first record: a re-ingest from it covers every member whole."""
    return datetime.now(UTC) - timedelta(seconds=5)


@pytest.fixture(scope="module")
def family(catalog_file: Path, lake: Path, kafka: LocalKafka, since: datetime) -> TopicConfig:
    config = load_catalog(catalog_file, lake).topic(FAMILY)
    for name, partitions in MEMBERS.items():
        producer.create_topic(kafka.bootstrap_servers, name, partitions=partitions)
        produce(kafka, name, 6, partitions)
    # Matches no member: the whole name must match, as with Spark's subscribePattern.
    producer.create_topic(kafka.bootstrap_servers, "it-fam-x1", partitions=1)
    produce(kafka, "it-fam-x1", 3, 1)
    return config


@pytest.fixture(scope="module")
def deleted() -> dict[str, int]:
    """Records of members deleted from Kafka, which the table keeps: {topic: rows}."""
    return {}


def in_one_batch(topic: TopicConfig) -> TopicConfig:
    """``topic`` without the catalog's 10 records a micro-batch, for an in-process run that only
    lands what is left: the DAG runs and the killed jobs keep the limit (a kill mid-run needs several
    batches); a run after them lands in one batch, not up to seven (each ~1 CPU-s), since no
    assertion counts its batches. A batch a kill left unfinished is run again as its checkpoint
    recorded it, whatever the limit."""
    return replace(topic, max_offsets_per_trigger=None)


def produce(kafka: LocalKafka, topic: str, count: int, partitions: int) -> None:
    records = [
        Record(f"{topic}-{i}".encode(), f'{{"n": {i}}}'.encode(), i % partitions) for i in range(count)
    ]
    assert len(producer.produce(kafka.bootstrap_servers, topic, records)) == count


def assert_every_spot_once(family: TopicConfig, kafka: LocalKafka, deleted: dict[str, int]) -> list[dict]:
    """Every (topic, partition, offset) of every member Kafka has is in bronze once; a deleted
    member's rows are there once each too; nothing else is."""
    rows = read_rows(Path(family.path))
    spots = Counter((r["topic"], r["partition"], r["offset"]) for r in rows)
    twice = [spot for spot, n in spots.items() if n > 1]
    assert not twice, f"landed more than once: {twice[:5]}"
    config = {"bootstrap.servers": kafka.bootstrap_servers}
    members = sorted({*MEMBERS, NEW_MEMBER} - set(deleted))  # it-fam-c may be back
    expected = {
        (t, p, o)
        for t in members
        if topic_id(config, t) is not None
        for p, end in end_offsets(config, t).items()
        for o in range(end)
    }
    kept = {spot for spot in spots if spot[0] in deleted}
    assert {t: sum(1 for s in kept if s[0] == t) for t in deleted} == deleted
    assert set(spots) - kept == expected
    return rows


def run_job(family: TopicConfig, catalog: Path, lake: Path, kafka: LocalKafka, tmp: Path, **env: str) -> int:
    settings = tmp / "kafka.json"
    settings.write_text(json.dumps({"bootstrap.servers": kafka.bootstrap_servers}))
    full_env = {
        **jobs.environment(catalog, lake),
        ENV_CLIENT_CONFIG_FILE: str(settings),
        ENV_KEEP_CLIENT_CONFIG_FILE: "1",
        **env,
    }
    # A job that kills itself at a named point needs no process of its own: the worker's job host
    # runs it (helpers.run_to_end) and goes on once the JVM holds nothing of it.
    return run_to_end("ingest_topic", family.name, catalog=catalog, lake=lake, env=full_env).returncode


def test_three_members_land_in_one_table_each_offset_once(airflow_env, kafka, family, deleted):
    run = local_airflow.test_dag(airflow_env, family.dag_id, sync=False, mark_success=NOT_REGISTERED)

    assert run.task_states["ingest"] == "success"
    rows = assert_every_spot_once(family, kafka, deleted)
    assert Counter(r["topic"] for r in rows) == {"it-fam-a": 6, "it-fam-b": 6, "it-fam-c": 6}
    # Each member's offsets and topic ID are in the table's Delta log.
    position = read_position(family.path)
    assert position is not None and position.members == {
        "it-fam-a": {0: 3, 1: 3},
        "it-fam-b": {0: 6},
        "it-fam-c": {0: 6},
    }
    config = {"bootstrap.servers": kafka.bootstrap_servers}
    assert position.member_ids == {t: standard_topic_id(topic_id(config, t) or "") for t in MEMBERS}


def test_an_idle_run_starts_no_jvm_and_adds_no_version(airflow_env, family):
    version = table_version(Path(family.path))

    run = local_airflow.test_dag(airflow_env, family.dag_id, sync=False, mark_success=NOT_REGISTERED)

    assert run.task_states["check_new_offsets"] == "success"
    assert run.task_states["ingest"] == "skipped"
    assert not started_a_job(run.output)
    assert "nothing new in any member since the last run" in run.output
    assert table_version(Path(family.path)) == version


def test_a_member_created_between_runs_is_read_and_a_deleted_one_reported(
    airflow_env, kafka, family, deleted
):
    config = {"bootstrap.servers": kafka.bootstrap_servers}
    admin = AdminClient(config)  # kept: a collected client cancels its requests
    admin.delete_topics(["it-fam-c"])["it-fam-c"].result(timeout=30)
    wait_for(
        lambda: topic_id(config, "it-fam-c") is None, what="it-fam-c to be deleted", timeout=60, every=0.5
    )
    deleted["it-fam-c"] = 6
    producer.create_topic(kafka.bootstrap_servers, NEW_MEMBER, partitions=2)
    produce(kafka, NEW_MEMBER, 5, 2)
    produce(kafka, "it-fam-a", 4, 2)

    run = local_airflow.test_dag(airflow_env, family.dag_id, sync=False, mark_success=NOT_REGISTERED)

    assert "it-fam-d: a new member, 5 records from 'earliest'" in run.output
    assert "members it-fam-c are not in Kafka" in run.output
    metrics = local_airflow.xcom_value(Path(airflow_env["AIRFLOW_HOME"]), run, "ingest", METRICS_XCOM_KEY)
    assert metrics["new_members"] == [NEW_MEMBER]
    assert metrics["missing_members"] == ["it-fam-c"]
    assert metrics["rows"] == 9
    rows = assert_every_spot_once(family, kafka, deleted)
    assert Counter(r["topic"] for r in rows)[NEW_MEMBER] == 5
    # The deleted member keeps its record (its re-creation would be told by a new topic ID).
    position = read_position(family.path)
    assert position is not None and position.members is not None
    assert position.members["it-fam-c"] == {0: 6} and "it-fam-c" in (position.member_ids or {})
    # The run history of the module's three DAG runs: what each read, per member, is what bronze holds.
    runs = run_history.read(family.history_path)
    assert [(r.topic, r.kind, r.outcome, r.rows) for r in runs] == [
        (FAMILY, "ingest", "success", 18),
        (FAMILY, "idle", "idle", 0),
        (FAMILY, "ingest", "success", 9),
    ]
    assert offsets_read_by_runs(runs) == Counter((r["topic"], r["partition"], r["offset"]) for r in rows)
    assert json.loads(runs[2].offsets_read)[NEW_MEMBER] == {"0": [0, 3], "1": [0, 2]}


def test_sigkill_mid_run_then_rerun_lands_every_offset_once(
    spark, catalog_file, lake, kafka, family, deleted, tmp_path
):
    for name, partitions in (("it-fam-a", 2), ("it-fam-b", 1), (NEW_MEMBER, 2)):
        produce(kafka, name, 12, partitions)  # 36 records: four batches of at most 10
    before = len(read_rows(Path(family.path)))

    # Killed right after its second batch's bronze commit, before the checkpoint records the batch.
    killed = run_job(
        family,
        catalog_file,
        lake,
        kafka,
        tmp_path,
        **{kill_points.ENV_KILL_AT: "ingest:after_bronze_commit", kill_points.ENV_KILL_AFTER: "1"},
    )
    assert killed in (-9, 137)  # SIGKILL: the job itself, or spark-submit reporting it
    partial = read_rows(Path(family.path))
    assert before < len(partial) < before + 36

    run_ingest(spark, in_one_batch(family), kafka.bootstrap_servers)
    assert len(assert_every_spot_once(family, kafka, deleted)) == before + 36


def test_a_lost_checkpoint_is_rebuilt_from_the_table(spark, kafka, family, deleted, tmp_path):
    produce(kafka, "it-fam-b", 3, 1)
    produce(kafka, NEW_MEMBER, 4, 2)
    shutil.move(family.checkpoint_path, tmp_path / "lost-checkpoint")

    run_ingest(spark, family, kafka.bootstrap_servers)

    rows = assert_every_spot_once(family, kafka, deleted)
    assert Counter(r["topic"] for r in rows)["it-fam-b"] == 6 + 12 + 3
    assert os.path.isdir(family.checkpoint_path)


def delete_rows(path: str, predicate: str) -> int:
    """Remove rows from bronze (append-only), as a restore to an older copy would."""
    DeltaTable(path).alter.set_table_properties({"delta.appendOnly": "false"})
    deleted = int(DeltaTable(path).delete(predicate)["num_deleted_rows"])
    DeltaTable(path).alter.set_table_properties({"delta.appendOnly": "true"})
    return deleted


def test_a_reingest_of_the_family_fills_each_members_gaps_once(airflow_env, kafka, family, deleted, since):
    in_d1 = sum(1 for r in read_rows(Path(family.path)) if (r["topic"], r["partition"]) == (NEW_MEMBER, 1))
    gone = "(topic = 'it-fam-a' AND partition = 0 AND offset < 3) OR (topic = 'it-fam-d' AND partition = 1)"
    assert delete_rows(family.path, gone) == 3 + in_d1

    run = local_airflow.test_dag(
        airflow_env,
        family.dag_id,
        sync=False,
        mark_success=NOT_REGISTERED,
        conf={"reingest_from": since.isoformat(), "confirm_reingest": True},
    )

    assert "--reingest-from" in run.output
    assert "re-ingest window of it-fam-a" in run.output and "re-ingest window of it-fam-d" in run.output
    assert "3 rows to bronze" in run.output and f"{in_d1} rows to bronze" in run.output
    assert_every_spot_once(family, kafka, deleted)


def test_a_member_deleted_and_created_again_stops_the_run_before_any_jvm(airflow_env, kafka, family):
    # it-fam-c's rows and topic ID are in the table (deleted in an earlier test); now it is back.
    producer.create_topic(kafka.bootstrap_servers, "it-fam-c", partitions=1)
    produce(kafka, "it-fam-c", 2, 1)
    version = table_version(Path(family.path))

    with pytest.raises(DagRunError) as raised:
        local_airflow.test_dag(airflow_env, family.dag_id, sync=False, mark_success=NOT_REGISTERED)

    result = raised.value.result
    assert result is not None and result.task_states["check_new_offsets"] == "failed"
    assert result.task_states["ingest"] == "upstream_failed"
    assert not started_a_job(result.output)
    assert "topic 'it-fam-c' was deleted and re-created in Kafka" in result.output
    assert table_version(Path(family.path)) == version


def test_a_full_refresh_of_the_family_lands_every_member_again_once(
    spark, catalog_file, lake, kafka, family, capsys, monkeypatch
):
    monkeypatch.setenv("KAFKALAKE_CATALOG", str(catalog_file))
    monkeypatch.setenv("KAFKALAKE_LAKE_ROOT", str(lake))
    args = ["--topic", family.name, "--bootstrap-servers", kafka.bootstrap_servers]

    # Every member Kafka has starts at offset 0, and the table holds no member Kafka lost (it-fam-c
    # is back): the old it-fam-c's rows go with the table, as a full refresh says.
    assert full_refresh.main([*args, "--yes"]) == 0
    assert "every record of the 4 members of 'it_family'" in capsys.readouterr().out
    assert not Path(family.path).exists()

    run_ingest(spark, in_one_batch(family), kafka.bootstrap_servers)
    rows = assert_every_spot_once(family, kafka, deleted={})
    assert Counter(r["topic"] for r in rows)["it-fam-c"] == 2


def test_with_fail_on_data_loss_false_a_members_expired_records_are_in_the_gaps_table(
    spark, catalog_file, lake, kafka, family, tmp_path
):
    # Last: Kafka then holds less than each member's start, which a re-ingest or full refresh refuses.
    produce(kafka, "it-fam-b", 5, 1)
    end = end_offsets({"bootstrap.servers": kafka.bootstrap_servers}, "it-fam-b")[0]
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    for future in admin.delete_records([TopicPartition("it-fam-b", 0, end - 2)]).values():
        future.result(timeout=30)
    accepting = tmp_path / "topics.yaml"
    accepting.write_text(
        catalog_file.read_text().replace(
            "    table: it_family\n", "    table: it_family\n    fail_on_data_loss: false\n"
        )
    )
    accepting_family = load_catalog(accepting, lake).topic(FAMILY)
    assert accepting_family.fail_on_data_loss is False
    before = {(r["topic"], r["partition"], r["offset"]) for r in read_rows(Path(family.path))}

    run_ingest(spark, accepting_family, kafka.bootstrap_servers)

    rows = read_rows(Path(family.path))
    landed = Counter((r["topic"], r["partition"], r["offset"]) for r in rows)
    assert max(landed.values()) == 1
    assert set(landed) - before == {("it-fam-b", 0, end - 2), ("it-fam-b", 0, end - 1)}
    gaps = read_rows(Path(family.gaps_path))
    assert [(g["topic"], g["partition"], g["first_offset"], g["end_offset"]) for g in gaps] == [
        ("it-fam-b", 0, end - 5, end - 2)
    ]
    assert gaps[0]["topic_id"] == standard_topic_id(
        topic_id({"bootstrap.servers": kafka.bootstrap_servers}, "it-fam-b") or ""
    )


#: A family with parsed tables (the catalog's it_pfamily: topics it-pfam-a, it-pfam-b, latest by
#: key); both members use the same keys, which are different rows in the latest table.
PARSED_MEMBERS = {"it-pfam-a": 2, "it-pfam-b": 1}


def produce_keyed(kafka: LocalKafka, topic: str, numbers: range, partitions: int) -> None:
    records = [Record(f"k{n % 4}".encode(), f'{{"n": {n}}}'.encode(), n % partitions) for n in numbers]
    assert len(producer.produce(kafka.bootstrap_servers, topic, records)) == len(records)


def assert_parsed_once(parsed_family: TopicConfig, kafka: LocalKafka) -> None:
    """Every (topic, partition, offset) of both members is in the parsed table or the dead letters
    once; the latest table holds each (topic, key)'s last record."""
    parsed = read_rows(Path(parsed_family.parsed_path))
    dead = read_rows(Path(parsed_family.dead_letter_path))
    spots = Counter((r["_kafka"]["topic"], r["_kafka"]["partition"], r["_kafka"]["offset"]) for r in parsed)
    spots.update((r["topic"], r["partition"], r["offset"]) for r in dead)
    assert max(spots.values()) == 1, [s for s, n in spots.items() if n > 1][:5]
    config = {"bootstrap.servers": kafka.bootstrap_servers}
    expected = {
        (t, p, o) for t in PARSED_MEMBERS for p, end in end_offsets(config, t).items() for o in range(end)
    }
    assert set(spots) == expected
    assert [(r["topic"], r["key"]) for r in dead] == [("it-pfam-b", b"bad")]
    newest: dict[tuple[str, bytes], int] = {}
    for row in parsed:
        spot = (row["_kafka"]["topic"], row["_kafka"]["key"])
        newest[spot] = max(newest.get(spot, -1), row["n"])
    latest = read_rows(Path(parsed_family.latest_path))
    assert sorted(((r["_kafka"]["topic"], r["_kafka"]["key"]), r["n"]) for r in latest) == sorted(
        newest.items()
    )


def test_a_parsed_family_lands_each_record_once_across_a_kill_and_a_lost_checkpoint(
    spark, catalog_file, lake, kafka, tmp_path
):
    parsed_family = load_catalog(catalog_file, lake).topic("it_pfamily")
    for name, partitions in PARSED_MEMBERS.items():
        producer.create_topic(kafka.bootstrap_servers, name, partitions=partitions)
        produce_keyed(kafka, name, range(12), partitions)
    producer.produce(kafka.bootstrap_servers, "it-pfam-b", [Record(b"bad", b"{not json", 0)])
    kill_second_bronze_commit = {
        kill_points.ENV_KILL_AT: "ingest:after_bronze_commit",
        kill_points.ENV_KILL_AFTER: "1",
    }

    # Killed after its second batch's bronze commit: the rerun replays that batch to the parsed side.
    assert run_job(parsed_family, catalog_file, lake, kafka, tmp_path, **kill_second_bronze_commit) in (
        -9,
        137,
    )
    run_ingest(spark, parsed_family, kafka.bootstrap_servers)
    assert_parsed_once(parsed_family, kafka)

    # Killed after a bronze commit again, and the checkpoint lost: the new checkpoint starts after
    # what bronze holds, so the batch is parsed from bronze first.
    produce_keyed(kafka, "it-pfam-a", range(12, 27), 2)
    assert run_job(parsed_family, catalog_file, lake, kafka, tmp_path, **kill_second_bronze_commit) in (
        -9,
        137,
    )
    shutil.move(parsed_family.checkpoint_path, tmp_path / "lost-checkpoint")
    run_ingest(spark, parsed_family, kafka.bootstrap_servers)
    assert_parsed_once(parsed_family, kafka)
    latest = {
        (r["_kafka"]["topic"], r["_kafka"]["key"]): r["n"] for r in read_rows(Path(parsed_family.latest_path))
    }
    assert latest[("it-pfam-a", b"k2")] == 26 and latest[("it-pfam-b", b"k2")] == 10


def test_a_replay_dag_run_of_the_parsed_family_rebuilds_its_tables_with_each_record_once(
    airflow_env, catalog_file, lake, kafka
):
    """After the kills above: the replay DAG re-parses the family's bronze into the parsed, dead-letter
    and latest tables (a new version of each), and every member's record is there once again."""
    parsed_family = load_catalog(catalog_file, lake).topic("it_pfamily")
    tables = (parsed_family.parsed_path, parsed_family.dead_letter_path, parsed_family.latest_path)
    versions = [table_version(Path(path)) for path in tables]
    bronze_version = table_version(Path(parsed_family.path))

    result = local_airflow.test_dag(
        airflow_env, REPLAY_DAG_ID, sync=False, conf={"topic": parsed_family.name}
    )

    assert result.task_states == {"replay": "success"}
    assert all(table_version(Path(path)) > before for path, before in zip(tables, versions, strict=True))
    assert table_version(Path(parsed_family.path)) == bronze_version  # bronze is only read
    assert_parsed_once(parsed_family, kafka)
    latest = {
        (r["_kafka"]["topic"], r["_kafka"]["key"]): r["n"] for r in read_rows(Path(parsed_family.latest_path))
    }
    assert latest[("it-pfam-a", b"k2")] == 26 and latest[("it-pfam-b", b"k2")] == 10


def serialized(airflow_env: dict[str, str], dag_id: str) -> bool:
    with sqlite3.connect(Path(airflow_env["AIRFLOW_HOME"]) / "airflow.db") as db:
        return db.execute("SELECT 1 FROM serialized_dag WHERE dag_id = ?", (dag_id,)).fetchone() is not None


def test_a_routed_pattern_gives_a_new_matching_topic_its_own_dag_after_discovery(
    airflow_env, catalog_file, lake, kafka
):
    # The catalog's 'it-route\.(.*)' -> 'it_route_\1' (parsed: false): discover_it_route.
    producer.create_topic(kafka.bootstrap_servers, "it-route.orders", partitions=2)
    produce(kafka, "it-route.orders", 5, 2)
    local_airflow.sync_dags(airflow_env)
    assert serialized(airflow_env, "discover_it_route")
    assert not serialized(airflow_env, "ingest_it_route_orders")

    found = local_airflow.test_dag(airflow_env, "discover_it_route", sync=False)
    recorded = local_airflow.xcom_value(Path(airflow_env["AIRFLOW_HOME"]), found, "discover_topics")
    assert recorded["topics"] == {"it-route.orders": "it_route_orders"} and recorded["new"] == [
        "it-route.orders"
    ]

    # The next parse has the topic's DAG, an ordinary single-topic one with the derived table.
    run = local_airflow.test_dag(airflow_env, "ingest_it_route_orders", mark_success=NOT_REGISTERED)
    assert run.task_states["ingest"] == "success"
    routed = load_catalog(catalog_file, lake).topic("it-route.orders")
    assert routed.path == str(lake / "bronze" / "it_route_orders")
    rows = read_rows(Path(routed.path))
    assert sorted((r["topic"], r["partition"], r["offset"]) for r in rows) == sorted(
        ("it-route.orders", p, o) for p in (0, 1) for o in range(3 if p == 0 else 2)
    )

    # A second topic that would land in the same table fails discovery, visibly, and the file and
    # the DAG already built stay.
    producer.create_topic(kafka.bootstrap_servers, "it-route.ORDERS", partitions=1)
    with pytest.raises(DagRunError) as raised:
        local_airflow.test_dag(airflow_env, "discover_it_route", sync=False)
    output = raised.value.result.output if raised.value.result else str(raised.value)
    assert "'it-route.ORDERS' and 'it-route.orders' would both land in table 'it_route_orders'" in output
    local_airflow.sync_dags(airflow_env)
    assert serialized(airflow_env, "ingest_it_route_orders")
