"""What a Structured Streaming checkpoint says the table holds, read from its files (no JVM).

The Delta sink and the checkpoint move together, one micro-batch at a time, so the newest committed
batch's end offsets are what the table holds.
"""

from __future__ import annotations

import json
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


def _offsets_line(text: str, topic: str) -> Offsets | None:
    """The source-offsets JSON line of an offset-log file, for one topic."""
    for line in text.replace("\x00", "").splitlines():
        line = line.strip()
        if line.startswith("{") and f'"{topic}"' in line:
            loaded = json.loads(line)
            if topic in loaded and isinstance(loaded[topic], dict):
                return {int(p): int(o) for p, o in loaded[topic].items()}
    return None


def batch_ids(folder: Path) -> list[int]:
    return sorted(int(p.name) for p in folder.glob("[0-9]*") if p.name.isdigit()) if folder.is_dir() else []


def read_checkpoint(checkpoint: Path, topic: str) -> CheckpointState | None:
    """Read a Structured Streaming checkpoint of a single Kafka source, on a local filesystem."""
    offset_batches = batch_ids(checkpoint / "offsets")
    if offset_batches:
        newest = offset_batches[-1]
        committed_batches = set(batch_ids(checkpoint / "commits"))
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


def batch_end_offsets(checkpoint: Path, topic: str, batch_id: int) -> Offsets | None:
    """The end offsets of one micro-batch, as planned in the offset log before the batch ran."""
    planned = checkpoint / "offsets" / str(batch_id)
    return _offsets_line(planned.read_text(), topic) if planned.exists() else None


def starting_offsets(checkpoint: Path, topic: str) -> Offsets | None:
    """The offsets the stream pinned on its very first start; None before it ever started."""
    return _initial_offsets(checkpoint, topic)


def _initial_offsets(checkpoint: Path, topic: str) -> Offsets | None:
    # The Kafka source pins its starting offsets here on its very first start.
    initial = checkpoint / "sources" / "0" / "0"
    return _offsets_line(initial.read_text(), topic) if initial.exists() else None
