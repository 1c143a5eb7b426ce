"""The bench's backlog: JSON events of ~300 bytes produced once, and the raw read rate of them with a
plain confluent-kafka consumer (the limit the drain is measured against)."""

from __future__ import annotations

import json
import random
import resource
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from kafkalake.dev import producer
from kafkalake.dev.bench_results import MIB, RawRead
from kafkalake.kafka.offsets import end_offsets


def event(i: int, rng: random.Random) -> dict[str, Any]:
    """The ``i``-th event's fields (``rng`` in the backlog's order gives the same events every time)."""
    return {
        "event_id": f"{i:012d}",
        "user_id": f"user-{rng.randrange(100_000):06d}",
        "session": f"{rng.getrandbits(64):016x}",
        "type": rng.choice(["page_view", "click", "add_to_cart", "checkout", "search"]),
        "page": rng.choice(["/", "/search", "/product/1234", "/cart", "/checkout/payment"]),
        "amount": round(rng.uniform(0, 500), 2),
        "currency": "EUR",
        "ua": "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0",
        "ts": 1_790_000_000_000 + i,
    }


def event_value(i: int, rng: random.Random) -> bytes:
    """A JSON event of about 300 bytes."""
    return _json(event(i, rng))


def ensure_backlog(
    bootstrap: str,
    topic: str,
    events: int,
    partitions: int,
    encode: Callable[[dict[str, Any]], bytes] | None = None,
) -> None:
    """Produce the backlog unless the topic already holds exactly it.

    ``encode``: each event's value (default: its JSON, :func:`event_value`); the events are the same
    whatever the encoding, so two backlogs of one size hold the same data."""
    producer.create_topic(bootstrap, topic, partitions)
    held = sum(end_offsets({"bootstrap.servers": bootstrap}, topic).values())
    if held not in (0, events):
        raise RuntimeError(f"topic {topic} holds {held} records, not 0 or {events}: remove .bench/ and rerun")
    rng = random.Random(42)
    if encode is None:
        encode = _json
    if held == 0:
        started = time.monotonic()
        chunk = 200_000
        for start in range(0, events, chunk):
            records = [
                producer.Record(f"user-{i % 100_000}".encode(), encode(event(i, rng)))
                for i in range(start, min(events, start + chunk))
            ]
            producer.produce(bootstrap, topic, records)
        print(f"produced {events:,} events in {time.monotonic() - started:.1f}s", flush=True)


def _json(fields: dict[str, Any]) -> bytes:
    return json.dumps(fields, separators=(",", ":")).encode()


def raw_read(bootstrap: str, topic: str) -> RawRead:
    """Read the whole topic with a plain consumer in batch mode and discard it."""
    ends = end_offsets({"bootstrap.servers": bootstrap}, topic)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "kafkalake-bench-raw",
            "enable.auto.commit": False,
            "fetch.max.bytes": 64 * MIB,
            "max.partition.fetch.bytes": 16 * MIB,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in ends])
    remaining = sum(ends.values())
    records = size = 0
    cpu_before = _own_cpu_s()
    started = time.monotonic()
    while remaining > 0:
        for message in consumer.consume(num_messages=10_000, timeout=1.0):
            if message.error() is not None:
                continue
            records += 1
            remaining -= 1
            size += len(message.value() or b"") + len(message.key() or b"")
    seconds = time.monotonic() - started
    cpu = _own_cpu_s() - cpu_before
    consumer.close()
    return RawRead(records, size, seconds, cpu)


def _own_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
