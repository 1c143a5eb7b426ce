"""Create topics and produce records: for the demo, the tests and trying the pipeline out."""

from __future__ import annotations

import functools
import json
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# confluent_kafka is imported inside the functions that produce or create topics: the test session imports
# this module at collection, and the unit tests never need the client.


@dataclass(frozen=True)
class Record:
    key: bytes | None
    value: bytes | None
    partition: int | None = None
    headers: Sequence[tuple[str, bytes | None]] = field(default=())
    #: The record's CreateTime in epoch milliseconds (None: the producer's clock), e.g. an old one.
    timestamp_ms: int | None = None


def client_settings(kafka: str | Mapping[str, str]) -> dict[str, str]:
    """librdkafka settings from bootstrap servers, or the whole settings of a secured cluster."""
    return {"bootstrap.servers": kafka} if isinstance(kafka, str) else dict(kafka)


def create_topic(
    bootstrap: str | Mapping[str, str], name: str, partitions: int, config: dict[str, str] | None = None
) -> bool:
    """Create the topic unless it exists; true when it was created.

    Returns once the broker's metadata lists the topic with its partitions: the controller
    acknowledges a creation before the broker's metadata cache has it, and a client asking at once
    (a pre-flight's end offsets) was told the topic does not exist (seen on a broker shared by four
    test workers).
    """
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(client_settings(bootstrap))
    future = admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])[name]
    created = True
    try:
        future.result(timeout=30)
    except KafkaException as err:
        if err.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise
        created = False
    deadline = time.monotonic() + 30
    while True:
        info = admin.list_topics(topic=name, timeout=10).topics.get(name)
        if info is not None and info.error is None and info.partitions:
            return created
        if time.monotonic() > deadline:
            raise RuntimeError(f"topic {name!r}: created, but not in the broker's metadata after 30 s")
        time.sleep(0.1)


def produce(
    bootstrap: str | Mapping[str, str], topic: str, records: Sequence[Record]
) -> list[tuple[int, int]]:
    """Produce and wait until every record is acknowledged.

    Returns:
        The (partition, offset) each record landed at, in the order of ``records``.
    """
    from confluent_kafka import Producer

    landed: list[tuple[int, int] | None] = [None] * len(records)
    failures: list[str] = []

    def on_delivery(index: int, err: object, msg: Any) -> None:
        if err is not None:
            failures.append(str(err))
        else:
            landed[index] = (msg.partition(), msg.offset())

    producer = Producer(
        {
            **client_settings(bootstrap),
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 20,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    for index, record in enumerate(records):
        kwargs: dict[str, int] = {} if record.partition is None else {"partition": record.partition}
        if record.timestamp_ms is not None:
            kwargs["timestamp"] = record.timestamp_ms
        while True:
            try:
                producer.produce(
                    topic,
                    key=record.key,
                    value=record.value,
                    headers=list(record.headers) or None,
                    on_delivery=functools.partial(on_delivery, index),
                    **kwargs,
                )
                break
            except BufferError:
                producer.poll(0.5)
        producer.poll(0)
    if producer.flush(60) != 0 or failures:
        raise RuntimeError(f"{len(failures)} records not delivered: {failures[:3]}")
    return [spot for spot in landed if spot is not None]


def sample_orders(count: int, seed: int = 7) -> list[Record]:
    """JSON order events, with a few malformed and a few non-UTF-8 values mixed in."""
    rng = random.Random(seed)
    records = []
    for i in range(count):
        customer = f"customer-{rng.randrange(50):03d}"
        event = {
            "order_id": i,
            "customer": customer,
            "amount": round(rng.uniform(1, 500), 2),
            "currency": rng.choice(["EUR", "USD", "GBP"]),
            "status": rng.choice(["new", "paid", "shipped"]),
        }
        value = json.dumps(event).encode()
        if i % 97 == 13:
            value = value[: len(value) // 2]  # malformed: truncated JSON
        elif i % 89 == 7:
            value = b"\xff\xfe" + value  # not UTF-8
        records.append(Record(customer.encode(), value, headers=[("source", b"demo")]))
    return records
