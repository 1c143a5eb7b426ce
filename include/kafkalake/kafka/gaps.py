"""Offsets a micro-batch was planned to read that Kafka deleted first: the data loss of a topic with
``fail_on_data_loss: false``, found per batch so it is recorded, never silent.

Spark's Kafka source, told not to fail on data loss, moves past deleted offsets with a log line
only. What is lost for sure: offsets from the batch's planned start that are below Kafka's earliest
offset *and* below the first offset the batch holds. Offsets a batch lacks at or above the earliest
are transaction markers or compacted records, not losses; offsets the batch holds were read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Gap:
    partition: int
    #: First offset lost.
    start: int
    #: First offset after the gap (exclusive).
    end: int

    @property
    def offsets(self) -> int:
        return self.end - self.start

    def describe(self) -> str:
        return f"partition {self.partition}: offsets {self.start}..{self.end - 1} ({self.offsets} offsets)"


def at_risk(start: Mapping[int, int], end: Mapping[int, int], earliest: Mapping[int, int]) -> set[int]:
    """Partitions whose planned range begins below Kafka's earliest offset, or ends before it begins
    (a shorter log than the stream had read): those may have lost some."""
    return {
        p
        for p, stop in end.items()
        if stop < start.get(p, 0) or min(earliest.get(p, 0), stop) > start.get(p, 0)
    }


def lost_ranges(
    start: Mapping[int, int],
    end: Mapping[int, int],
    earliest: Mapping[int, int],
    first_read: Mapping[int, int],
) -> list[Gap]:
    """The gaps of one batch planned to read ``[start, end)`` per partition.

    ``earliest`` is Kafka's earliest offset per partition, asked after the batch was planned;
    ``first_read`` the lowest offset per partition the batch holds (a partition it holds nothing of
    is absent). A partition missing from ``start`` is new to the stream and planned from offset 0.
    """
    gaps = []
    for partition, stop in sorted(end.items()):
        begin = start.get(partition, 0)
        if stop < begin:
            # The partition's log ends below where the stream was: the topic was deleted and
            # re-created (without a topic ID to tell), or a leader lost records. Spark plans nothing
            # for it and goes on from ``stop``, so the new log's records below it are never read
            # (those the batch holds all the same were read).
            low, high = earliest.get(partition, 0), min(first_read.get(partition, stop), stop)
            if high > low:
                gaps.append(Gap(partition, low, high))
            continue
        gap_end = min(earliest.get(partition, 0), first_read.get(partition, stop), stop)
        if gap_end > begin:
            gaps.append(Gap(partition, begin, gap_end))
    return gaps
