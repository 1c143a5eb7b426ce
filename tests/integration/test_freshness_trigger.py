"""The freshness watcher's trigger against the session's real broker and a real Delta table (written
with delta-rs, carrying the offsets record the ingest's commits carry), outside Airflow: what it
sees (watermarks, the table's offsets, the oldest unlanded record's time, the bytes waiting), the
events its ``run`` yields, and the backoff of a connection whose broker does not answer, shared by
every topic on it. The Kafka settings are handed in (in the triggerer they come from the connection).
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa
import pytest
from deltalake import CommitProperties, write_deltalake

from kafkalake.airflow import freshness_trigger
from kafkalake.airflow.freshness_trigger import FreshnessTrigger
from kafkalake.config.freshness import decide
from kafkalake.dev import producer
from kafkalake.dev.broker import LocalKafka, free_port
from kafkalake.dev.producer import Record
from kafkalake.kafka.freshness_probe import Probe
from kafkalake.lake.table_position import commit_metadata

pytestmark = [pytest.mark.integration, pytest.mark.freshness]


class HandedTrigger(FreshnessTrigger):
    """The trigger with its Kafka settings handed in instead of looked up in Airflow."""

    settings: ClassVar[dict[str, str]] = {}

    async def _open_probe(self, shared: Any) -> Any:
        return await shared.call(Probe, self.settings)


def trigger(
    tmp_path: Path, topic: str, settings: dict[str, str], conn_id: str, **kwargs: Any
) -> HandedTrigger:
    made = HandedTrigger(
        topic=topic,
        table_path=str(tmp_path / "table"),
        kafka_conn_id=conn_id,
        sla_seconds=kwargs.pop("sla_seconds", 1800),
        floor_seconds=kwargs.pop("floor_seconds", 10),
        file_bytes=kwargs.pop("file_bytes", 10**9),
    )
    made.settings = settings  # type: ignore[misc]
    return made


def land(path: Path, end: dict[int, int], rows: int) -> None:
    """A bronze-like table holding the offsets below ``end``."""
    data = pa.table({"value": [b"x" * 100] * rows})
    metadata = commit_metadata(end, batch=0, query="q")
    write_deltalake(
        str(path), data, commit_properties=CommitProperties(custom_metadata={"userMetadata": metadata})
    )


async def observed(watcher: FreshnessTrigger) -> Any:
    """One look of the watcher, on a connection of its own."""
    shared = freshness_trigger._join(watcher.kafka_conn_id)
    try:
        return await watcher.observe(shared, None)
    finally:
        await freshness_trigger._leave(shared)


def test_it_sees_what_waits_and_when_the_oldest_of_it_was_produced(tmp_path: Path, kafka: LocalKafka):
    topic = "fresh-probe"
    producer.create_topic(kafka.bootstrap_servers, topic, partitions=2)
    producer.produce(kafka.bootstrap_servers, topic, [Record(b"a", b"{}", 0)])
    time.sleep(1.5)
    after_first = datetime.now(UTC)
    producer.produce(
        kafka.bootstrap_servers,
        topic,
        [Record(b"b", b"{}", 0), Record(b"c", b"{}", 1), Record(b"d", b"{}", 1)],
    )
    land(tmp_path / "table", {0: 1}, rows=1)
    watcher = trigger(tmp_path, topic, {"bootstrap.servers": kafka.bootstrap_servers}, "probe_conn")

    seen = asyncio.run(observed(watcher))
    assert (dict(seen.high), dict(seen.committed or {})) == ({0: 2, 1: 2}, {0: 1})
    assert seen.lag() == {0: 1, 1: 2}
    # Not record "a" (landed 1.5 s earlier): the oldest waiting was produced after it.
    assert seen.oldest_unlanded is not None
    assert after_first - timedelta(milliseconds=500) <= seen.oldest_unlanded <= datetime.now(UTC)
    assert seen.bytes_waiting is not None and seen.bytes_waiting > 0
    assert freshness_trigger._connections == {}, "the last trigger of a connection closes its client"


def test_run_queues_for_a_file_s_worth_after_the_floor(tmp_path: Path, kafka: LocalKafka):
    topic = "fresh-run"
    producer.create_topic(kafka.bootstrap_servers, topic, partitions=1)
    producer.produce(kafka.bootstrap_servers, topic, [Record(None, b"{}", 0)] * 5)
    land(tmp_path / "table", {0: 2}, rows=2)  # landed just now: the floor (10 s) holds the next run
    watcher = trigger(
        tmp_path, topic, {"bootstrap.servers": kafka.bootstrap_servers}, "run_conn", file_bytes=1
    )

    async def first_event() -> tuple[Any, float]:
        started = time.monotonic()
        events = watcher.run()
        try:
            event = await asyncio.wait_for(anext(events), timeout=40)
        finally:
            await events.aclose()
        return event, time.monotonic() - started

    event, waited = asyncio.run(first_event())
    assert "file's worth" in event.payload["reason"], event.payload
    assert event.payload["waiting"] == 3
    assert 5 <= waited <= 25, waited
    assert freshness_trigger._connections == {}


def test_a_broker_that_does_not_answer_is_backed_off_for_every_topic_on_it(tmp_path: Path):
    closed = {"bootstrap.servers": f"127.0.0.1:{free_port()}", "socket.timeout.ms": "2000"}
    one, two = (trigger(tmp_path, t, closed, "down_conn") for t in ("down-a", "down-b"))

    async def look() -> tuple[Any, Any, float, bool]:
        shared = freshness_trigger._join("down_conn")
        also = freshness_trigger._join("down_conn")
        assert shared is also and shared.users == 2
        try:
            first = await one.observe(shared, None)
            backing_off = shared.backing_off()
            started = time.monotonic()
            second = await two.observe(shared, None)
            return first, second, time.monotonic() - started, backing_off
        finally:
            await freshness_trigger._leave(shared)
            await freshness_trigger._leave(also)

    first, second, seconds, backing_off = asyncio.run(look())
    assert backing_off
    assert first.high == {} and second.high == {}
    assert seconds < 1, "the second topic did not wait for the broker again"
    # Blind, not "nothing waits": the heartbeat queues a run for its pre-flight to say why.
    assert first.blind is not None and first.blind.startswith("Kafka (down_conn: ")
    assert second.blind == "Kafka (down_conn)"
    verdict = decide(second, one.budget(), second.now - one.budget().every)
    assert verdict.run and "cannot see Kafka (down_conn)" in verdict.reason, verdict


def test_a_table_whose_delta_log_cannot_be_read_is_blind_and_the_watcher_goes_on(
    tmp_path: Path, kafka: LocalKafka
):
    topic = "fresh-broken-log"
    producer.create_topic(kafka.bootstrap_servers, topic, partitions=1)
    log_dir = tmp_path / "table" / "_delta_log"
    log_dir.mkdir(parents=True)
    (log_dir / "00000000000000000000.json").write_text("{not json")
    watcher = trigger(tmp_path, topic, {"bootstrap.servers": kafka.bootstrap_servers}, "log_conn")

    seen = asyncio.run(observed(watcher))
    assert seen.blind is not None and seen.blind.startswith("the table's Delta log at "), seen
    assert decide(seen, watcher.budget(), None).run
