"""Pre-flight: is there anything new in Kafka for this table? Answered without a JVM.

What the table holds is what its checkpoint says was committed: the Delta sink and the checkpoint
move together, one micro-batch at a time. The decision itself is a pure function; reading the
checkpoint and asking Kafka for its end offsets are the I/O edges around it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

#: {partition: next offset to read}
Offsets = dict[int, int]


@dataclass(frozen=True)
class CheckpointState:
    #: Offsets up to which data is in the table (exclusive), for each partition it knows.
    committed: Offsets
    #: True when the newest micro-batch was planned but never committed (a run died mid-batch).
    unfinished_batch: bool


@dataclass(frozen=True)
class Decision:
    run: bool
    reason: str
    #: Records waiting per partition (end offset minus committed offset); empty when unknown.
    lag: Offsets

    @property
    def total_lag(self) -> int:
        return sum(self.lag.values())


def decide(checkpoint: CheckpointState | None, end_offsets: Mapping[int, int]) -> Decision:
    """Whether the ingest job must run, and why."""
    if checkpoint is None:
        return Decision(True, "first run: no checkpoint yet", {})
    if checkpoint.unfinished_batch:
        return Decision(True, "the last micro-batch was interrupted and must be finished", {})
    lag = {p: max(0, end - checkpoint.committed.get(p, 0)) for p, end in sorted(end_offsets.items())}
    behind = {p: end for p, end in end_offsets.items() if end < checkpoint.committed.get(p, 0)}
    if behind:
        # Kafka holds less than the table already has: the topic was deleted and re-created or
        # truncated. Never skip that quietly; the job's failOnDataLoss check reports it.
        detail = ", ".join(
            f"partition {p}: end {e} < committed {checkpoint.committed[p]}" for p, e in behind.items()
        )
        return Decision(True, f"Kafka's end offsets are below what the table holds ({detail})", lag)
    new_partitions = sorted(set(end_offsets) - set(checkpoint.committed))
    if new_partitions:
        return Decision(True, f"partitions {new_partitions} are new to the checkpoint", lag)
    waiting = sum(lag.values())
    if waiting:
        return Decision(True, f"{waiting} new records", lag)
    return Decision(False, "nothing new since the last run", lag)


def _offsets_line(text: str, topic: str) -> Offsets | None:
    """The source-offsets JSON line of an offset-log file, for one topic."""
    for line in text.replace("\x00", "").splitlines():
        line = line.strip()
        if line.startswith("{") and f'"{topic}"' in line:
            loaded = json.loads(line)
            if topic in loaded and isinstance(loaded[topic], dict):
                return {int(p): int(o) for p, o in loaded[topic].items()}
    return None


def _batch_ids(folder: Path) -> list[int]:
    return sorted(int(p.name) for p in folder.glob("[0-9]*") if p.name.isdigit()) if folder.is_dir() else []


def read_checkpoint(checkpoint: Path, topic: str) -> CheckpointState | None:
    """Read a Structured Streaming checkpoint of a single Kafka source, on a local filesystem."""
    offset_batches = _batch_ids(checkpoint / "offsets")
    if offset_batches:
        newest = offset_batches[-1]
        committed_batches = set(_batch_ids(checkpoint / "commits"))
        # The newest committed batch's end offsets are what the table holds.
        done = [b for b in offset_batches if b in committed_batches]
        committed: Offsets = {}
        if done:
            committed = _offsets_line((checkpoint / "offsets" / str(done[-1])).read_text(), topic) or {}
        elif (initial := _initial_offsets(checkpoint, topic)) is not None:
            committed = initial
        return CheckpointState(committed, unfinished_batch=newest not in committed_batches)
    initial = _initial_offsets(checkpoint, topic)
    if initial is None:
        return None
    return CheckpointState(initial, unfinished_batch=False)


def _initial_offsets(checkpoint: Path, topic: str) -> Offsets | None:
    # The Kafka source pins its starting offsets here on its very first start.
    initial = checkpoint / "sources" / "0" / "0"
    return _offsets_line(initial.read_text(), topic) if initial.exists() else None


def end_offsets(client_config: Mapping[str, str], topic: str, timeout: float = 15.0) -> Offsets:
    """Kafka's end offset (high watermark) of every partition of ``topic``."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer({**client_config, "group.id": "kafkalake-preflight", "enable.auto.commit": "false"})
    try:
        metadata = consumer.list_topics(topic, timeout=timeout)
        info = metadata.topics.get(topic)
        if info is None or info.error is not None or not info.partitions:
            reason = info.error if info is not None else "not in metadata"
            raise KafkaException(f"topic {topic!r} is not available on the cluster: {reason}")
        result: Offsets = {}
        for partition in sorted(info.partitions):
            _low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout)
            result[partition] = int(high)
        return result
    finally:
        consumer.close()
