"""Partitioning and table properties from the catalog, on real Kafka, Spark and Delta.

The stream runs in the session's SparkSession, through the same ``ensure_table`` and
``start_ingest`` the ingest job calls; partition columns and properties are read back with
delta-rs, an independent reader.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from deltalake import DeltaTable

from kafkalake.config.maintenance import MaintenanceConfig
from kafkalake.config.parsed import ParsedConfig
from kafkalake.config.tables import topic_tables
from kafkalake.config.topic import TopicConfig
from kafkalake.core.errors import BadConfigError
from kafkalake.dev import producer
from kafkalake.dev.producer import Record

from .helpers import assert_exactly_once, make_topic, read_rows, run_ingest

pytestmark = pytest.mark.integration

OPTIMIZE_WRITE = "delta.autoOptimize.optimizeWrite"
AUTO_COMPACT = "delta.autoOptimize.autoCompact"


def events(start: int, count: int) -> list[Record]:
    return [
        Record(f"k{i % 10}".encode(), json.dumps({"id": i, "country": ["DE", "FR", "NL"][i % 3]}).encode())
        for i in range(start, start + count)
    ]


def layout(topic: TopicConfig) -> dict[str, tuple[list[str], dict[str, str]]]:
    """Each table's partition columns and properties, as delta-rs reads them from the log."""
    found = {}
    for table in topic_tables(topic):
        metadata = DeltaTable(table.location).metadata()
        found[table.kind] = (metadata.partition_columns, dict(metadata.configuration))
    return found


def local_date(moment: datetime, spark: Any) -> Any:
    """The date Spark's CAST(timestamp AS DATE) gives: in the session's time zone."""
    return moment.astimezone(ZoneInfo(spark.conf.get("spark.sql.session.timeZone"))).date()


def versions(topic: TopicConfig) -> list[int]:
    return [DeltaTable(t.location).version() for t in topic_tables(topic)]


def test_ingestion_date_partitioning_and_properties_kept_in_step_on_every_run(spark, kafka, tmp_path):
    name = "it-partitioned"
    topic = make_topic(
        tmp_path,
        name,
        ParsedConfig(latest_by_key=True),
        maintenance=MaintenanceConfig(partition_by="ingestion_date", properties=((OPTIMIZE_WRITE, "true"),)),
    )
    producer.create_topic(kafka.bootstrap_servers, name, partitions=2)
    producer.produce(kafka.bootstrap_servers, name, [*events(0, 300), Record(b"bad", b"{not json")])

    run_ingest(spark, topic, kafka.bootstrap_servers)

    tables = layout(topic)
    assert {kind: columns for kind, (columns, _) in tables.items()} == {
        "bronze": ["ingestion_date"],
        "parsed": ["ingestion_date"],
        "dead_letter": ["ingestion_date"],
        "latest": [],  # MERGE updates its rows in place
    }
    assert all(props.get(OPTIMIZE_WRITE) == "true" for _, props in tables.values()), tables
    assert tables["bronze"][1]["delta.appendOnly"] == "true"
    # Each table names its topic in its own log: a full refresh deletes nothing else.
    assert all(props.get("kafkalake.topic") == name for _, props in tables.values()), tables
    # Bronze's file statistics are of what it is read by, and Delta wrote just those.
    stats_columns = ["partition", "offset", "kafka_timestamp", "ingested_at"]
    assert tables["bronze"][1]["delta.dataSkippingStatsColumns"] == ",".join(stats_columns)
    adds = DeltaTable(topic.path).get_add_actions(flatten=True)
    names = adds.schema.names
    assert sorted(k.removeprefix("min.") for k in names if k.startswith("min.")) == sorted(stats_columns)
    assert all(n == 0 for n in adds.column("null_count.offset").to_pylist())
    # Delta derived the column from each row's ingestion time, and laid the files out by it.
    bronze = read_rows(Path(topic.path))
    assert_exactly_once(bronze, name, kafka.bootstrap_servers)
    assert all(r["ingestion_date"] == local_date(r["ingested_at"], spark) for r in bronze)
    parsed = read_rows(Path(topic.parsed_path))
    assert len(parsed) == 300
    assert all(r["ingestion_date"] == local_date(r["_kafka"]["ingested_at"], spark) for r in parsed)
    dead = read_rows(Path(topic.dead_letter_path))
    assert [(r["reason"], r["ingestion_date"] is not None) for r in dead] == [("malformed_json", True)]
    for path in (topic.path, topic.parsed_path, topic.dead_letter_path):
        assert all("/ingestion_date=" in uri for uri in DeltaTable(path).file_uris())

    # The catalog changes its properties: the next ingest run sets them, no maintenance needed.
    changed = replace(
        topic,
        maintenance=replace(
            topic.maintenance, properties=((AUTO_COMPACT, "true"), (OPTIMIZE_WRITE, "false"))
        ),
    )
    producer.produce(kafka.bootstrap_servers, name, events(300, 100))
    run_ingest(spark, changed, kafka.bootstrap_servers)

    for kind, (_, props) in layout(changed).items():
        assert (props.get(OPTIMIZE_WRITE), props.get(AUTO_COMPACT)) == ("false", "true"), kind
    assert_exactly_once(read_rows(Path(topic.path)), name, kafka.bootstrap_servers)
    assert len(read_rows(Path(topic.parsed_path))) == 400

    # The catalog drops the partitioning: Delta cannot re-partition, so the run refuses to start.
    unpartitioned = replace(changed, maintenance=replace(changed.maintenance, partition_by=None))
    before = versions(topic)
    producer.produce(kafka.bootstrap_servers, name, events(400, 10))
    with pytest.raises(BadConfigError) as refused:
        run_ingest(spark, unpartitioned, kafka.bootstrap_servers)
    message = str(refused.value)
    assert f"table bronze.{topic.table} at {topic.path} is partitioned by ingestion_date" in message
    assert "but the catalog wants it not partitioned" in message
    assert "(maintenance.partition_by: ingestion_date)" in message and "kafkalake.cli.full_refresh" in message
    assert versions(topic) == before
    assert len(read_rows(Path(topic.path))) == 401


