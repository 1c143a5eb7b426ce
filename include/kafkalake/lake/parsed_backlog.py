"""The parsed side's backlog: what bronze holds that the parsed tables do not yet, read without a JVM.

Bronze never waits for the parsed side. When parsing or writing a micro-batch's parsed tables fails
(a rejected schema, a failing expectation, anything), the batch's bronze rows are already committed:
the stream records where the parsed side stopped in this small file and goes on landing bronze. The
parsed tables then catch up from bronze (:mod:`kafkalake.spark.catch_up`), on this run or the next,
and the file is removed once they have. The pre-flight reads it so a run with nothing new in Kafka
still catches up.

The file is rewritten whole (temp file, then rename), so a reader sees the old or the new backlog.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from kafkalake.config.topic import TopicConfig
from kafkalake.lake.checkpoint_lock import local_path


@dataclass(frozen=True)
class Backlog:
    #: Per partition, the first offset the parsed tables may lack; bronze rows at or after it are
    #: parsed by the catch-up (rows the tables already hold are left out by an anti-join).
    start: dict[int, int]
    #: When the parsed side stopped (UTC, ISO 8601), and why: the kind and the on-call message.
    since: str
    kind: str
    reason: str

    def to_json(self) -> str:
        return json.dumps(
            {
                "start": {str(p): o for p, o in sorted(self.start.items())},
                "since": self.since,
                "kind": self.kind,
                "reason": self.reason,
            },
            indent=1,
        )

    @classmethod
    def from_json(cls, text: str, source: str) -> Backlog:
        try:
            data = json.loads(text)
            return cls(
                start={int(p): int(o) for p, o in data["start"].items()},
                since=str(data["since"]),
                kind=str(data["kind"]),
                reason=str(data["reason"]),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            raise ValueError(f"{source}: not a parsed-backlog file: {err}") from err

    def describe(self) -> str:
        spots = ", ".join(f"partition {p} from offset {o}" for p, o in sorted(self.start.items()))
        return f"since {self.since} ({self.kind}): {spots or 'no partition yet'}"


def _file(topic: TopicConfig) -> Path | None:
    return local_path(topic.parsed_backlog_file)


def supported(topic: TopicConfig) -> bool:
    """Whether the backlog can be kept for this topic (its tables are on a local filesystem)."""
    return _file(topic) is not None


def read(topic: TopicConfig) -> Backlog | None:
    return read_file(topic.parsed_backlog_file)


def read_file(location: str) -> Backlog | None:
    """The backlog in the file at ``location`` (:attr:`TopicConfig.parsed_backlog_file`); None if none."""
    path = local_path(location)
    if path is None or not path.exists():
        return None
    return Backlog.from_json(path.read_text(), str(path))


def write(topic: TopicConfig, backlog: Backlog) -> None:
    path = _file(topic)
    if path is None:
        raise ValueError(f"topic {topic.name!r}: its tables are not on a local filesystem")
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    with partial.open("w") as handle:
        handle.write(backlog.to_json())
        handle.flush()
        os.fsync(handle.fileno())
    partial.replace(path)


def clear(topic: TopicConfig) -> None:
    path = _file(topic)
    if path is not None:
        path.unlink(missing_ok=True)
