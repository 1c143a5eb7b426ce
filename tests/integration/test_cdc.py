"""Change data capture for real: SQL on a PostgreSQL table (``wal_level=logical``), captured by
Debezium's PostgreSQL connector in Kafka Connect (pgoutput), into the shared broker, then landed by
kafkalake's ingest (``format: debezium``): after each run the current-state table equals
``SELECT * FROM`` the source table, row by row.

One PostgreSQL cluster, one database, one Connect worker and one topic for the module (the bare
events' and the shards' connectors join that worker for their tests: one JVM start, not three); the
tests run in order, each moving the source table on (inserts, updates, deletes, a primary-key update,
a new column, a truncate, a run killed and run again, a replay) and checking the tables after it. The first
run, the run after the kill and the replay are Airflow DAG runs (``airflow dags test``: the pre-flight,
the ingest task's spark-submit, the replay DAG); the others are the same ingest run in the session's
Spark (:class:`kafkalake.spark.ingest_run.IngestRun`), which costs no JVM of its own.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from kafkalake.airflow.dag_factory import REPLAY_DAG_ID
from kafkalake.config.catalog import load_catalog
from kafkalake.config.topic import TopicConfig
from kafkalake.core import kill_points
from kafkalake.core.errors import TopicMissingError
from kafkalake.core.run_metrics import XCOM_KEY as METRICS_XCOM_KEY
from kafkalake.dev import local_airflow
from kafkalake.dev.broker import LocalKafka
from kafkalake.dev.cdc_source import LocalConnect
from kafkalake.dev.postgres import Database, LocalPostgres
from kafkalake.dev.producer import client_settings
from kafkalake.kafka.offsets import end_offsets
from kafkalake.launch import jobs
from kafkalake.launch.handover import ENV_CLIENT_CONFIG_FILE, ENV_KEEP_CLIENT_CONFIG_FILE
from kafkalake.spark.replay import replay

from .helpers import read_rows, run_ingest, run_to_end, table_version

pytestmark = [pytest.mark.integration, pytest.mark.cdc]

TABLE = "public.customers"
PREFIX = "it-cdc"
TOPIC = f"{PREFIX}.{TABLE}"
#: A second table, captured by a connector whose JSON converter writes bare events (no envelope).
BARE_TOPIC = "it-cdc-bare.public.orders"
BARE_CONNECTOR = "kafkalake_cdc_bare"
#: One source table in two shards (schemas eu and us, as two databases' would be): a family.
SHARDS = ("eu", "us")
SHARD_PREFIX = "it-cdc-fam"
SHARD_TOPICS = tuple(f"{SHARD_PREFIX}.{shard}.orders" for shard in SHARDS)
SHARD_FAMILY = "it_cdc_fam_orders"
SHARD_CONNECTOR = "kafkalake_cdc_fam"
#: The DAG's tasks after the ingest, marked done in this module's DAG runs.
NOT_LANDING = "refresh_schema|register_table|maintain_table"
#: The module's other entries; TOPIC's is in the session catalog (tests/integration/conftest.py,
#: with four offsets a micro-batch), so that its runs go through the session's Airflow as DAG runs.
#: Small micro-batches: every run writes several, so events of one key meet across batches.
CATALOG = f"""
topics:
  - name: {BARE_TOPIC}
    freshness_sla: 1h
    table: it_cdc_orders
    format: debezium
  - topics: [{SHARD_TOPICS[0]}, {SHARD_TOPICS[1]}]
    freshness_sla: 1h
    table: {SHARD_FAMILY}
    format: debezium
    max_offsets_per_trigger: 4
"""


@pytest.fixture(scope="module")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalPostgres]:
    cluster = LocalPostgres(tmp_path_factory.mktemp("cdc-postgres"), logical_replication=True).start()
    yield cluster
    cluster.stop(remove=True)


@pytest.fixture(scope="module")
def shop(postgres: LocalPostgres) -> Database:
    database = postgres.database("shop", replication=True)
    # Owned by the connector's role: Debezium creates the publication for the captured table.
    sql(postgres, "CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, tier text);")
    sql(postgres, "ALTER TABLE customers OWNER TO shop;")
    sql(postgres, "INSERT INTO customers VALUES (1, 'ada', 'gold'), (2, 'bob', NULL);")
    return database


@pytest.fixture(scope="module")
def source(
    tmp_path_factory: pytest.TempPathFactory, kafka: LocalKafka, shop: Database
) -> Iterator[LocalConnect]:
    connect = LocalConnect(
        tmp_path_factory.mktemp("cdc-connect"), kafka.bootstrap_servers, shop, (TABLE,), topic_prefix=PREFIX
    ).start()
    yield connect
    connect.stop()


def sql(postgres: LocalPostgres, statements: str) -> str:
    return postgres.psql(statements, database="shop")


def _ends(bootstrap: str, topic: str) -> dict[int, int]:
    """The topic's end offsets; none while Connect has not created it yet."""
    try:
        return end_offsets(client_settings(bootstrap), topic)
    except TopicMissingError:
        return {}


