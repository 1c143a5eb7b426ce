"""A re-ingest's window: which offsets of each partition to re-read, from a point in time.

The plan (:func:`plan_window`) is pure; :func:`resolve_window` asks Kafka (confluent-kafka, no JVM)
and the checkpoint. The Airflow task checks the window before any JVM starts; the Spark side
(:mod:`kafkalake.spark.reingest`) reads and lands it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime

from kafkalake.config.topic import MAX_OFFSETS_PARSED
from kafkalake.core.run_mode import refused
from kafkalake.kafka.offsets import open_consumer, topic_names, watermarks
from kafkalake.lake.checkpoint import Offsets, read_checkpoint, read_family_checkpoint

# confluent_kafka is imported where a window is resolved: the DAG file imports this module and parsing it
# never needs the client.

#: Records per chunk when the topic sets no ``max_offsets_per_trigger``.
DEFAULT_CHUNK_RECORDS = 100_000


def chunk_records(max_offsets_per_trigger: int | None) -> int:
    """Records per chunk of a re-ingest or a catch-up: the topic's batch size, but each chunk's rows
    are cached for their writes, so never more than a parsed topic's default batch (a bronze-only
    topic's default batch is larger, since the stream caches nothing)."""
    return min(max_offsets_per_trigger or DEFAULT_CHUNK_RECORDS, MAX_OFFSETS_PARSED)


@dataclass(frozen=True)
class Window:
    """What a re-ingest re-reads: offsets ``start[p]`` (inclusive) to ``end[p]`` (exclusive)."""

    topic: str
    since: datetime
    start: Offsets
    end: Offsets
    #: Partitions retention emptied (Kafka deleted every record up to its end offset): whatever of
    #: the window they held is gone, and Kafka cannot tell whether there was any.
    emptied: tuple[int, ...] = ()

    @property
    def ranges(self) -> dict[int, tuple[int, int]]:
        """The partitions with something to re-read, and their offset ranges."""
        return {p: (s, self.end[p]) for p, s in sorted(self.start.items()) if s < self.end[p]}

    @property
    def records(self) -> int:
        return sum(end - start for start, end in self.ranges.values())

    @property
    def app_id(self) -> str:
        """Delta's ``txnAppId`` of the re-ingest's writes: stable for the topic and its start time,
        and never a streaming query's id, so its writes are told apart in the tables' history."""
        return f"kafkalake-reingest:{self.topic}:{self.since.isoformat()}"

    def describe(self) -> str:
        parts = ", ".join(f"partition {p}: {s}..{e - 1}" for p, (s, e) in self.ranges.items()) or "none"
        text = f"{self.records} records of topic {self.topic!r} since {self.since.isoformat()} ({parts})"
        if self.emptied:
            listed = ", ".join(map(str, self.emptied))
            text += (
                f"; partition(s) {listed} hold no record now (retention deleted them all): what of "
                "the window was there cannot be read again"
            )
        return text


def plan_window(
    topic: str,
    since: datetime,
    at_time: Mapping[int, int | None],
    marks: Mapping[int, tuple[int, int]],
    committed: Offsets | None,
) -> Window:
    """The window to re-read, or a refusal (:class:`~kafkalake.core.errors.ReingestRefusedError`).

    Args:
        topic: the topic's name.
        since: the re-ingest's start.
        at_time: per partition, Kafka's offset for ``since`` (the first record at or after it);
            None when the partition has no record that late.
        marks: per partition, Kafka's (earliest, end) offsets.
        committed: the checkpoint's committed offsets; None when there is no checkpoint.
    """
    if committed is None:
        raise refused(
            f"topic {topic!r} has no checkpoint yet: nothing was landed, so there is no gap to repair. "
            "Run the DAG normally"
        )
    expired = {
        p: earliest
        for p, (earliest, _end) in sorted(marks.items())
        if (offset := at_time.get(p)) is not None and earliest > 0 and offset <= earliest
    }
    if expired:
        spots = ", ".join(f"partition {p} starts at offset {e}" for p, e in expired.items())
        raise refused(
            f"topic {topic!r}: Kafka no longer holds the records from {since.isoformat()} on ({spots}; "
            "the records before were deleted by retention, so some of the window is gone). Nothing "
            "was written. Choose a later reingest_from, after the first record Kafka still holds"
        )
    end = {p: min(committed.get(p, 0), high) for p, (_low, high) in marks.items()}
    start = {}
    for p, (_low, high) in marks.items():
        offset = at_time.get(p)
        start[p] = min(high if offset is None else offset, end[p])
    # No offset for the time in a partition that holds nothing, though it held records the tables
    # read: refusing would block every re-ingest of the topic until the partition gets a record.
    emptied = tuple(
        p
        for p, (earliest, high) in sorted(marks.items())
        if 0 < earliest == high and end[p] > 0 and at_time.get(p) is None
    )
    return Window(topic, since, start, end, emptied)


