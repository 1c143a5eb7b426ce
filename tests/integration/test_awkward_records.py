"""The three records of issue 13 among 3,000 good ones, through the topic's DAG: the real broker,
Airflow, spark-submit and Delta, every table read back with delta-rs.

One record nested 60 levels deep, one with a field named ``first name``, one with ``id`` and
``amount`` of the wrong type, and a key's tombstone: the run succeeds, every offset is in exactly one
place, the good records' columns keep their types, and the next run (with another awkward name)
succeeds too.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from kafkalake.config.catalog import load_catalog
from kafkalake.dev import local_airflow, producer
from kafkalake.dev.producer import Record
from kafkalake.lake.schema_algebra import schema_problems
from kafkalake.lake.schema_history import SchemaHistory

from .helpers import read_rows

pytestmark = pytest.mark.integration

TOPIC = "it-awkward"


def deep(levels: int) -> dict[str, Any]:
    node: dict[str, Any] = {"leaf": "bottom"}
    for _ in range(levels):
        node = {"a": node}
    return node


def good(start: int, count: int) -> list[Record]:
    return [
        Record(f"k{i % 50}".encode(), json.dumps({"id": i, "amount": i * 10, "note": "ok"}).encode())
        for i in range(start, start + count)
    ]


def places(topic: Any) -> tuple[dict[tuple[int, int], dict[str, Any]], dict[tuple[int, int], dict[str, Any]]]:
    parsed = {
        (r["_kafka"]["partition"], r["_kafka"]["offset"]): r for r in read_rows(Path(topic.parsed_path))
    }
    dead = {(r["partition"], r["offset"]): r for r in read_rows(Path(topic.dead_letter_path))}
    return parsed, dead


def assert_each_offset_once(topic: Any, produced: dict[tuple[int, int], Record]) -> None:
    parsed, dead = places(topic)
    parsed_rows = read_rows(Path(topic.parsed_path))
    assert len(parsed) == len(parsed_rows), "an offset is parsed twice"
    assert not set(parsed) & set(dead)
    tombstones = {spot for spot, record in produced.items() if record.value is None}
    assert set(parsed) | set(dead) | tombstones == set(produced)
    assert not (set(parsed) | set(dead)) & tombstones
    bronze = Counter((r["partition"], r["offset"]) for r in read_rows(Path(topic.path)))
    assert set(bronze) == set(produced) and set(bronze.values()) == {1}


def test_awkward_records_among_good_ones_stop_nothing(airflow_env, catalog_file, lake, kafka):
    topic = load_catalog(catalog_file, lake).topic(TOPIC)
    producer.create_topic(kafka.bootstrap_servers, TOPIC, partitions=2)
    awkward = [
        Record(b"deep", json.dumps({"id": 100_000, "amount": 1, "payload": deep(60)}).encode()),
        Record(b"name", json.dumps({"id": 100_001, "amount": 2, "first name": "Ada"}).encode()),
        Record(b"typed", json.dumps({"id": "not-a-number", "amount": "12"}).encode()),
        Record(b"gone", json.dumps({"id": 100_002, "amount": 3}).encode()),
        Record(b"gone", None),  # a tombstone: deletes its key from the latest table
    ]
    records = good(0, 1500) + awkward + good(1500, 1500)
    produced = dict(zip(producer.produce(kafka.bootstrap_servers, TOPIC, records), records, strict=True))

    run = local_airflow.test_dag(airflow_env, topic.dag_id, sync=False)

    assert run.task_states["ingest"] == "success"
    assert run.task_states["register_table"] == "success"
    assert_each_offset_once(topic, produced)
    parsed, dead = places(topic)
    assert dead == {}
    by_id = {r["id"]: r for r in parsed.values() if r["id"] is not None}

    # The good records' columns keep their types: one record of strings changed nothing.
    table = DeltaTable(topic.parsed_path).to_pyarrow_table()
    assert table.schema.field("id").type == pa.int64()
    assert table.schema.field("amount").type == pa.int64()
    assert all(by_id[i]["amount"] == i * 10 and by_id[i]["_rescued_data"] is None for i in range(3000))
    # The mistyped values are kept as they came, in _rescued_data of their row.
    mistyped = [r for r in parsed.values() if r["_kafka"]["key"] == b"typed"]
    assert len(mistyped) == 1 and mistyped[0]["id"] is None
    rescued = json.loads(mistyped[0]["_rescued_data"])
    assert rescued["id"] == "not-a-number"
    assert rescued.get("amount", "12") == "12" and (mistyped[0]["amount"] == 12) == ("amount" not in rescued)
    # `first name` is the column first_name, the JSON key kept in its metadata.
    assert by_id[100_001]["first_name"] == "Ada" and by_id[100_001]["_rescued_data"] is None
    field = next(f for f in DeltaTable(topic.parsed_path).schema().fields if f.name == "first_name")
    assert field.metadata["json_name"] == "first name"
    # 60 levels deep: 10 levels of columns, the rest one JSON text; nothing rescued, nothing lost.
    node: Any = by_id[100_000]["payload"]
    for _ in range(9):
        node = node["a"]
    assert json.loads(node["a"]) == deep(50)
    assert by_id[100_000]["_rescued_data"] is None

    history = SchemaHistory(topic.schema_dir)
    current = history.current()
    assert current is not None and schema_problems(current.schema) == []

    # Every table opens in delta-rs; the latest table has each key's last record, the tombstoned
    # key none.
    latest = {r["_kafka"]["key"]: r for r in read_rows(Path(topic.latest_path))}
    assert set(latest) == {f"k{i}".encode() for i in range(50)} | {b"deep", b"name", b"typed"}
    assert latest[b"name"]["first_name"] == "Ada" and latest[b"k0"]["id"] == 2950

    # The next run, with another awkward name (a new column), succeeds and lands it once.
    more = [Record(b"k1", json.dumps({"id": 200_000, "amount": 3, "last=name;": "Lovelace"}).encode())]
    more += good(3000, 20)
    produced.update(zip(producer.produce(kafka.bootstrap_servers, TOPIC, more), more, strict=True))

    run = local_airflow.test_dag(airflow_env, topic.dag_id, sync=False)

    assert run.task_states["ingest"] == "success"
    assert_each_offset_once(topic, produced)
    parsed, _dead = places(topic)
    newest = next(r for r in parsed.values() if r["id"] == 200_000)
    assert newest["last_name_"] == "Lovelace" and newest["_rescued_data"] is None
    assert DeltaTable(topic.latest_path).to_pyarrow_table().schema.field("last_name_").type == pa.string()
