"""What a Structured Streaming checkpoint says the table holds, read from its files (no JVM).

The Delta sink and the checkpoint move together, one micro-batch at a time, so the newest committed
batch's end offsets are what the table holds. The checkpoint may be local or on an object store
(:mod:`kafkalake.lake.small_files`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar, cast

from kafkalake.lake import small_files
from kafkalake.lake.small_files import Location, join

#: {partition: next offset to read}
Offsets = dict[int, int]

#: A field of the metadata line Spark writes before the source offsets in each offset-log file
#: (OffsetSeqMetadata: batchWatermarkMs, batchTimestampMs, conf).
METADATA_FIELD = "batchWatermarkMs"


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
            if METADATA_FIELD in loaded:
                continue  # the batch's metadata line: a topic named "conf" is a key there too
            if topic in loaded and isinstance(loaded[topic], dict):
                return {int(p): int(o) for p, o in loaded[topic].items()}
    return None


def _all_topics_line(text: str) -> dict[str, Offsets] | None:
    """The source-offsets JSON line of an offset-log file, every topic of it (a family's stream)."""
    for line in text.replace("\x00", "").splitlines():
        line = line.strip()
        if line.startswith("{"):
            loaded = json.loads(line)
            if METADATA_FIELD in loaded:
                continue
            return {
                str(t): {int(p): int(o) for p, o in parts.items()}
                for t, parts in loaded.items()
                if isinstance(parts, dict)
            }
    return None


def batch_ids(folder: Location) -> list[int]:
    return sorted(int(name) for name in small_files.names(folder) if name.isdigit())


def _read(location: str, topic: str) -> Offsets | None:
    text = small_files.read_text(location)
    return None if text is None else _offsets_line(text, topic)


#: Lines of a whole offset-log file (version, metadata, the source's offsets) and commit-log file
#: (version, metadata).
OFFSETS_LINES = 3
COMMIT_LINES = 2


def _written_text(location: str, lines_needed: int) -> str | None:
    """The text of a log file Spark reads as it starts (None: no such file); ValueError when it is
    empty or cut short.

    A crash or power loss can leave a file renamed into place before its bytes reached the disk.
    Spark then fails every start ("Incomplete log file"), however often the run is retried.
    """
    text = small_files.read_text(location)
    if text is None:
        return None
    lines = [line.strip() for line in text.replace("\x00", "").splitlines() if line.strip()]
    if len(lines) < lines_needed or not lines[0].startswith("v"):
        raise ValueError(f"{location} is empty or cut short ({len(text)} bytes)")
    for line in lines[1:]:
        if line != "-":  # Spark's mark for a source without an offset
            json.loads(line)
    return text


@dataclass(frozen=True)
class FamilyCheckpointState:
    """:class:`CheckpointState` of a stream of several topics (a family): per topic."""

    committed: dict[str, Offsets]
    unfinished_batch: bool


def read_family_checkpoint(checkpoint: Location) -> FamilyCheckpointState | None:
    """Read a Structured Streaming checkpoint of one Kafka source of several topics, every topic.

    Raises:
        ValueError: as :func:`read_checkpoint`.
    """
    found = _read_state(checkpoint, _all_topics_line)
    return None if found is None else FamilyCheckpointState(found[0], found[1])


def family_batch_end_offsets(checkpoint: Location, batch_id: int) -> dict[str, Offsets] | None:
    """Every topic's end offsets of one micro-batch of a family's stream, as planned."""
    text = small_files.read_text(join(checkpoint, "offsets", str(batch_id)))
    return None if text is None else _all_topics_line(text)


def family_starting_offsets(checkpoint: Location) -> dict[str, Offsets] | None:
    """Every topic's offsets a family's stream pinned on its very first start."""
    text = small_files.read_text(join(checkpoint, "sources", "0", "0"))
    return None if text is None else _all_topics_line(text)


def read_checkpoint(checkpoint: Location, topic: str) -> CheckpointState | None:
    """Read a Structured Streaming checkpoint of a single Kafka source.

    Raises:
        ValueError: a file Spark would read as it starts again is empty, cut short or not JSON, or
            the commit log is ahead of the offset log: the checkpoint is unreadable (the job
            rebuilds the position from the table).
    """
    found = _read_state(checkpoint, lambda text: _offsets_line(text, topic))
    return None if found is None else CheckpointState(found[0], found[1])


_T = TypeVar("_T")


def _read_state(checkpoint: Location, parse: Callable[[str], _T | None]) -> tuple[_T, bool] | None:
    """(what ``parse`` reads of the newest committed batch's offsets, whether a batch is unfinished)."""
    offset_batches = batch_ids(join(checkpoint, "offsets"))
    commits = batch_ids(join(checkpoint, "commits"))
    if commits and (not offset_batches or commits[-1] > offset_batches[-1]):
        # Spark writes a batch's offsets before its commit and purges both logs alike, so their
        # files were lost. Spark would plan batches again under ids the tables hold already, and
        # Delta would skip them as written: the records they cover never land.
        planned = f"offsets/{offset_batches[-1]}" if offset_batches else "no offsets file"
        raise ValueError(f"{checkpoint}: commits/{commits[-1]} is ahead of the offset log ({planned})")

    def initial() -> _T | None:
        # The Kafka source pins its starting offsets there on its very first start.
        text = small_files.read_text(join(checkpoint, "sources", "0", "0"))
        return None if text is None else parse(text)

    if offset_batches:
        newest = offset_batches[-1]
        committed_batches = set(commits)
        # The newest committed batch's end offsets are what the table holds.
        done = [b for b in offset_batches if b in committed_batches]
        # Read once: checked whole, and the newest committed batch's parsed from the same text.
        texts = {
            batch: _written_text(join(checkpoint, "offsets", str(batch)), OFFSETS_LINES)
            for batch in sorted({newest, newest - 1, *done[-1:]} & set(offset_batches))
        }
        if committed_batches:
            _written_text(join(checkpoint, "commits", str(max(committed_batches))), COMMIT_LINES)
        committed: _T | None = None
        if done and (text := texts[done[-1]]) is not None:
            committed = parse(text)
        else:
            committed = initial()
        empty = cast("_T", {})
        return (empty if committed is None else committed), newest not in committed_batches
    pinned = initial()
    return None if pinned is None else (pinned, False)


def batch_end_offsets(checkpoint: Location, topic: str, batch_id: int) -> Offsets | None:
    """The end offsets of one micro-batch, as planned in the offset log before the batch ran."""
    return _read(join(checkpoint, "offsets", str(batch_id)), topic)


def starting_offsets(checkpoint: Location, topic: str) -> Offsets | None:
    """The offsets the stream pinned on its very first start; None before it ever started."""
    return _initial_offsets(checkpoint, topic)


def _initial_offsets(checkpoint: Location, topic: str) -> Offsets | None:
    # The Kafka source pins its starting offsets here on its very first start.
    return _read(join(checkpoint, "sources", "0", "0"), topic)
