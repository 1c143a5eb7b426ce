"""Parsed, dead-letter and latest-row tables from one Kafka read: the real broker, Spark and Delta.

The stream runs in the session's SparkSession (the same code the ingest job runs); tables are read
back with delta-rs, an independent reader.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from kafkalake.config.parsed import Expectation, ParsedConfig
from kafkalake.core.errors import ExpectationFailedError, Kind, SchemaRejectedError
from kafkalake.dev import producer
from kafkalake.dev.producer import Record
from kafkalake.lake import parsed_backlog
from kafkalake.lake.schema_history import SchemaHistory
from kafkalake.spark.batch_writer import BatchWriter
from kafkalake.spark.follow_ups import REFRESH_SCHEMA, run_follow_ups
from kafkalake.spark.ingest_run import IngestRun
from kafkalake.spark.schema_refresh import refresh

from .helpers import assert_exactly_once, make_topic, read_rows
from .helpers import run_ingest as run

pytestmark = pytest.mark.integration


def spots(rows: list[dict[str, Any]]) -> list[tuple[int, int]]:
    return sorted((r["_kafka"]["partition"], r["_kafka"]["offset"]) for r in rows)


def test_every_record_is_parsed_or_dead_lettered_with_its_reason(spark, kafka, tmp_path):
    name = "it-dead-letters"
    topic = make_topic(
        tmp_path,
        name,
        ParsedConfig(
            evolution="rescue",
            type_hints=(("amount", "bigint"), ("detail.qty", "int"), ("scores", "array<bigint>")),
            max_value_bytes=4096,
            expectations=(
                Expectation("known_currency", "currency IN ('EUR', 'USD')", "drop"),
                Expectation("small_amount", "amount < 900", "warn"),
            ),
        ),
    )
    producer.create_topic(kafka.bootstrap_servers, name, partitions=2)
    good = [
        Record(f"k{i}".encode(), json.dumps({"id": i, "amount": i, "currency": "EUR"}).encode())
        for i in range(1000)
    ]
    bad = {
        "malformed_json": b'{"id": 1, "amount": ',
        "invalid_utf8": b'{"id": "\xff\xfe"}',
        "empty_value": b"",
        "oversize": json.dumps({"id": 1, "pad": "x" * 5000}).encode(),
        "expectation:known_currency": json.dumps({"id": 1, "amount": 1, "currency": "XXX"}).encode(),
    }
    wrong_types = {
        5000: {"amount": "a lot"},
        5001: {"detail": {"qty": "three", "note": "gift"}},  # inside a struct
        5002: {"scores": [1, "x"]},  # inside an array
    }
    wrong = [
        Record(b"w", json.dumps({"id": i, "amount": 1, "currency": "USD", **fields}).encode())
        for i, fields in wrong_types.items()
    ]
    records = [*good, *(Record(b"bad", v) for v in bad.values()), *wrong]
    placed = producer.produce(kafka.bootstrap_servers, name, records)

    writer = run(spark, topic, kafka.bootstrap_servers)

    parsed = read_rows(Path(topic.parsed_path))
    dead = read_rows(Path(topic.dead_letter_path))
    assert len(parsed) + len(dead) == len(records)
    assert_exactly_once(read_rows(Path(topic.path)), name, kafka.bootstrap_servers)
    # Each bad record is in the dead-letter table once, at its offset, with its reason and bytes.
    by_reason = {r["reason"]: r for r in dead}
    assert set(by_reason) == set(bad)
    for (reason, value), spot in zip(bad.items(), placed[1000 : 1000 + len(bad)], strict=True):
        row = by_reason[reason]
        assert (row["partition"], row["offset"]) == spot
        assert row["value"] == value
    assert "over max_value_bytes 4096" in by_reason["oversize"]["detail"]
    # A wrong type is not a silent null, at any depth: the row is parsed, the field kept as JSON.
    rescued = {r["id"]: json.loads(r["_rescued_data"]) for r in parsed if r["_rescued_data"] is not None}
    assert rescued == wrong_types
    by_id = {r["id"]: r for r in parsed}
    assert by_id[5000]["amount"] is None and by_id[5002]["scores"] is None
    assert by_id[5001]["detail"]["qty"] is None
    assert sorted(by_id) == [*range(1000), *wrong_types]
    # A warn expectation keeps its rows and counts them; the stats match the tables.
    # 100 amounts of 900 and more, and the wrong-typed one: a rule that is null for a row is broken.
    assert writer.stats.expectation_violations["small_amount"] == 101
    assert writer.stats.dead_letters == {reason: 1 for reason in bad}
    assert writer.stats.parsed_rows == len(parsed)


def produce_events(bootstrap: str, name: str, start: int, count: int, extra: dict[str, Any]) -> None:
    records = [
        Record(str(i).encode(), json.dumps({"id": i, "kind": "order", **extra}).encode())
        for i in range(start, start + count)
    ]
    producer.produce(bootstrap, name, records)


@pytest.mark.parametrize("mode", ["addNewColumns", "rescue", "failOnNewColumns"])
def test_a_new_field_mid_stream_under_each_evolution_mode(spark, kafka, tmp_path, mode):
    name = f"it-evolve-{mode.lower()}"
    topic = make_topic(tmp_path, name, ParsedConfig(evolution=mode), max_offsets=150)
    producer.create_topic(kafka.bootstrap_servers, name, partitions=2)
    produce_events(kafka.bootstrap_servers, name, 0, 200, {})
    run(spark, topic, kafka.bootstrap_servers)
    produce_events(kafka.bootstrap_servers, name, 200, 200, {"coupon": "SAVE10"})
    history = SchemaHistory(topic.schema_dir)

    if mode == "failOnNewColumns":
        with pytest.raises(SchemaRejectedError, match="coupon"):
            run(spark, topic, kafka.bootstrap_servers)
        assert history.versions() == [1] and history.pending() is not None
        # Bronze did not wait for the parsed side: every record landed, and the checkpoint moved on.
        assert len(read_rows(Path(topic.path))) == 400
        assert_exactly_once(read_rows(Path(topic.path)), name, kafka.bootstrap_servers)
        backlog = parsed_backlog.read(topic)
        assert backlog is not None and backlog.kind == "schema_rejected"
        assert max(r["id"] for r in read_rows(Path(topic.parsed_path))) < 200
        # Still rejected: a run with nothing new in Kafka tries to catch up, and fails the same way.
        with pytest.raises(SchemaRejectedError, match="coupon"):
            run(spark, topic, kafka.bootstrap_servers)
        # The documented accept step; the next run catches the parsed tables up from bronze: no gap,
        # no duplicate, and no backlog left.
        history.accept_pending()
        run(spark, topic, kafka.bootstrap_servers)
        assert parsed_backlog.read(topic) is None
    else:
        run(spark, topic, kafka.bootstrap_servers)

    rows = read_rows(Path(topic.parsed_path))
    assert sorted(r["id"] for r in rows) == list(range(400))
    assert_exactly_once(read_rows(Path(topic.path)), name, kafka.bootstrap_servers)
    new = [r for r in rows if r["id"] >= 200]
    if mode == "rescue":
        assert "coupon" not in rows[0]
        assert {json.loads(r["_rescued_data"])["coupon"] for r in new} == {"SAVE10"}
        assert history.versions() == [1]
    else:
        assert {r["coupon"] for r in new} == {"SAVE10"}
        assert {r["coupon"] for r in rows if r["id"] < 200} == {None}
        assert all(r["_rescued_data"] is None for r in rows)
        assert history.versions() == [1, 2]
        assert history.read(2).changes == ("+ coupon: string",)


def test_latest_row_per_key_matches_a_fold_over_the_events(spark, kafka, tmp_path, monkeypatch):
    # The latest table is created once, before its first MERGE: no batch appends to it to add
    # columns it already has (an empty DataFrame from Python costs a job with a Python worker).
    made: list[object] = []
    create = spark.createDataFrame
    monkeypatch.setattr(spark, "createDataFrame", lambda *a, **k: made.append(a) or create(*a, **k))
    name = "it-upsert"
    topic = make_topic(tmp_path, name, ParsedConfig(latest_by_key=True, changelog=True), max_offsets=2500)
    producer.create_topic(kafka.bootstrap_servers, name, partitions=4)
    rng = random.Random(11)
    records = []
    for i in range(10_000):
        key = f"user-{rng.randrange(1000)}".encode()
        tombstone = rng.random() < 0.1
        value = None if tombstone else json.dumps({"seq": i, "score": rng.randrange(100)}).encode()
        records.append(Record(key, value))
    # Keys keep their partition (Kafka's default partitioner), so offsets order each key's events.
    producer.produce(kafka.bootstrap_servers, name, records[:6000])
    run(spark, topic, kafka.bootstrap_servers)
    producer.produce(kafka.bootstrap_servers, name, records[6000:])
    writer = run(spark, topic, kafka.bootstrap_servers)

    expected: dict[bytes, int] = {}
    for record in records:
        assert record.key is not None
        if record.value is None:
            expected.pop(record.key, None)
        else:
            expected[record.key] = json.loads(record.value)["seq"]
    latest = read_rows(Path(topic.latest_path))
    assert len(latest) == len({r["_kafka"]["key"] for r in latest})
    assert {r["_kafka"]["key"]: r["seq"] for r in latest} == expected
    assert writer.stats.batches == 2
    assert made == []
    tombstones = sum(r.value is None for r in records)
    assert len(read_rows(Path(topic.parsed_path))) == len(records) - tombstones
    assert read_rows(Path(topic.dead_letter_path)) == []


def test_a_deleted_key_that_moved_partition_stays_deleted_across_batches(spark, kafka, tmp_path):
    """A key that moved partition (partitions added): its record from before the move in partition 1,
    its tombstone after the move in partition 0. The source splits a batch across partitions by
    offsets, so the tombstone came in the first batch and the older record in the last, whose MERGE
    found no row and inserted it: the deleted key came back."""
    name = "it-moved-key"
    topic = make_topic(tmp_path, name, ParsedConfig(latest_by_key=True, changelog=True), max_offsets=4)
    producer.create_topic(kafka.bootstrap_servers, name, partitions=2)
    fillers = [Record(f"f{i}".encode(), json.dumps({"seq": i}).encode(), 1) for i in range(8)]
    producer.produce(kafka.bootstrap_servers, name, [*fillers, Record(b"k", b'{"seq": 8}', 1)])
    time.sleep(0.05)  # the tombstone's Kafka timestamp is later: it is the key's newest record
    producer.produce(kafka.bootstrap_servers, name, [Record(b"k", None, 0)])

    writer = run(spark, topic, kafka.bootstrap_servers)

    assert writer.stats.batches >= 2 and writer.latest_batches >= 2
    assert {r["_kafka"]["key"] for r in read_rows(Path(topic.latest_path))} == {f.key for f in fillers}
    # The record itself is kept where it belongs: in the parsed table, once.
    assert [r["seq"] for r in read_rows(Path(topic.parsed_path)) if r["_kafka"]["key"] == b"k"] == [8]


def test_bronze_only_topic_writes_no_parsed_tables(spark, kafka, tmp_path):
    name = "it-bronze-only"
    topic = make_topic(tmp_path, name, replace(ParsedConfig(), enabled=False))
    producer.create_topic(kafka.bootstrap_servers, name, partitions=1)
    produce_events(kafka.bootstrap_servers, name, 0, 10, {})
    writer = run(spark, topic, kafka.bootstrap_servers)
    bronze = read_rows(Path(topic.path))
    assert len(bronze) == 10
    assert not Path(topic.parsed_path).exists()
    assert SchemaHistory(topic.schema_dir).versions() == []
    # What landed is measured during the write (no cache, no second pass), and matches the table.
    assert writer.stats.bronze_rows == 10
    assert writer.stats.bronze_bytes == sum(len(r["key"]) + len(r["value"]) for r in bronze)
    newest = max(r["kafka_timestamp"] for r in bronze)
    assert writer.stats.newest_timestamp_ms == round(newest.timestamp() * 1000)

    # A batch written again (a retry after its commit) is skipped by Delta, and still counted.
    from pyspark.sql import functions as F

    again = BatchWriter(spark, topic)
    again.started(writer.app_id)
    first_batch = spark.read.format("delta").load(topic.path).drop("ingestion_date")
    again(first_batch.where(F.col("offset") < 4), 0)
    assert len(read_rows(Path(topic.path))) == 10
    assert (again.stats.bronze_rows, again.stats.batches) == (4, 1)


def test_schema_refresh_writes_a_version_only_when_the_schema_changed(spark, kafka, tmp_path):
    name = "it-refresh"
    # Bronze landed before the topic was parsed: the refresh finds the first schema itself.
    raw = make_topic(tmp_path, name, replace(ParsedConfig(), enabled=False))
    topic = replace(raw, parsed=ParsedConfig(table=raw.table))
    producer.create_topic(kafka.bootstrap_servers, name, partitions=1)
    produce_events(kafka.bootstrap_servers, name, 0, 100, {})
    run(spark, raw, kafka.bootstrap_servers)
    history = SchemaHistory(topic.schema_dir)

    first = refresh(spark, topic)
    assert first.sampled == 100 and first.written is not None
    assert first.written.changes == ("+ id: bigint", "+ kind: string")
    assert refresh(spark, topic).written is None
    assert history.versions() == [1]

    produce_events(kafka.bootstrap_servers, name, 100, 50, {"coupon": "SAVE10"})
    run(spark, raw, kafka.bootstrap_servers)
    rescue_only = refresh(spark, replace(topic, parsed=replace(topic.parsed, evolution="rescue")))
    assert rescue_only.written is None and [str(c) for c in rescue_only.drift] == ["+ coupon: string"]
    second = refresh(spark, topic)
    assert second.written is not None and second.written.changes == ("+ coupon: string",)
    assert history.versions() == [1, 2]
    assert [f["name"] for f in history.read(2).schema["fields"]] == ["id", "kind", "coupon"]


def test_the_ingests_refresh_reads_a_sample_only_when_the_run_left_something_to_find(spark, kafka, tmp_path):
    name = "it-refresh-skip"
    topic = make_topic(tmp_path, name, ParsedConfig(), max_offsets=40)  # addNewColumns
    bootstrap = kafka.bootstrap_servers
    producer.create_topic(bootstrap, name, partitions=1)
    history = SchemaHistory(topic.schema_dir)

    # The second batch meets a new field and adds it itself: every record fits whole, so the
    # follow-up reads no sample, and a refresh of the same window would indeed find nothing.
    produce_events(bootstrap, name, 0, 40, {})
    produce_events(bootstrap, name, 40, 20, {"coupon": "SAVE10"})
    fits = run(spark, topic, bootstrap).stats
    assert (fits.parsed_rows, fits.rescued_rows, history.versions()) == (60, 0, [1, 2])
    done = run_follow_ups(spark, topic, fits)
    assert done[REFRESH_SCHEMA] == (
        f"topic {name}: schema version 2 current, no sample read: the run's 60 parsed records fit it "
        "whole (addNewColumns); versions written by its batches: [1, 2]"
    )
    again = refresh(spark, topic)
    assert (again.sampled, again.written, again.drift) == (60, None, ())

    # A value of another type than its column is rescued: the follow-up reads its sample (where
    # the window's majority keeps the column's type).
    produce_events(bootstrap, name, 60, 5, {"id": "not a number"})
    conflict = run(spark, topic, bootstrap).stats
    assert conflict.rescued_rows == 5
    done = run_follow_ups(spark, topic, conflict)
    assert done[REFRESH_SCHEMA] == f"topic {name}: 65 values sampled; schema unchanged"
    assert history.versions() == [1, 2]

    # A type hint added to the catalog since: the refresh writes it, however well the run fit.
    hinted = replace(topic, parsed=replace(topic.parsed, type_hints=(("amount", "decimal(10,2)"),)))
    done = run_follow_ups(spark, hinted, fits)
    assert "values sampled; schema version 3" in done[REFRESH_SCHEMA], done
    assert history.versions() == [1, 2, 3]
    # Once the hint is in the current version, a run that fit skips the sample again.
    assert run_follow_ups(spark, hinted, fits)[REFRESH_SCHEMA].startswith(
        f"topic {name}: schema version 3 current, no sample read"
    )


def test_a_pinned_schema_is_used_as_given(spark, kafka, tmp_path):
    name = "it-pinned"
    pinned = (("id", "bigint"), ("amount", "decimal(10,2)"))
    topic = make_topic(tmp_path, name, ParsedConfig(evolution="rescue", schema=pinned))
    producer.create_topic(kafka.bootstrap_servers, name, partitions=1)
    values = [{"id": 1, "amount": 12.5}, {"id": 2, "amount": 0.1, "note": "extra"}]
    producer.produce(kafka.bootstrap_servers, name, [Record(None, json.dumps(v).encode()) for v in values])
    run(spark, topic, kafka.bootstrap_servers)

    rows = sorted(read_rows(Path(topic.parsed_path)), key=lambda r: r["id"])
    assert [(r["id"], str(r["amount"])) for r in rows] == [(1, "12.50"), (2, "0.10")]
    assert [r["_rescued_data"] for r in rows] == [None, '{"note":"extra"}']
    history = SchemaHistory(topic.schema_dir)
    assert history.versions() == [1] and history.read(1).source == "pinned in the catalog"


def appends(path: str) -> int:
    """Commits that added rows to a Delta table (not its creation), read with delta-rs."""
    from deltalake import DeltaTable

    return sum(1 for commit in DeltaTable(path).history() if commit["operation"] == "WRITE")


def test_the_direct_write_stops_before_its_commit_at_a_record_it_cannot_take(spark, kafka, tmp_path):
    name = "it-direct-write"
    topic = make_topic(tmp_path, name, ParsedConfig(), max_offsets=100)
    producer.create_topic(kafka.bootstrap_servers, name, partitions=1)
    produce_events(kafka.bootstrap_servers, name, 0, 200, {})

    # Clean batches: each written straight from its parse, one commit each, counted on the way.
    writer = run(spark, topic, kafka.bootstrap_servers)
    assert writer.direct_parse
    assert appends(topic.parsed_path) == 2
    assert (writer.stats.parsed_rows, writer.stats.bronze_rows) == (200, 200)
    bronze = read_rows(Path(topic.path))
    assert writer.stats.bronze_bytes == sum(len(r["key"]) + len(r["value"]) for r in bronze)

    # A malformed record in the middle of the next run's first batch: that write stops before Delta
    # commits, and the batch and the rest of the run take the checked path. Nothing twice, nothing lost.
    produce_events(kafka.bootstrap_servers, name, 200, 50, {})
    producer.produce(kafka.bootstrap_servers, name, [Record(b"bad", b'{"id": 250, "kind": ')])
    produce_events(kafka.bootstrap_servers, name, 251, 149, {})
    writer = run(spark, topic, kafka.bootstrap_servers)
    assert not writer.direct_parse
    assert appends(topic.parsed_path) == 4
    rows = read_rows(Path(topic.parsed_path))
    assert sorted(r["id"] for r in rows) == [i for i in range(400) if i != 250]
    dead = read_rows(Path(topic.dead_letter_path))
    assert [(r["offset"], r["reason"]) for r in dead] == [(250, "malformed_json")]
    assert writer.stats.parsed_rows == 199 and writer.stats.dead_letters == {"malformed_json": 1}

    # A batch written again after its commits (a retry): Delta skips the direct write, which then
    # measured nothing; the checked path counts the batch, and its writes are skipped too.
    from pyspark.sql import functions as F

    again = BatchWriter(spark, topic)
    again.started(writer.app_id)
    landed = spark.read.format("delta").load(topic.path).drop("ingestion_date")
    again(landed.where(F.col("offset") < 100), 0)
    assert appends(topic.parsed_path) == 4
    assert len(read_rows(Path(topic.parsed_path))) == 399
    assert again.stats.parsed_rows == 100 and again.direct_parse


def test_a_broken_fail_expectation_stops_the_direct_write_and_parks_the_parsed_side(spark, kafka, tmp_path):
    name = "it-direct-fail"
    rule = Expectation("non_negative", "id >= 0", "fail")
    topic = make_topic(tmp_path, name, ParsedConfig(expectations=(rule,)), max_offsets=100)
    producer.create_topic(kafka.bootstrap_servers, name, partitions=1)
    produce_events(kafka.bootstrap_servers, name, 0, 100, {})
    run(spark, topic, kafka.bootstrap_servers)
    assert appends(topic.parsed_path) == 1

    # One record breaks the rule: the direct write stops before its commit, the checked path names
    # the record, and the parsed side parks while bronze lands everything.
    produce_events(kafka.bootstrap_servers, name, 100, 30, {})
    producer.produce(kafka.bootstrap_servers, name, [Record(b"neg", json.dumps({"id": -1}).encode())])
    produce_events(kafka.bootstrap_servers, name, 131, 20, {})
    with pytest.raises(ExpectationFailedError, match="partition 0 offset 130"):
        run(spark, topic, kafka.bootstrap_servers)
    assert appends(topic.parsed_path) == 1
    assert sorted(r["id"] for r in read_rows(Path(topic.parsed_path))) == list(range(100))
    assert len(read_rows(Path(topic.path))) == 151
    backlog = parsed_backlog.read(topic)
    assert backlog is not None and backlog.start == {0: 100}


def test_a_parsed_failure_no_retry_can_fix_is_parsed_unwritable_not_unknown(spark, kafka, tmp_path):
    """A rule that fails at run time on every record (here: raise_error) parks the parsed side in
    the stream and fails again catching up from bronze: the run's failure is parsed_unwritable (not
    retried), bronze holds every record, and nothing reached the parsed table."""
    name = "it-parsed-unwritable"
    rule = Expectation("boom", "raise_error('no rule can read this') IS NULL", "warn")
    topic = make_topic(tmp_path, name, ParsedConfig(expectations=(rule,)))
    producer.create_topic(kafka.bootstrap_servers, name, partitions=1)
    produce_events(kafka.bootstrap_servers, name, 0, 10, {})
    failed = IngestRun(spark, topic, {"bootstrap.servers": kafka.bootstrap_servers}).execute()
    assert failed is not None and failed.kind is Kind.PARSED_UNWRITABLE and not failed.retryable
    assert "no rule can read this" in failed.message and "bronze landed every record" in failed.message
    assert len(read_rows(Path(topic.path))) == 10
    assert not Path(topic.parsed_path).exists() or read_rows(Path(topic.parsed_path)) == []
    backlog = parsed_backlog.read(topic)
    assert backlog is not None and backlog.start == {0: 0}
