"""Replay of a topic's parsed tables from bronze, after a deliberate parser change.

Real broker, Spark and Delta; the stream and the replay run in the session's SparkSession, and
every table is read back with delta-rs.
"""

from __future__ import annotations

import json
import signal
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from kafkalake.airflow.dag_factory import REPLAY_DAG_ID
from kafkalake.config.catalog import load_catalog
from kafkalake.config.parsed import Expectation, ParsedConfig
from kafkalake.core import kill_points
from kafkalake.core.errors import BadConfigError, CheckpointLockedError
from kafkalake.dev import local_airflow, producer
from kafkalake.dev.producer import Record
from kafkalake.lake.checkpoint_lock import checkpoint_lock
from kafkalake.lake.schema_history import SchemaHistory
from kafkalake.launch import jobs
from kafkalake.spark.replay import Selection, replay

from .helpers import assert_exactly_once, make_topic, read_rows, run_to_end, table_version
from .helpers import run_ingest as run

pytestmark = pytest.mark.integration

Spot = tuple[int, int]


def order(i: int, amount: int, **extra: Any) -> Record:
    # 40 customers: a key keeps its partition, so offsets order each key's events.
    return Record(f"c{i % 40}".encode(), json.dumps({"id": i, "amount": amount, **extra}).encode())


def checkpoint_files(checkpoint: str) -> dict[str, bytes]:
    root = Path(checkpoint)
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def by_spot(rows: list[dict[str, Any]]) -> dict[Spot, dict[str, Any]]:
    spots: dict[Spot, dict[str, Any]] = {}
    for row in rows:
        kafka = row.get("_kafka") or row
        spot = (kafka["partition"], kafka["offset"])
        assert spot not in spots, f"{spot} twice"
        spots[spot] = row
    return spots