def chunks(window: Window, max_records: int) -> Iterator[dict[int, tuple[int, int]]]:
    """The window in pieces of at most ``max_records`` records (about), every partition advancing."""
    ranges = window.ranges
    if not ranges:
        return
    step = max(1, max_records // len(ranges))
    position = {p: start for p, (start, _end) in ranges.items()}
    while any(position[p] < end for p, (_start, end) in ranges.items()):
        piece = {}
        for p, (_start, end) in ranges.items():
            if position[p] < end:
                piece[p] = (position[p], min(end, position[p] + step))
                position[p] = piece[p][1]
        yield piece


# ---------------------------------------------------------------------------------------------
# I/O: Kafka offsets (confluent-kafka, no JVM) and the checkpoint


def offsets_for_time(
    client_config: Mapping[str, str],
    topic: str,
    partitions: list[int],
    since: datetime,
    timeout: float = 15.0,
) -> dict[int, int | None]:
    """Kafka's offset for ``since`` per partition: the first record at or after it; None if none."""
    from confluent_kafka import TopicPartition

    millis = int(since.timestamp() * 1000)
    consumer, _errors = open_consumer(client_config, "kafkalake-reingest")
    try:
        found = consumer.offsets_for_times([TopicPartition(topic, p, millis) for p in partitions], timeout)
    finally:
        consumer.close()
    return {tp.partition: (tp.offset if tp.offset >= 0 else None) for tp in found}


def resolve_window(
    topic_name: str, checkpoint: str, client_config: Mapping[str, str], since: datetime
) -> Window:
    """Ask Kafka and the checkpoint, then :func:`plan_window`."""
    try:
        state = read_checkpoint(checkpoint, topic_name)
    except ValueError as err:
        raise refused(
            f"topic {topic_name!r}: its checkpoint cannot be read ({err}), so the offsets the stream "
            "has passed are unknown. Run the DAG normally first: it rebuilds the position from the table"
        ) from None
    marks = watermarks(client_config, topic_name)
    at_time = offsets_for_time(client_config, topic_name, sorted(marks), since)
    return plan_window(topic_name, since, at_time, marks, state.committed if state else None)


def resolve_family_windows(
    name: str, checkpoint: str, client_config: Mapping[str, str], since: datetime
) -> dict[str, Window]:
    """:func:`resolve_window` of each member of a family its stream has read and Kafka still has,
    all planned before any is landed: one refused refuses the re-ingest, nothing written. A member
    Kafka no longer has cannot be re-read (its rows stay as they are)."""
    try:
        state = read_family_checkpoint(checkpoint)
    except ValueError as err:
        raise refused(
            f"entry {name!r}: its checkpoint cannot be read ({err}), so the offsets the stream has "
            "passed are unknown. Run the DAG normally first: it rebuilds the position from the table"
        ) from None
    if state is None or not state.committed:
        raise refused(f"entry {name!r} has no checkpoint yet: nothing was landed to repair")
    existing = topic_names(client_config)
    return {
        member: resolve_window(member, checkpoint, client_config, since)
        for member in sorted(state.committed)
        if member in existing
    }
