"""Create topics and produce records: for the demo, the tests and trying the pipeline out."""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Record:
    key: bytes | None
    value: bytes | None
    partition: int | None = None
    headers: Sequence[tuple[str, bytes | None]] = field(default=())


def create_topic(bootstrap: str, name: str, partitions: int, config: dict[str, str] | None = None) -> bool:
    """Create the topic unless it exists; true when it was created."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    future = admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])[name]
    try:
        future.result(timeout=30)
    except KafkaException as err:
        if err.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return False
        raise
    return True


def produce(bootstrap: str, topic: str, records: Iterable[Record]) -> int:
    """Produce and wait until every record is acknowledged; returns how many were sent."""
    from confluent_kafka import Producer

    failures: list[str] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            failures.append(str(err))

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 20,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    sent = 0
    for record in records:
        kwargs = {} if record.partition is None else {"partition": record.partition}
        while True:
            try:
                producer.produce(
                    topic,
                    key=record.key,
                    value=record.value,
                    headers=list(record.headers) or None,
                    on_delivery=on_delivery,
                    **kwargs,
                )
                break
            except BufferError:
                producer.poll(0.5)
        sent += 1
        producer.poll(0)
    if producer.flush(60) != 0 or failures:
        raise RuntimeError(f"{len(failures)} records not delivered: {failures[:3]}")
    return sent


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
