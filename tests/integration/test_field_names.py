"""Any key JSON allows, chosen the way a careless producer would, never stops a topic's parsed side.

Every string JSON allows as an object key (empty, whitespace only, control characters, case twins,
names that differ only once sanitised, the table's own column names, SQL words, dots, backticks,
quotes, names of hundreds of bytes, a lone surrogate escape, thousands in one record) at the top
level and inside a struct: the run lands every record once in the parsed table, each value in a
column or in ``_rescued_data``, and every table opens in Spark and in delta-rs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from kafkalake.config.parsed import ParsedConfig
from kafkalake.dev import producer
from kafkalake.dev.producer import Record

from .helpers import make_topic, read_rows, run_ingest

pytestmark = pytest.mark.integration

ODD_NAMES = [
    "",
    " ",
    "   ",
    "\t",
    "\n",
    "\r\n",
    "\x00",
    "\x01",
    "\x7f",
    "\u200b",
    "\ufeff",
    "Name",
    "name",
    "NAME",
    "a b",
    "a_b",
    "a,b",
    "a;b",
    "a=b",
    "a{b}",
    "a(b)",
    "_kafka",
    "_kafka_parsed",
    "_rescued_data",
    "_RESCUED_DATA",
    "select",
    "from",
    "null",
    "true",
    "order by",
    "a.b",
    "a..b",
    ".",
    "..",
    "`",
    "a`b",
    "``",
    "'",
    '"',
    "a'b",
    'a"b',
    "\\",
    "a\\b",
    "a/b",
    "a[0]",
    "[",
    "]",
    "a:b",
    "#",
    "$",
    "$.x",
    "@timestamp",
    "*",
    "-",
    "+1",
    "1",
    "123abc",
    "ü",
    "名前",
    "\U0001f600",
    "é" * 140,
    "x" * 300,
    "\ud800",
    "a\ud800b",
]


def record(i: int) -> dict[str, Any]:
    values: dict[str, Any] = {"id": i}
    for n, name in enumerate(ODD_NAMES):
        values[name] = f"v{n}-{i}" if n % 3 else n * 1000 + i
    values["nested"] = {name: n for n, name in enumerate(ODD_NAMES)}
    values["items"] = [{name: [n] for n, name in enumerate(ODD_NAMES[:20])}]
    return values


def wide(i: int) -> dict[str, Any]:
    """Thousands of keys in one record: more than any table should take as columns."""
    return {"id": i, **{f"k{n}": n for n in range(3000)}, **{f"K{n}": str(n) for n in range(0, 3000, 7)}}


@pytest.fixture(scope="module")
def landed(spark, kafka, tmp_path_factory) -> Any:
    name = "it-odd-names"
    topic = make_topic(tmp_path_factory.mktemp("names"), name, ParsedConfig())
    producer.create_topic(kafka.bootstrap_servers, name, partitions=1)
    records = [Record(str(i).encode(), json.dumps(record(i)).encode()) for i in range(20)]
    records += [Record(b"wide", json.dumps(wide(20)).encode())]
    producer.produce(kafka.bootstrap_servers, name, records)
    writer = run_ingest(spark, topic, kafka.bootstrap_servers)
    return topic, writer, len(records)


def test_odd_field_names_land_every_record_in_the_parsed_table(landed):
    topic, writer, produced = landed
    assert writer.parked_by is None, writer.parked_by
    parsed = read_rows(Path(topic.parsed_path))
    assert sorted(r["_kafka"]["offset"] for r in parsed) == list(range(produced))
    dead = read_rows(Path(topic.dead_letter_path)) if Path(topic.dead_letter_path).exists() else []
    assert dead == []


def test_every_value_is_in_a_column_or_rescued(landed):
    """No key's value is lost: what has no column of its own is in ``_rescued_data``, by its key."""
    topic, _, _ = landed
    parsed = {r["_kafka"]["offset"]: r for r in read_rows(Path(topic.parsed_path))}
    fields = DeltaTable(topic.parsed_path).schema().fields
    # The JSON key each column holds: its own name, or the metadata's when they differ.
    own = {"_kafka", "_rescued_data"}  # the table's own columns: a key of that name is rescued
    json_of = {f.name: f.metadata.get("json_name", f.name) for f in fields if f.name not in own}
    for offset in range(20):
        row = parsed[offset]
        rescued = json.loads(row["_rescued_data"]) if row["_rescued_data"] else {}
        sent = json.loads(json.dumps(record(offset)))
        for key, value in sent.items():
            if key == "nested" or key == "items":
                continue
            in_column = [c for c, k in json_of.items() if k == key and row.get(c) is not None]
            # A lone surrogate escape reaches Spark as "?" (no UTF-8 can carry it); bronze keeps it.
            spark_key = key.encode("utf-8", "replace").decode()
            assert in_column or spark_key in rescued, f"offset {offset}: {key!r} lost"
            if in_column:
                assert str(row[in_column[0]]) == str(value), f"offset {offset}: key {key!r}"


def test_every_table_opens_in_spark_and_delta_rs(spark, landed):
    topic, _, _ = landed
    for path in (topic.path, topic.parsed_path):
        assert DeltaTable(path).to_pyarrow_table().num_rows > 0
        assert spark.read.format("delta").load(path).count() > 0
