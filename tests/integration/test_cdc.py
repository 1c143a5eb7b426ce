"""Change data capture for real: SQL on a PostgreSQL table (``wal_level=logical``), captured by
Debezium's PostgreSQL connector in Kafka Connect (pgoutput), into the shared broker.

One PostgreSQL cluster, one database and one Connect worker for the module; each test's SQL moves
the source table on, and its assertions read what the connector wrote (and what kafkalake made of it).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kafkalake.core.errors import TopicMissingError
from kafkalake.dev.broker import LocalKafka
from kafkalake.dev.cdc_source import LocalConnect
from kafkalake.dev.postgres import Database, LocalPostgres
from kafkalake.dev.producer import client_settings
from kafkalake.kafka.offsets import end_offsets

pytestmark = [pytest.mark.integration, pytest.mark.cdc]

TABLE = "public.customers"
PREFIX = "it-cdc"
TOPIC = f"{PREFIX}.{TABLE}"


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
    # The password is in no file Connect reads but the 0600 one, which stop removes.
    assert source.database.password() not in (source.directory / "connector.properties").read_text()
    assert source.database.password() not in (source.directory / "worker.properties").read_text()
    secrets = source.directory / "secrets" / "database.properties"
    assert secrets.stat().st_mode & 0o777 == 0o600
