"""Full-refresh protection: never start a stream whose table and checkpoint disagree.

The ingest job calls :func:`check_safe_to_start` before it creates the table or starts the stream.
It refuses (:class:`~kafkalake.core.errors.TableStateError`, not retried) when

* (a) the table holds data but the checkpoint is missing or empty: the stream would re-read Kafka
  from ``starting_offsets`` and land every record again (or, where Kafka expired them, land a
  different set than the table has);
* (b) the checkpoint says records were landed but the table is gone or holds no rows: they were
  deleted, and the stream would carry on after them as if nothing happened.

The decision (:func:`refusal`) is pure; reading the table (delta-rs) and the checkpoint are the
I/O edges. Only local paths can be checked; for a URI the check logs that it was skipped.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from kafkalake.config.topic import TopicConfig
from kafkalake.core.errors import Kind, TableStateError, failure
from kafkalake.lake.checkpoint import read_checkpoint, starting_offsets

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TableFacts:
    files: int
    rows: int


def refusal(topic: TopicConfig, table: TableFacts | None, landed: int | None) -> str | None:
    """Why starting the stream now would lose or duplicate data; None when it is safe.

    Args:
        topic: the topic (for its paths and starting offsets in the message).
        table: the table's data files and rows; None when there is no Delta table at its path.
        landed: records the checkpoint says the table received; None when there is no checkpoint.
    """
    has_data = table is not None and (table.files > 0 or table.rows > 0)
    if has_data and landed is None:
        assert table is not None
        return (
            f"topic {topic.name!r}: the table at {topic.path} holds {table.rows} rows in {table.files} "
            f"files, but its checkpoint at {topic.checkpoint_path} is missing or empty. Starting now "
            f"would re-read Kafka from {topic.starting_offsets!r} and land those records a second time "
            "(and records Kafka has already expired could not be read again)"
        )
    if landed and not has_data:
        state = "is gone (no Delta table there)" if table is None else "holds no rows"
        return (
            f"topic {topic.name!r}: the checkpoint at {topic.checkpoint_path} says {landed} records "
            f"were landed, but the table at {topic.path} {state}: they were deleted. Starting now "
            "would carry on after them and never land them again"
        )
    return None


def read_table(path: str) -> TableFacts | None:
    """Data files and rows (from the log's statistics) of a Delta table; None when there is none."""
    from deltalake import DeltaTable

    if not DeltaTable.is_deltatable(path):
        return None
    actions = DeltaTable(path).get_add_actions(flatten=True)
    rows = 0
    if "num_records" in actions.schema.names:
        rows = sum(n for n in actions.column("num_records").to_pylist() if n is not None)
    return TableFacts(files=actions.num_rows, rows=rows)


def landed_records(checkpoint: Path, topic: str) -> int | None:
    """Records the checkpoint's committed batches read from Kafka; None without a checkpoint."""
    state = read_checkpoint(checkpoint, topic)
    if state is None:
        return None
    start = starting_offsets(checkpoint, topic) or {}
    return sum(max(0, end - start.get(p, 0)) for p, end in state.committed.items())


def check_safe_to_start(topic: TopicConfig) -> None:
    """Raise :class:`TableStateError` (its text is the on-call message) when starting is unsafe.

    The ingest job calls this first, before creating the table or starting the stream, and on
    ``TableStateError`` reports ``Failure(err.kind, str(err))`` (exit code 74, not retried).
    """
    if "://" in topic.path and not topic.path.startswith("file:"):
        log.warning("cannot check table and checkpoint of %s at %s: not a local path", topic.name, topic.path)
        return
    path = topic.path.removeprefix("file:")
    checkpoint = Path(topic.checkpoint_path.removeprefix("file:"))
    reason = refusal(topic, read_table(path), landed_records(checkpoint, topic.name))
    if reason is not None:
        raise TableStateError(failure(Kind.TABLE_STATE, reason).message)