def test_a_parsed_column_partitions_the_parsed_table_only(spark, kafka, tmp_path):
    name = "it-partitioned-country"
    topic = make_topic(tmp_path, name, ParsedConfig(), maintenance=MaintenanceConfig(partition_by="country"))
    producer.create_topic(kafka.bootstrap_servers, name, partitions=1)
    producer.produce(kafka.bootstrap_servers, name, events(0, 30))

    run_ingest(spark, topic, kafka.bootstrap_servers)

    assert {kind: columns for kind, (columns, _) in layout(topic).items()} == {
        "bronze": [],
        "parsed": ["country"],
        "dead_letter": [],
    }
    parsed = read_rows(Path(topic.parsed_path))
    assert sorted(r["id"] for r in parsed) == list(range(30))
    assert {uri.split("/country=")[1].split("/")[0] for uri in DeltaTable(topic.parsed_path).file_uris()} == {
        "DE",
        "FR",
        "NL",
    }


def _encodings(table: Path) -> dict[str, set[str]]:
    """Each column's Parquet encodings in the table's one data file."""
    import pyarrow.parquet as pq

    (data,) = DeltaTable(str(table)).file_uris()
    group = pq.ParquetFile(data).metadata.row_group(0)
    return {group.column(i).path_in_schema: set(group.column(i).encodings) for i in range(group.num_columns)}


def test_a_column_of_many_values_is_written_without_a_dictionary(spark, tmp_path):
    """Parquet's dictionary stops at 128 KiB (launch/spark_conf): 10,000 values of 16 bytes are
    written plain, three values keep their dictionary; at parquet-java's 1 MiB both would have one."""
    frame = spark.range(40_000).selectExpr(
        "format_string('value-%010d', id % 10000) AS many",
        "element_at(array('a', 'b', 'c'), int(id % 3) + 1) AS few",
    )
    dictionary = {"PLAIN_DICTIONARY", "RLE_DICTIONARY"}
    frame.coalesce(1).write.format("delta").save(str(tmp_path / "ours"))
    ours = _encodings(tmp_path / "ours")
    assert not ours["many"] & dictionary and ours["few"] & dictionary
    spark.conf.set("parquet.dictionary.page.size", str(1024 * 1024))
    try:
        frame.coalesce(1).write.format("delta").save(str(tmp_path / "default"))
    finally:
        spark.conf.unset("parquet.dictionary.page.size")
    default = _encodings(tmp_path / "default")
    assert default["many"] & dictionary and default["few"] & dictionary
    # Both read back whole.
    assert DeltaTable(str(tmp_path / "ours")).to_pyarrow_table().num_rows == 40_000
