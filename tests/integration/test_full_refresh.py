"""Full-refresh protection against the real broker, Spark and Delta.

* the start guard refuses a table without its checkpoint, and a checkpoint without its table;
* ``python -m kafkalake.cli.full_refresh`` deletes table and checkpoint only while Kafka holds every
  record from offset 0, and otherwise refuses naming the partitions and the records lost.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient
from deltalake import write_deltalake

from kafkalake.cli import full_refresh
from kafkalake.config.catalog import load_catalog
from kafkalake.config.parsed import ParsedConfig
from kafkalake.config.topic import TopicConfig
from kafkalake.core.errors import NonRetryableError, TableStateError
from kafkalake.dev import producer
from kafkalake.dev.broker import LocalKafka
from kafkalake.lake.start_plan import check_safe_to_start
from kafkalake.spark.batch_writer import BatchWriter
from kafkalake.spark.stream import ensure_table, start_ingest

from .helpers import read_rows

pytestmark = pytest.mark.integration
#: These tests are about bronze and its checkpoint.
BRONZE_ONLY = ParsedConfig(enabled=False)


def records(count: int, partitions: int) -> list[producer.Record]:
    return [producer.Record(str(i).encode(), f'{{"n": {i}}}'.encode(), i % partitions) for i in range(count)]


@pytest.fixture(scope="module")
def landed_topic(spark, kafka: LocalKafka, tmp_path_factory) -> TopicConfig:
    """A topic landed once through the real ingest path (in-process), with its real checkpoint."""
    name = "it-guard"
    producer.create_topic(kafka.bootstrap_servers, name, partitions=2)
    producer.produce(kafka.bootstrap_servers, name, records(40, 2))
    path = tmp_path_factory.mktemp("guard") / "it_guard"
    topic = TopicConfig(
        name=name, freshness_sla=timedelta(hours=6), table="it_guard", path=str(path), parsed=BRONZE_ONLY
    )
    ensure_table(spark, topic)
    writer = BatchWriter(spark, topic)
    query = start_ingest(spark, topic, {"bootstrap.servers": kafka.bootstrap_servers}, writer)
    query.awaitTermination()
    assert len(read_rows(path)) == 40
    return topic


@pytest.fixture
def copy_of(landed_topic, tmp_path) -> TopicConfig:
    """A private copy of the landed table and checkpoint, for a test to break."""
    path = tmp_path / "it_guard"
    shutil.copytree(landed_topic.path, path)
    return replace(landed_topic, path=str(path))


def test_guard_lets_a_consistent_table_start(copy_of):
    check_safe_to_start(copy_of)


def test_guard_refuses_a_table_with_data_and_no_checkpoint(copy_of):
    shutil.rmtree(copy_of.checkpoint_path)
    with pytest.raises(TableStateError) as raised:
        check_safe_to_start(copy_of)
    message = str(raised.value)
    assert isinstance(raised.value, NonRetryableError)
    assert message.startswith("[table_state]")
    assert "holds 40 rows" in message and "checkpoint" in message and "missing or empty" in message
    assert "kafkalake.cli.full_refresh" in message  # what on-call can do instead


def test_guard_refuses_a_checkpoint_whose_table_is_gone(copy_of):
    table = Path(copy_of.path)
    shutil.rmtree(table / "_delta_log")
    for data in table.glob("*.parquet"):
        data.unlink()
    with pytest.raises(TableStateError, match=r"says 40 records were landed, but the table .* is gone"):
        check_safe_to_start(copy_of)


def test_guard_refuses_a_checkpoint_whose_table_was_recreated_empty(spark, copy_of, tmp_path):
    saved = tmp_path / "saved-checkpoint"
    shutil.copytree(copy_of.checkpoint_path, saved)
    shutil.rmtree(copy_of.path)
    ensure_table(spark, copy_of)  # an empty table where the old one was, its checkpoint put back
    shutil.copytree(saved, copy_of.checkpoint_path)
    with pytest.raises(TableStateError, match=r"says 40 records were landed, .* holds no rows"):
        check_safe_to_start(copy_of)


# ---------------------------------------------------------------------------------------------
# the full-refresh command


@pytest.fixture
def refresh_catalog(monkeypatch, tmp_path) -> Path:
    file = tmp_path / "topics.yaml"
    file.write_text(
        "topics:\n  - name: it-refresh-all\n    freshness_sla: 1h\n"
        "  - name: it-refresh-gone\n    freshness_sla: 1h\n"
        "  - name: it-refresh-locked\n    freshness_sla: 1h\n"
        "  - name: it-refresh-compacted\n    freshness_sla: 1h\n"
    )
    monkeypatch.setenv("KAFKALAKE_CATALOG", str(file))
    monkeypatch.setenv("KAFKALAKE_LAKE_ROOT", str(tmp_path / "lake"))
    return file


def table_with_checkpoint(topic: TopicConfig) -> None:
    # As kafkalake creates bronze (its description): a full refresh deletes only the topic's own tables.
    description = f"Kafka topic {topic.name}, as landed by kafkalake (bronze: bytes as they came)"
    write_deltalake(topic.path, pa.table({"offset": [0, 1, 2]}), description=description)
    checkpoint = Path(topic.checkpoint_path)
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "offsets" / "0").write_text("v1\n{}\n{}\n")


def test_full_refresh_deletes_table_and_checkpoint_when_kafka_holds_everything(
    kafka, refresh_catalog, tmp_path, capsys
):
    producer.create_topic(kafka.bootstrap_servers, "it-refresh-all", partitions=2)
    producer.produce(kafka.bootstrap_servers, "it-refresh-all", records(10, 2))
    topic = load_catalog(refresh_catalog, tmp_path / "lake").topic("it-refresh-all")
    table_with_checkpoint(topic)
    args = ["--topic", topic.name, "--bootstrap-servers", kafka.bootstrap_servers]

    assert full_refresh.main(args) == 0  # without --yes: says what it would do, deletes nothing
    assert Path(topic.checkpoint_path).is_dir() and (Path(topic.path) / "_delta_log").is_dir()
    assert "re-run with --yes" in capsys.readouterr().out

    assert full_refresh.main([*args, "--yes"]) == 0

    out = capsys.readouterr().out
    assert "every record of topic 'it-refresh-all' from offset 0 on all 2 partitions (10 records)" in out
    assert not Path(topic.path).exists()
    assert not Path(topic.checkpoint_path).exists()


def test_full_refresh_refused_when_kafka_lost_the_start_of_a_partition(
    kafka, refresh_catalog, tmp_path, capsys
):
    name = "it-refresh-gone"
    producer.create_topic(kafka.bootstrap_servers, name, partitions=2)
    producer.produce(kafka.bootstrap_servers, name, records(20, 2))  # 10 per partition
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    for future in admin.delete_records([TopicPartition(name, 1, 4)]).values():
        future.result(timeout=30)
    topic = load_catalog(refresh_catalog, tmp_path / "lake").topic(name)
    table_with_checkpoint(topic)

    code = full_refresh.main(["--topic", name, "--yes", "--bootstrap-servers", kafka.bootstrap_servers])

    assert code == 1
    err = capsys.readouterr().err
    assert "full refresh REFUSED" in err
    assert "partition 1: offsets 0..3 (4 records)" in err
    assert "partition 0" not in err
    assert "lose 4 records" in err
    assert Path(topic.checkpoint_path).is_dir()
    assert (Path(topic.path) / "_delta_log").is_dir()


def test_full_refresh_refuses_while_an_ingest_holds_the_run_lock_and_deletes_nothing(
    kafka, refresh_catalog, tmp_path, capsys
):
    name = "it-refresh-locked"
    producer.create_topic(kafka.bootstrap_servers, name, partitions=1)
    producer.produce(kafka.bootstrap_servers, name, records(3, 1))
    topic = load_catalog(refresh_catalog, tmp_path / "lake").topic(name)
    table_with_checkpoint(topic)
    # Another process holds the lock, as a running ingest job does.
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, topic.checkpoint_path], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        code = full_refresh.main(["--topic", name, "--yes", "--bootstrap-servers", kafka.bootstrap_servers])
    finally:
        holder.kill()
        holder.wait()
    assert code == 1
    err = capsys.readouterr().err
    assert "full refresh REFUSED" in err and f"pid {holder.pid}" in err
    assert (Path(topic.path) / "_delta_log").is_dir() and Path(topic.checkpoint_path).is_dir()


HOLD_LOCK = """
import sys, time
from kafkalake.lake.checkpoint_lock import checkpoint_lock
with checkpoint_lock(sys.argv[1]):
    print("locked", flush=True)
    time.sleep(120)
"""


def test_full_refresh_refuses_a_compacted_topic_unless_told(kafka, refresh_catalog, tmp_path, capsys):
    name = "it-refresh-compacted"
    producer.create_topic(kafka.bootstrap_servers, name, partitions=1, config={"cleanup.policy": "compact"})
    producer.produce(kafka.bootstrap_servers, name, records(4, 1))
    topic = load_catalog(refresh_catalog, tmp_path / "lake").topic(name)
    table_with_checkpoint(topic)
    args = ["--topic", name, "--yes", "--bootstrap-servers", kafka.bootstrap_servers]

    assert full_refresh.main(args) == 1
    assert "is compacted" in capsys.readouterr().err
    assert (Path(topic.path) / "_delta_log").is_dir()

    assert full_refresh.main([*args, "--allow-compacted"]) == 0
    assert not Path(topic.path).exists()