def topic_events(bootstrap: str, topic: str, at_least: int, timeout: float = 60.0) -> list[dict[str, Any]]:
    """Every record of the topic, once it holds at least ``at_least``: key and value (parsed JSON,
    None for a tombstone), partition and offset."""
    from confluent_kafka import Consumer, TopicPartition

    deadline = time.monotonic() + timeout
    while sum(_ends(bootstrap, topic).values()) < at_least:
        if time.monotonic() > deadline:
            raise AssertionError(f"{topic} has fewer than {at_least} records after {timeout:.0f}s")
        time.sleep(0.5)
    ends = end_offsets(client_settings(bootstrap), topic)
    consumer = Consumer(
        {**client_settings(bootstrap), "group.id": "it-cdc-reader", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in ends])
    events: list[dict[str, Any]] = []
    try:
        while len(events) < sum(ends.values()):
            message = consumer.poll(5)
            if message is None or message.error():
                continue
            value = message.value()
            events.append(
                {
                    "key": json.loads(message.key() or b"null"),
                    "value": None if value is None else json.loads(value),
                    "partition": message.partition(),
                    "offset": message.offset(),
                }
            )
    finally:
        consumer.close()
    return sorted(events, key=lambda e: (e["partition"], e["offset"]))


def test_sql_on_a_table_becomes_debezium_change_events_in_kafka(
    postgres: LocalPostgres, source: LocalConnect, kafka: LocalKafka, tmp_path: Path
) -> None:
    # The snapshot: the two rows the table had before the connector started, as reads (op r).
    snapshot = topic_events(kafka.bootstrap_servers, TOPIC, 2)
    assert [(e["value"]["payload"]["op"], e["value"]["payload"]["after"]["id"]) for e in snapshot] == [
        ("r", 1),
        ("r", 2),
    ]
    sql(
        postgres,
        "INSERT INTO customers VALUES (3, 'cy', 'silver');"
        "UPDATE customers SET tier = 'gold' WHERE id = 2;"
        "DELETE FROM customers WHERE id = 1;",
    )
    events = topic_events(kafka.bootstrap_servers, TOPIC, 6)
    streamed = events[2:]
    payloads = [e["value"]["payload"] if e["value"] else None for e in streamed]
    # The envelope: Connect's JSON converter with schemas, on keys and values.
    assert all(set(e["value"]) == {"schema", "payload"} for e in streamed if e["value"])
    assert [e["key"]["payload"] for e in streamed] == [{"id": 3}, {"id": 2}, {"id": 1}, {"id": 1}]
    assert [p["op"] if p else None for p in payloads] == ["c", "u", "d", None]  # d, then its tombstone
    assert payloads[0]["after"] == {"id": 3, "name": "cy", "tier": "silver"}
    assert payloads[1]["after"] == {"id": 2, "name": "bob", "tier": "gold"}
    assert payloads[2]["after"] is None and payloads[2]["before"]["id"] == 1
    source_info = [p["source"] for p in payloads if p]
    assert {s["connector"] for s in source_info} == {"postgresql"}
    assert {(s["db"], s["schema"], s["table"]) for s in source_info} == {("shop", "public", "customers")}
    lsns = [s["lsn"] for s in source_info]
    assert lsns == sorted(lsns) and lsns[0] > snapshot[-1]["value"]["payload"]["source"]["lsn"]
    # The password is in no file Connect reads but the 0600 one, which stop removes, nor its log.
    for name in ("connector.properties", "worker.properties", "connect.log"):
        assert source.database.password() not in (source.directory / name).read_text()
    secrets = source.directory / "secrets" / "database.properties"
    assert secrets.stat().st_mode & 0o777 == 0o600


# --- format: debezium: the change history and the current-state table ---------------------------


