"""Which of a key's records the latest-row table keeps, as plain Python: the oracle of the tests and
the soak, mirroring the MERGE's rule (:data:`kafkalake.spark.latest._NEWER`).

Within a partition Kafka orders a key's records by offset; across partitions it orders nothing, so
the table takes the later record timestamp (then partition, then offset). A key that moved partition
(partitions added) is thus ordered by when its records were produced, not by where they sit.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Any

Spot = tuple[int, int]


def newest_spots(records: Iterable[tuple[Hashable, int, int, Any]]) -> dict[Any, Spot]:
    """Each key's newest (partition, offset) among ``records``: (key, partition, offset, timestamp)."""
    per_partition: dict[tuple[Any, int], tuple[int, Any]] = {}
    for key, partition, offset, timestamp in records:
        held = per_partition.get((key, partition))
        if held is None or offset > held[0]:
            per_partition[(key, partition)] = (offset, timestamp)
    newest: dict[Any, tuple[Any, int, int]] = {}
    for (key, partition), (offset, timestamp) in per_partition.items():
        order = (timestamp, partition, offset)
        if key not in newest or order > newest[key]:
            newest[key] = order
    return {key: (partition, offset) for key, (_, partition, offset) in newest.items()}