def test_replay_as_of_an_earlier_version_reparses_that_snapshot_one_commit_per_table(spark, kafka, tmp_path):
    name = "it-replay"
    # The bug: `amount > 0` drops free orders, and the pinned schema under `rescue` leaves coupons
    # in _rescued_data. The fix: `amount >= 0`, and addNewColumns, so coupon becomes a column.
    buggy = ParsedConfig(
        evolution="rescue",
        schema=(("id", "bigint"), ("amount", "bigint")),
        expectations=(Expectation("non_negative", "amount > 0", "drop"),),
        latest_by_key=True,
    )
    fixed = replace(
        buggy,
        evolution="addNewColumns",
        expectations=(Expectation("non_negative", "amount >= 0", "drop"),),
    )
    topic = make_topic(tmp_path, name, buggy)
    producer.create_topic(kafka.bootstrap_servers, name, partitions=2)
    before_fix = [
        *(order(i, i % 10, **({"coupon": "SAVE10"} if i % 4 == 0 else {})) for i in range(200)),
        Record(b"c1", b'{"id": 900, "amount": '),
        Record(b"c2", b"not json"),
    ]
    producer.produce(kafka.bootstrap_servers, name, before_fix)
    run(spark, topic, kafka.bootstrap_servers)
    snapshot = table_version(Path(topic.path))
    # The fix is deployed: what lands from now on is parsed by the fixed code.
    topic = replace(topic, parsed=fixed)
    after_fix = [*(order(i, i % 10) for i in range(200, 300)), order(300, -5)]
    producer.produce(kafka.bootstrap_servers, name, after_fix)
    run(spark, topic, kafka.bootstrap_servers)

    bronze_version = table_version(Path(topic.path))
    tables = (topic.parsed_path, topic.dead_letter_path, topic.latest_path)
    versions = {path: table_version(Path(path)) for path in tables}
    checkpoint = checkpoint_files(topic.checkpoint_path)
    in_snapshot = set(by_spot(DeltaTable(topic.path, version=snapshot).to_pyarrow_table().to_pylist()))
    assert len(in_snapshot) == len(before_fix)
    old_parsed = by_spot(read_rows(Path(topic.parsed_path)))
    old_dead = by_spot(read_rows(Path(topic.dead_letter_path)))
    assert sum(r["reason"] == "expectation:non_negative" for r in old_dead.values()) == 20 + 1

    result = replay(spark, topic, Selection(as_of_version=snapshot))

    assert result.bronze_version == snapshot
    parsed = by_spot(read_rows(Path(topic.parsed_path)))
    dead = by_spot(read_rows(Path(topic.dead_letter_path)))
    # Every record of the snapshot is in exactly one of the two tables, parsed the new way.
    assert set(parsed) & set(dead) == set()
    assert (set(parsed) | set(dead)) & in_snapshot == in_snapshot
    assert len([s for s in parsed if s in in_snapshot]) + len([s for s in dead if s in in_snapshot]) == 202
    replayed = [r for s, r in parsed.items() if s in in_snapshot]
    assert sorted(r["id"] for r in replayed) == list(range(200))  # free orders are no longer dropped
    assert {r["id"] for r in replayed if r["coupon"] == "SAVE10"} == set(range(0, 200, 4))
    assert all(r["_rescued_data"] is None for r in replayed)
    assert sorted(r["reason"] for s, r in dead.items() if s in in_snapshot) == ["malformed_json"] * 2
    assert SchemaHistory(topic.schema_dir).read(2).changes == ("+ coupon: string",)
    # Rows of records bronze received after the snapshot are kept as they were.
    for spot, row in old_parsed.items():
        if spot not in in_snapshot:
            assert parsed[spot] == {**row, "coupon": None}
    assert {s: r for s, r in dead.items() if s not in in_snapshot} == {
        s: r for s, r in old_dead.items() if s not in in_snapshot
    }
    assert len(parsed) + len(dead) == len(before_fix) + len(after_fix)
    # One commit per table; bronze and the checkpoint untouched.
    for path in tables:
        assert table_version(Path(path)) == versions[path] + 1, path
    predicates = {topic.parsed_path: "_kafka.partition = ", topic.dead_letter_path: "(partition = "}
    for path, column in predicates.items():
        commit = DeltaTable(path).history(1)[0]
        assert commit["operation"] == "WRITE", path
        assert column in str(commit["operationParameters"]["predicate"]), commit
    assert table_version(Path(topic.path)) == bronze_version
    assert checkpoint_files(topic.checkpoint_path) == checkpoint
    # The latest-row table: each customer's last order, by the new parsing.
    expected_latest: dict[bytes, int] = {}
    for record in [*before_fix, *after_fix]:
        try:
            value = json.loads(record.value or b"")
        except ValueError:
            continue  # a dead letter
        if value["amount"] >= 0 and record.key is not None:
            expected_latest[record.key] = value["id"]
    latest = read_rows(Path(topic.latest_path))
    assert {r["_kafka"]["key"]: r["id"] for r in latest} == expected_latest

    # The next ingest is still exactly once: no record twice in bronze or in the parsed tables.
    producer.produce(kafka.bootstrap_servers, name, [order(i, 1) for i in range(301, 351)])
    run(spark, topic, kafka.bootstrap_servers)
    assert_exactly_once(read_rows(Path(topic.path)), name, kafka.bootstrap_servers)
    parsed_after = by_spot(read_rows(Path(topic.parsed_path)))
    dead_after = by_spot(read_rows(Path(topic.dead_letter_path)))
    assert set(parsed_after) & set(dead_after) == set()
    assert len(parsed_after) + len(dead_after) == len(before_fix) + len(after_fix) + 50

    # Bad input names the topic and the value; a running ingest (the lock) keeps the replay out.
    with pytest.raises(BadConfigError, match=rf"'{name}'.*as_of_version 999 is beyond bronze's latest"):
        replay(spark, topic, Selection(as_of_version=999))
    with pytest.raises(BadConfigError, match=r"as_of_timestamp 2001-01-01T00:00:00\+00:00 is before"):
        replay(spark, topic, Selection(as_of_timestamp=datetime(2001, 1, 1, tzinfo=UTC)))
    with pytest.raises(BadConfigError, match=r"bronze only \(parsed: false\)"):
        replay(spark, replace(topic, parsed=replace(fixed, enabled=False)))
    with checkpoint_lock(topic.checkpoint_path), pytest.raises(CheckpointLockedError):
        replay(spark, topic)


def test_the_replay_dag_replays_the_topic_its_params_name(airflow_env, spark, kafka, catalog_file, lake):
    """Through Airflow: `airflow dags test kafkalake_replay --conf …`, spark-submit in the Spark pool."""
    topic = load_catalog(catalog_file, lake).topic("it-replay-dag")
    producer.create_topic(kafka.bootstrap_servers, topic.name, partitions=1)
    producer.produce(kafka.bootstrap_servers, topic.name, [order(i, i) for i in range(30)])
    run(spark, topic, kafka.bootstrap_servers)
    snapshot = table_version(Path(topic.path))
    producer.produce(kafka.bootstrap_servers, topic.name, [order(i, i) for i in range(30, 40)])
    run(spark, topic, kafka.bootstrap_servers)
    parsed_version = table_version(Path(topic.parsed_path))
    bronze_version = table_version(Path(topic.path))

    result = local_airflow.test_dag(
        airflow_env, REPLAY_DAG_ID, conf={"topic": topic.name, "as_of_version": snapshot}
    )

    assert result.task_states == {"replay": "success"}
    assert f"re-parsed 30 records of bronze version {snapshot}" in result.output
    assert table_version(Path(topic.parsed_path)) == parsed_version + 1
    assert table_version(Path(topic.path)) == bronze_version
    assert sorted(r["id"] for r in read_rows(Path(topic.parsed_path))) == list(range(40))