@pytest.fixture(scope="module")
def cdc_catalog(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cdc-catalog") / "topics.yaml"
    path.write_text(CATALOG)
    return path


@pytest.fixture(scope="module")
def cdc_lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cdc-lake")


@pytest.fixture(scope="module")
def topic(catalog_file: Path, lake: Path) -> TopicConfig:
    return load_catalog(catalog_file, lake).topic(TOPIC)


def ingest_dag_run(airflow_env: dict[str, str], topic: TopicConfig) -> dict[str, Any]:
    """One DAG run of the topic (`airflow dags test`: pre-flight, then the ingest task's
    spark-submit) and what its ingest task reported; schema refresh, registration and table care
    are marked done, they are not what this module shows."""
    run = local_airflow.test_dag(airflow_env, topic.dag_id, sync=False, mark_success=NOT_LANDING)
    assert run.task_states["ingest"] == "success", run.task_states
    metrics: dict[str, Any] = local_airflow.xcom_value(
        Path(airflow_env["AIRFLOW_HOME"]), run, "ingest", METRICS_XCOM_KEY
    )
    return metrics


def source_rows(postgres: LocalPostgres) -> list[dict[str, Any]]:
    out = sql(postgres, "SELECT row_to_json(c) FROM customers c;")
    return sorted((json.loads(line) for line in out.splitlines() if line.strip()), key=lambda r: r["id"])


def current_rows(topic: TopicConfig) -> list[dict[str, Any]]:
    """The current-state table's source columns (its own start with _), by id."""
    rows = [
        {k: v for k, v in r.items() if not k.startswith("_")} for r in read_rows(Path(topic.current_path))
    ]
    return sorted(rows, key=lambda r: r["id"])


def assert_current_is_source(topic: TopicConfig, postgres: LocalPostgres) -> None:
    """The current-state table holds exactly the source table's rows, column for column."""
    assert current_rows(topic) == source_rows(postgres)


def change(postgres: LocalPostgres, kafka: LocalKafka, statements: str, records: int) -> None:
    """Run SQL on the source and wait until the connector wrote the ``records`` it makes."""
    before = sum(_ends(kafka.bootstrap_servers, TOPIC).values())
    sql(postgres, statements)
    topic_events(kafka.bootstrap_servers, TOPIC, before + records)


def kill_before_current_commit(name: str, catalog: Path, lake: Path, kafka: LocalKafka, tmp: Path) -> None:
    """The entry's ingest job, as the DAG's task launches it, killed (SIGKILL) in the run's second
    batch, between its parsed commit and its current-state MERGE: on the worker's job host, which
    goes on once the JVM holds nothing of it (helpers.run_to_end)."""
    settings = tmp / "kafka.json"
    settings.write_text(json.dumps({"bootstrap.servers": kafka.bootstrap_servers}))
    env = {
        **jobs.environment(catalog, lake),
        ENV_CLIENT_CONFIG_FILE: str(settings),
        ENV_KEEP_CLIENT_CONFIG_FILE: "1",
        kill_points.ENV_KILL_AT: "ingest:before_current_commit",
        kill_points.ENV_KILL_AFTER: "1",
    }
    killed = run_to_end("ingest_topic", name, catalog=catalog, lake=lake, env=env, short_run=True)
    assert killed.returncode in (-9, 137), killed.stdout[-3000:] + killed.stderr[-3000:]


def test_a_dag_run_makes_the_current_state_table_the_source_table(
    airflow_env: dict[str, str],
    postgres: LocalPostgres,
    source: LocalConnect,
    kafka: LocalKafka,
    topic: TopicConfig,
) -> None:
    # The snapshot (r, r) and the first test's insert, update, delete (c, u, d + tombstone).
    events = topic_events(kafka.bootstrap_servers, TOPIC, 6)
    metrics = ingest_dag_run(airflow_env, topic)
    # Six records in bronze, in two batches of at most four; the tombstone has no history row.
    assert metrics["batches"] >= 2 and metrics["rows"] == 6 and metrics["parsed_rows"] == 5
    assert_current_is_source(topic, postgres)
    assert [r["id"] for r in current_rows(topic)] == [2, 3]
    # The change history: one row per event (the tombstone is none), with op, ts_ms and position.
    history = sorted(read_rows(Path(topic.parsed_path)), key=lambda r: r["_kafka"]["offset"])
    assert [r["op"] for r in history] == ["r", "r", "c", "u", "d"]
    assert [r["_kafka"]["offset"] for r in history] == [e["offset"] for e in events if e["value"]]
    assert all(r["ts_ms"] > 0 and r["source"]["lsn"] > 0 for r in history)
    assert history[3]["after"] == {"id": 2, "name": "bob", "tier": "gold"}
    assert history[4]["before"]["id"] == 1 and history[4]["after"] is None
    assert not Path(topic.dead_letter_path).exists() or read_rows(Path(topic.dead_letter_path)) == []


def test_a_primary_key_update_and_a_new_column_reach_the_current_state(
    spark: Any, postgres: LocalPostgres, source: LocalConnect, kafka: LocalKafka, topic: TopicConfig
) -> None:
    change(postgres, kafka, "UPDATE customers SET id = 30 WHERE id = 3;", 3)  # d, tombstone, c
    change(postgres, kafka, "ALTER TABLE customers ADD COLUMN email text;", 0)
    change(
        postgres,
        kafka,
        "INSERT INTO customers VALUES (4, 'dee', NULL, 'dee@example.com');"
        "UPDATE customers SET email = 'bob@example.com', name = 'bobby' WHERE id = 2;"
        "INSERT INTO customers VALUES (5, 'eve', 'gold', NULL);"
        "DELETE FROM customers WHERE id = 5;",
        5,
    )
    run_ingest(spark, topic, kafka.bootstrap_servers)
    assert [r["id"] for r in current_rows(topic)] == [2, 4, 30]
    assert_current_is_source(topic, postgres)
    assert current_rows(topic)[0]["email"] == "bob@example.com"


def test_a_truncate_empties_the_table_and_later_inserts_land(
    spark: Any, postgres: LocalPostgres, source: LocalConnect, kafka: LocalKafka, topic: TopicConfig
) -> None:
    change(
        postgres,
        kafka,
        "INSERT INTO customers VALUES (6, 'fay', NULL, NULL);"
        "TRUNCATE customers;"
        "INSERT INTO customers VALUES (7, 'gus', 'silver', 'gus@example.com');",
        3,
    )
    run_ingest(spark, topic, kafka.bootstrap_servers)
    ops = [r["op"] for r in sorted(read_rows(Path(topic.parsed_path)), key=lambda r: r["_kafka"]["offset"])]
    assert ops[-3:] == ["c", "t", "c"]
    assert [r["id"] for r in current_rows(topic)] == [7]
    assert_current_is_source(topic, postgres)


def test_a_run_killed_before_its_current_state_commit_and_a_dag_run_after_it_converge(
    airflow_env: dict[str, str],
    postgres: LocalPostgres,
    source: LocalConnect,
    kafka: LocalKafka,
    topic: TopicConfig,
    catalog_file: Path,
    lake: Path,
    tmp_path: Path,
) -> None:
    change(
        postgres,
        kafka,
        "INSERT INTO customers VALUES (8, 'hal', NULL, NULL), (9, 'ivy', NULL, NULL);"
        "DELETE FROM customers WHERE id = 7;"
        "UPDATE customers SET tier = 'gold' WHERE id = 8;"
        "UPDATE customers SET id = 90 WHERE id = 9;"
        "INSERT INTO customers VALUES (10, 'jo', NULL, NULL);",
        9,
    )
    before = current_rows(topic)
    kill_before_current_commit(TOPIC, catalog_file, lake, kafka, tmp_path)
    partial = current_rows(topic)
    assert partial != source_rows(postgres) and partial != before  # one batch applied, the next not
    ingest_dag_run(airflow_env, topic)
    assert [r["id"] for r in current_rows(topic)] == [8, 10, 90]
    assert_current_is_source(topic, postgres)
    # Every event once in the change history, whatever the kill interrupted.
    offsets = [r["_kafka"]["offset"] for r in read_rows(Path(topic.parsed_path))]
    assert len(offsets) == len(set(offsets))
    assert os.environ.get(kill_points.ENV_KILL_AT) is None


def test_a_replay_dag_run_rebuilds_the_same_current_state_and_later_runs_go_on(
    airflow_env: dict[str, str],
    spark: Any,
    postgres: LocalPostgres,
    source: LocalConnect,
    kafka: LocalKafka,
    topic: TopicConfig,
) -> None:
    current_version = table_version(Path(topic.current_path))
    result = local_airflow.test_dag(airflow_env, REPLAY_DAG_ID, sync=False, conf={"topic": topic.name})
    assert result.task_states == {"replay": "success"}
    # The replay rewrote the current-state table from the change history, to the same rows.
    assert table_version(Path(topic.current_path)) > current_version
    assert_current_is_source(topic, postgres)
    # After a replay, an ingest applies only what is new: nothing comes back, nothing is lost.
    change(
        postgres,
        kafka,
        "DELETE FROM customers WHERE id = 8; UPDATE customers SET name = 'j' WHERE id = 10;",
        3,
    )
    run_ingest(spark, topic, kafka.bootstrap_servers)
    assert [r["id"] for r in current_rows(topic)] == [10, 90]
    assert_current_is_source(topic, postgres)


def test_a_lost_checkpoint_resumes_from_the_tables_and_brings_no_deleted_row_back(
    spark: Any, postgres: LocalPostgres, source: LocalConnect, kafka: LocalKafka, topic: TopicConfig
) -> None:
    # The streaming checkpoint gone: a new query id, whose batches Delta's txn versions do not know.
    # The run starts where the tables' recorded positions say; no old event is applied again.
    shutil.rmtree(topic.checkpoint_path)
    change(
        postgres,
        kafka,
        "INSERT INTO customers (id, name) VALUES (11, 'kim'); DELETE FROM customers WHERE id = 90;",
        3,
    )
    writer = run_ingest(spark, topic, kafka.bootstrap_servers)
    assert writer.recovered  # the position came from the tables
    assert [r["id"] for r in current_rows(topic)] == [10, 11]
    assert_current_is_source(topic, postgres)
    offsets = [r["_kafka"]["offset"] for r in read_rows(Path(topic.parsed_path))]
    assert len(offsets) == len(set(offsets))


def test_a_key_that_moved_partition_is_ordered_by_the_source_position(
    spark: Any, postgres: LocalPostgres, source: LocalConnect, kafka: LocalKafka, topic: TopicConfig
) -> None:
    from confluent_kafka.admin import AdminClient, NewPartitions

    fillers, movers = range(100, 110), range(120, 126)
    values = ", ".join(f"({i}, 'n{i}')" for i in [*fillers, *movers])
    change(postgres, kafka, f"INSERT INTO customers (id, name) VALUES {values};", 16)
    # A second partition: keys hash anew, so some keys' next events land in the new partition while
    # their rows came from the old one, where Kafka orders nothing between the two.
    admin = AdminClient(client_settings(kafka.bootstrap_servers))  # kept: a dropped client aborts
    admin.create_partitions([NewPartitions(TOPIC, 2)])[TOPIC].result(30)
    time.sleep(5)  # Connect's producer sees the partition at its next metadata refresh (2 s)
    # The movers were inserted last in the old partition and are deleted first in the new one: the
    # Kafka source reads partitions at the same pace, so a mover's delete comes in an earlier
    # micro-batch than its insert, whose MERGE then finds no row.
    change(postgres, kafka, f"DELETE FROM customers WHERE id >= {movers[0]};", 12)
    # Waited for: a run started before Connect wrote them misses them (the source has them).
    change(postgres, kafka, f"UPDATE customers SET tier = 'moved' WHERE id < {movers[0]};", 12)
    # Eight a batch (the catalog's four would take twice the batches): still several, split alike.
    writer = run_ingest(spark, replace(topic, max_offsets_per_trigger=8), kafka.bootstrap_servers)
    assert writer.stats.batches > 3
    assert_current_is_source(topic, postgres)
    partitions_of: dict[bytes, set[int]] = {}
    for row in read_rows(Path(topic.parsed_path)):
        partitions_of.setdefault(row["_kafka"]["key"], set()).add(row["_kafka"]["partition"])
    # Keys that moved: their rows were replaced, or deleted, from the other partition.
    assert any(len(parts) == 2 for parts in partitions_of.values())


def test_bare_events_without_the_envelope_land_the_same_way(
    spark: Any,
    postgres: LocalPostgres,
    source: LocalConnect,
    kafka: LocalKafka,
    cdc_catalog: Path,
    cdc_lake: Path,
) -> None:
    sql(
        postgres,
        "CREATE TABLE orders (id int PRIMARY KEY, item text, qty int); ALTER TABLE orders OWNER TO shop;",
    )
    sql(postgres, "INSERT INTO orders VALUES (1, 'pen', 2), (2, 'ink', 1);")
    # A connector of its own on the module's worker, its converter without the envelope.
    source.add_connector(BARE_CONNECTOR, ("public.orders",), topic_prefix="it-cdc-bare", schemas_enable=False)
    try:
        sql(
            postgres,
            "UPDATE orders SET qty = 5 WHERE id = 1; DELETE FROM orders WHERE id = 2;"
            "INSERT INTO orders VALUES (3, 'nib', 9); UPDATE orders SET id = 4 WHERE id = 3;",
        )
        events = topic_events(kafka.bootstrap_servers, BARE_TOPIC, 9)  # r r u d - c d - c
    finally:
        source.remove_connector(BARE_CONNECTOR)
    assert all("payload" not in e["value"] and "op" in e["value"] for e in events if e["value"])
    orders = load_catalog(cdc_catalog, cdc_lake).topic(BARE_TOPIC)
    run_ingest(spark, orders, kafka.bootstrap_servers)
    out = sql(postgres, "SELECT row_to_json(o) FROM orders o ORDER BY id;")
    expected = [json.loads(line) for line in out.splitlines() if line.strip()]
    got = sorted(
        ({k: v for k, v in r.items() if not k.startswith("_")} for r in read_rows(Path(orders.current_path))),
        key=lambda r: r["id"],
    )
    assert got == expected == [{"id": 1, "item": "pen", "qty": 5}, {"id": 4, "item": "nib", "qty": 9}]
    ops = [r["op"] for r in sorted(read_rows(Path(orders.parsed_path)), key=lambda r: r["_kafka"]["offset"])]
    assert ops == ["r", "r", "u", "d", "c", "d", "c"]


# --- a family: shards of one source table, keyed by (member topic, key) --------------------------


def shard_rows(postgres: LocalPostgres, shard: str) -> list[dict[str, Any]]:
    out = sql(postgres, f"SELECT row_to_json(o) FROM {shard}.orders o;")
    return sorted((json.loads(line) for line in out.splitlines() if line.strip()), key=lambda r: r["id"])


def assert_each_member_is_its_shard(
    family: TopicConfig, postgres: LocalPostgres
) -> dict[str, list[dict[str, Any]]]:
    """The current-state table filtered by member topic equals ``SELECT * FROM`` its shard, row by
    row; a column only the other shard has is null in its rows."""
    rows = read_rows(Path(family.current_path))
    got: dict[str, list[dict[str, Any]]] = {}
    for shard, member in zip(SHARDS, SHARD_TOPICS, strict=True):
        mine = [
            {k: v for k, v in r.items() if not k.startswith("_")}
            for r in rows
            if r["_kafka"]["topic"] == member
        ]
        got[shard] = sorted(mine, key=lambda r: r["id"])
        columns = set(got[shard][0]) if got[shard] else set()
        expected = [{c: r.get(c) for c in columns} for r in shard_rows(postgres, shard)]
        assert got[shard] == expected, shard
    assert len(rows) == sum(len(v) for v in got.values())
    return got


@pytest.mark.families
def test_a_family_of_shards_keeps_each_members_rows_as_its_source_table(
    spark: Any,
    postgres: LocalPostgres,
    source: LocalConnect,
    kafka: LocalKafka,
    cdc_catalog: Path,
    cdc_lake: Path,
    tmp_path: Path,
) -> None:
    for shard in SHARDS:
        sql(
            postgres,
            f"CREATE SCHEMA {shard} AUTHORIZATION shop;"
            f"CREATE TABLE {shard}.orders (id int PRIMARY KEY, item text, qty int);"
            f"ALTER TABLE {shard}.orders OWNER TO shop;",
        )
    # The same keys in both shards: two rows each, one per member.
    sql(
        postgres,
        "INSERT INTO eu.orders VALUES (1, 'pen', 2), (2, 'ink', 1);"
        "INSERT INTO us.orders VALUES (1, 'cap', 7);",
    )
    source.add_connector(
        SHARD_CONNECTOR, tuple(f"{shard}.orders" for shard in SHARDS), topic_prefix=SHARD_PREFIX
    )
    family = load_catalog(cdc_catalog, cdc_lake).topic(SHARD_FAMILY)
    try:
        sql(
            postgres,
            "UPDATE eu.orders SET qty = 5 WHERE id = 1; DELETE FROM eu.orders WHERE id = 2;"
            "INSERT INTO eu.orders VALUES (3, 'nib', 9);"
            "INSERT INTO us.orders VALUES (2, 'hat', 1); UPDATE us.orders SET item = 'cup' WHERE id = 1;"
            "ALTER TABLE us.orders ADD COLUMN note text;"
            "INSERT INTO us.orders VALUES (3, 'mug', 4, 'blue'); DELETE FROM us.orders WHERE id = 2;",
        )
        topic_events(kafka.bootstrap_servers, SHARD_TOPICS[0], 6)  # r r u d - c
        topic_events(kafka.bootstrap_servers, SHARD_TOPICS[1], 6)  # r c u c d -
        run_ingest(spark, family, kafka.bootstrap_servers)
        got = assert_each_member_is_its_shard(family, postgres)
        assert [r["id"] for r in got["eu"]] == [1, 3] and [r["id"] for r in got["us"]] == [1, 3]
        assert {r["note"] for r in got["eu"]} == {None}  # a column eu lacks: null in its rows

        # A truncate empties its own member only; a primary-key change in the other.
        sql(postgres, "TRUNCATE eu.orders; INSERT INTO eu.orders VALUES (4, 'pad', 1);")
        sql(postgres, "UPDATE us.orders SET id = 10 WHERE id = 1;")
        topic_events(kafka.bootstrap_servers, SHARD_TOPICS[0], 8)  # t c
        topic_events(kafka.bootstrap_servers, SHARD_TOPICS[1], 9)  # d - c
        run_ingest(spark, family, kafka.bootstrap_servers)
        got = assert_each_member_is_its_shard(family, postgres)
        assert [r["id"] for r in got["eu"]] == [4] and [r["id"] for r in got["us"]] == [3, 10]

        # A replay rebuilds the same state from the family's one change history.
        assert family.current_path in replay(spark, family).commits
        assert_each_member_is_its_shard(family, postgres)

        # A run killed in its second batch, between its change-history commit and its current-state
        # MERGE, and run again: the batch is applied once, in each member.
        sql(
            postgres,
            "INSERT INTO eu.orders VALUES (5, 'a', 1), (6, 'b', 1), (7, 'c', 1);"
            "UPDATE eu.orders SET qty = 3 WHERE id = 5; DELETE FROM eu.orders WHERE id = 6;"
            "INSERT INTO us.orders VALUES (20, 'd', 1, NULL), (21, 'e', 1, NULL);"
            "UPDATE us.orders SET qty = 2 WHERE id = 20; DELETE FROM us.orders WHERE id = 21;",
        )
        topic_events(kafka.bootstrap_servers, SHARD_TOPICS[0], 14)  # c c c u d -
        topic_events(kafka.bootstrap_servers, SHARD_TOPICS[1], 14)  # c c u d -
        kill_before_current_commit(SHARD_FAMILY, cdc_catalog, cdc_lake, kafka, tmp_path)
        run_ingest(spark, family, kafka.bootstrap_servers)
        got = assert_each_member_is_its_shard(family, postgres)
        assert [r["id"] for r in got["eu"]] == [4, 5, 7] and [r["id"] for r in got["us"]] == [3, 10, 20]

        # The checkpoint lost: each member resumes from the tables' recorded positions (a new query
        # id, whose MERGEs Delta's txn versions do not know); a key truncated earlier comes back.
        shutil.rmtree(family.checkpoint_path)
        sql(postgres, "DELETE FROM us.orders WHERE id = 3; INSERT INTO eu.orders VALUES (1, 'rim', 2);")
        topic_events(kafka.bootstrap_servers, SHARD_TOPICS[0], 15)  # c
        topic_events(kafka.bootstrap_servers, SHARD_TOPICS[1], 16)  # d -
    finally:
        source.remove_connector(SHARD_CONNECTOR)
    assert run_ingest(spark, family, kafka.bootstrap_servers).recovered
    got = assert_each_member_is_its_shard(family, postgres)
    assert [r["id"] for r in got["eu"]] == [1, 4, 5, 7] and [r["id"] for r in got["us"]] == [10, 20]
    assert got["eu"][0]["item"] == "rim"
    # One change history for the family: every event once, with its member topic.
    history = read_rows(Path(family.parsed_path))
    spots = [(r["_kafka"]["topic"], r["_kafka"]["partition"], r["_kafka"]["offset"]) for r in history]
    assert len(spots) == len(set(spots)) == 25  # 31 records less 6 tombstones
    assert [r["op"] for r in history if r["_kafka"]["topic"] == SHARD_TOPICS[0]].count("t") == 1
