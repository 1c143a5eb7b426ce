"""Transactional producers: what an aborted transaction wrote never reaches bronze, and an open
transaction starts no Spark job. The real broker and Spark; bronze read back with delta-rs."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from kafkalake.config.parsed import ParsedConfig
from kafkalake.dev import producer
from kafkalake.kafka import offsets
from kafkalake.lake.checkpoint import read_checkpoint

from .helpers import make_topic, read_rows
from .helpers import run_ingest as run

pytestmark = pytest.mark.integration


def test_aborted_transactions_stay_out_of_bronze_and_an_open_one_starts_no_job(spark, kafka, tmp_path):
    from confluent_kafka import Producer

    name = "it-transactions"
    topic = make_topic(tmp_path, name, replace(ParsedConfig(), enabled=False))
    producer.create_topic(kafka.bootstrap_servers, name, partitions=1)
    txn = Producer({"bootstrap.servers": kafka.bootstrap_servers, "transactional.id": "kafkalake-it-txn"})
    txn.init_transactions(30)

    def transaction(values: list[bytes], commit: bool) -> None:
        txn.begin_transaction()
        for value in values:
            txn.produce(name, key=b"k", value=value)
        # On the broker before the abort: librdkafka would otherwise drop them unsent.
        assert txn.flush(30) == 0
        if commit:
            txn.commit_transaction(30)
        else:
            txn.abort_transaction(30)

    committed = [f"ok-{i}".encode() for i in range(20)]
    transaction(committed[:10], commit=True)
    transaction([f"aborted-{i}".encode() for i in range(5)], commit=False)
    transaction(committed[10:], commit=True)

    run(spark, topic, kafka.bootstrap_servers)

    bronze = read_rows(Path(topic.path))
    assert sorted(r["value"] for r in bronze) == sorted(committed)
    # The offsets have gaps (the 5 aborted records and each transaction's marker), which the
    # stream passes without calling them data loss.
    assert sorted(r["offset"] for r in bronze) == [*range(10), *range(17, 27)]

    # A transaction still open: its records are not committed, so the pre-flight finds nothing new
    # (Kafka's last stable offset), where a read_uncommitted client would start a Spark job.
    txn.begin_transaction()
    for i in range(3):
        txn.produce(name, key=b"k", value=f"open-{i}".encode())
    txn.flush(30)
    try:
        state = read_checkpoint(Path(topic.checkpoint_path), name)
        client = {"bootstrap.servers": kafka.bootstrap_servers}
        ends = {p: high for p, (_low, high) in offsets.watermarks(client, name).items()}
        assert not offsets.decide(state, ends).run
        uncommitted = {**client, "isolation.level": "read_uncommitted"}
        ends = {p: high for p, (_low, high) in offsets.watermarks(uncommitted, name).items()}
        assert offsets.decide(state, ends).run
    finally:
        txn.abort_transaction(30)

    # The next run after the abort lands nothing more.
    run(spark, topic, kafka.bootstrap_servers)
    assert sorted(r["value"] for r in read_rows(Path(topic.path))) == sorted(committed)