def test_a_replay_killed_between_its_commits_completes_when_run_again(
    spark, kafka, catalog_file, lake, tmp_path
):
    """SIGKILL after the parsed table's commit, before the dead letters': run again, all is in place.

    Runs after the DAG test above, on its topic (40 orders, amounts 0..39). A fixed catalog drops the
    orders under 5 to the dead letters: the killed replay left them in neither table; the second run,
    with the same snapshot, puts every record in exactly one.
    """
    topic = load_catalog(catalog_file, lake).topic("it-replay-dag")
    fixed = tmp_path / "topics.yaml"
    fixed.write_text(
        catalog_file.read_text().replace(
            "  - name: it-replay-dag\n    freshness_sla: 6h\n",
            "  - name: it-replay-dag\n    freshness_sla: 6h\n    parsed:\n      expectations:\n"
            "        - {name: big_enough, rule: 'amount >= 5', action: drop}\n",
        )
    )
    assert "big_enough" in fixed.read_text()
    version = table_version(Path(topic.path))
    env = jobs.environment(fixed, lake)

    # On the worker's job host, which goes on once the JVM holds nothing of it (helpers.run_to_end).
    killed = run_to_end(
        "replay_topic",
        topic.name,
        catalog=fixed,
        lake=lake,
        env={**env, kill_points.ENV_KILL_AT: "replay:after_parsed_commit"},
        extra_args=["--as-of-version", str(version)],
    )
    assert killed.returncode in (137, -signal.SIGKILL), killed.stdout[-3000:] + killed.stderr[-3000:]
    spots = {(r["_kafka"]["partition"], r["_kafka"]["offset"]) for r in read_rows(Path(topic.parsed_path))}
    dead_spots = {(r["partition"], r["offset"]) for r in read_rows(Path(topic.dead_letter_path))}
    assert len(spots) + len(dead_spots) < 40  # the kill left the window half replayed

    # The run again in the session: the job's own replay (jobs/replay_topic.py calls it) on what
    # the killed job left.
    again = replay(spark, load_catalog(fixed, lake).topic(topic.name), Selection(as_of_version=version))
    assert again.bronze_version == version
    parsed = by_spot(read_rows(Path(topic.parsed_path)))
    dead = by_spot(read_rows(Path(topic.dead_letter_path)))
    assert sorted(r["id"] for r in parsed.values()) == list(range(5, 40))
    assert {r["reason"] for r in dead.values()} == {"expectation:big_enough"}
    assert sorted(set(parsed) | set(dead)) == sorted(
        (r["partition"], r["offset"]) for r in read_rows(Path(topic.path))
    )
    assert not set(parsed) & set(dead)


def test_a_replay_that_creates_the_parsed_tables_partitions_them_as_the_catalog_says(spark, tmp_path):
    """A topic that was bronze only, now parsed with partition_by: the replay creates the parsed and
    dead-letter tables as an ingest would, so the next ingest's partitioning check passes."""
    from kafkalake.config.maintenance import MaintenanceConfig
    from kafkalake.config.tables import topic_tables
    from kafkalake.spark.stream import bronze_schema
    from kafkalake.spark.table_settings import check_partitioning, create_table, existing_tables

    topic = make_topic(
        tmp_path,
        "it-replay-creates",
        ParsedConfig(schema=(("id", "bigint"),)),
        maintenance=MaintenanceConfig(partition_by="ingestion_date"),
    )
    now = datetime.now(UTC)
    values = [b'{"id": 1}', b'{"id": 2}', b"not json"]
    rows = [(None, v, [], topic.name, 0, i, now, 0, now) for i, v in enumerate(values)]
    bronze = topic_tables(topic)[0]
    create_table(spark, topic, bronze, bronze_schema(), "bronze")
    spark.createDataFrame(rows, bronze_schema()).write.format("delta").mode("append").save(topic.path)

    replay(spark, topic)

    for path in (topic.parsed_path, topic.dead_letter_path):
        assert DeltaTable(path).metadata().partition_columns == ["ingestion_date"], path
    check_partitioning(topic, existing_tables(spark, topic))
    assert sorted(r["id"] for r in read_rows(Path(topic.parsed_path))) == [1, 2]
    assert [r["offset"] for r in read_rows(Path(topic.dead_letter_path))] == [2]
