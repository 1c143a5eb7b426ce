"""The parsed side's backlog: what bronze holds that the parsed tables do not yet, read without a JVM.

Bronze never waits for the parsed side. When parsing or writing a micro-batch's parsed tables fails
(a rejected schema, a failing expectation, anything), the batch's bronze rows are already committed:
the stream records where the parsed side stopped in this small file and goes on landing bronze. The
parsed tables then catch up from bronze (:mod:`kafkalake.spark.catch_up`), on this run or the next,
and the file is removed once they have. The pre-flight reads it so a run with nothing new in Kafka
still catches up.

The file is rewritten whole (locally a temp file, then a rename; on an object store one PUT), so a
reader sees the old or the new backlog.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from kafkalake.config.topic import TopicConfig
from kafkalake.lake import small_files


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


def read(topic: TopicConfig) -> Backlog | None:
    return read_file(topic.parsed_backlog_file)


def read_file(location: str) -> Backlog | None:
    """The backlog in the file at ``location`` (:attr:`TopicConfig.parsed_backlog_file`); None if none."""
    text = small_files.read_text(location)
    return None if text is None else Backlog.from_json(text, location)


def write(topic: TopicConfig, backlog: Backlog) -> None:
    small_files.write_text(topic.parsed_backlog_file, backlog.to_json())


def clear(topic: TopicConfig) -> None:
    small_files.delete(topic.parsed_backlog_file)
