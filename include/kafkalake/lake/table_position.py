"""Which Kafka offsets a table holds, recorded in its own Delta log: the checkpoint is only a cache.

Every micro-batch's commit to bronze, and its last commit on the parsed side (the parsed rows, the
dead letters or the latest-row MERGE: :func:`kafkalake.spark.batch_writer.position_carrier`),
carries in the commit's ``userMetadata`` (readable by any Delta reader: ``DESCRIBE HISTORY``,
delta-rs ``history()``) the Kafka offsets the table holds through that commit:
``{"kafkalake": {"end": {partition: next offset}, "batch": id, "query": id}}``. Kafka-delta-ingest
keeps its progress in the table the same way. When the streaming checkpoint is lost, corrupt, or
ahead of the table (the table was restored to an older version), the ingest rebuilds its position
from here instead of re-reading Kafka from the start.

A family's table (several topics: :mod:`kafkalake.config.family`) records every member's offsets and
topic ID, one entry per topic: ``{"kafkalake": {"topics": {topic: {"end": {...}, "topic_id": id}},
"batch": id, "query": id}}``. Each commit carries every member the table has ever held, those not
read in the run included (a member deleted from Kafka keeps its last offsets and ID, so its
re-creation is recognised).

The newest recorded commit of the table's *current* state counts: a ``RESTORE`` to version v
hides every commit after v, so the walk jumps back to v. Commits without the record (OPTIMIZE,
VACUUM, a re-ingest's gap fill, a catch-up) are passed over.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from kafkalake.core.errors import Failure, Kind, failure
from kafkalake.lake import store_settings
from kafkalake.lake.checkpoint import Offsets

METADATA_KEY = "kafkalake"
#: The topic's Kafka topic ID, handed by the ingest task (which asked Kafka) to the job.
ENV_TOPIC_ID = "KAFKALAKE_TOPIC_ID"


@dataclass(frozen=True)
class TablePosition:
    #: The table version whose commit recorded it.
    version: int
    #: Per partition, the next offset to read: every offset below it is in the table.
    end: Offsets
    batch: int | None = None
    query: str | None = None
    #: Kafka's topic ID the offsets were read from (a re-created topic has a new one).
    topic_id: str | None = None
    #: A family's table: per member topic, its offsets (``end`` is then empty) and its topic ID.
    members: Mapping[str, Offsets] | None = None
    member_ids: Mapping[str, str] | None = None

    def describe(self) -> str:
        if self.members is not None:
            spots = "; ".join(f"{t}: {_spots(o)}" for t, o in sorted(self.members.items()))
        else:
            spots = _spots(self.end)
        return f"version {self.version} ({spots})"

    def member(self, topic: str) -> TablePosition | None:
        """A family member's own position, as a single topic's reads; None when it holds none."""
        if self.members is None or topic not in self.members:
            return None
        return TablePosition(
            self.version,
            dict(self.members[topic]),
            self.batch,
            self.query,
            (self.member_ids or {}).get(topic),
        )


def _spots(end: Mapping[int, int]) -> str:
    return ", ".join(f"partition {p}: {o}" for p, o in sorted(end.items()))


def commit_metadata(end: Mapping[int, int], batch: int, query: str, topic_id: str | None = None) -> str:
    """The ``userMetadata`` of a micro-batch's commit."""
    record: dict[str, Any] = {
        "end": {str(p): o for p, o in sorted(end.items())},
        "batch": batch,
        "query": query,
    }
    if topic_id:
        record["topic_id"] = topic_id
    return json.dumps({METADATA_KEY: record}, sort_keys=True)


def family_commit_metadata(
    ends: Mapping[str, Mapping[int, int]], topic_ids: Mapping[str, str], batch: int, query: str
) -> str:
    """The ``userMetadata`` of a family's micro-batch commit: every member's offsets and ID."""
    members: dict[str, Any] = {}
    for topic, end in sorted(ends.items()):
        members[topic] = {"end": {str(p): o for p, o in sorted(end.items())}}
        if topic_ids.get(topic):
            members[topic]["topic_id"] = topic_ids[topic]
    record = {"topics": members, "batch": batch, "query": query}
    return json.dumps({METADATA_KEY: record}, sort_keys=True)


def _recorded(commit: Mapping[str, Any]) -> dict[str, Any] | None:
    text = commit.get("userMetadata")
    if not text:
        return None
    try:
        record = json.loads(text).get(METADATA_KEY)
    except (ValueError, AttributeError):
        return None
    if not isinstance(record, dict):
        return None
    return record if isinstance(record.get("end"), dict) or isinstance(record.get("topics"), dict) else None


def is_batch_commit(commit: Mapping[str, Any]) -> bool:
    """Whether a commit carries kafkalake's offsets record: a micro-batch's (or a family's) write."""
    return _recorded(commit) is not None


def _restored_to(commit: Mapping[str, Any], history: list[Mapping[str, Any]]) -> int | None:
    """The version a RESTORE commit went back to (given as a version or as a timestamp)."""
    parameters = commit.get("operationParameters") or {}
    version = parameters.get("version")
    if version not in (None, "", "null"):
        return int(version)
    timestamp = parameters.get("timestamp")
    if timestamp in (None, "", "null"):
        return None

    millis = datetime.fromisoformat(str(timestamp).replace("Z", "+00:00")).timestamp() * 1000
    older = [int(c["version"]) for c in history if int(c.get("timestamp", 0)) <= millis]
    return max(older) if older else None


def position_in(history: Iterable[Mapping[str, Any]]) -> TablePosition | None:
    """The position the table's current state holds, from its commit history (any order)."""
    commits = sorted(history, key=lambda c: int(c["version"]), reverse=True)
    below: int | None = None  # after a RESTORE: only commits at or below this version count
    found: TablePosition | None = None
    for commit in commits:
        version = int(commit["version"])
        if below is not None and version > below:
            continue
        if commit.get("operation") == "RESTORE":
            below = _restored_to(commit, commits)
            if below is None:
                return found  # cannot tell what the restore went back to
            continue
        record = _recorded(commit)
        if record is None:
            continue
        if found is None and isinstance(record.get("topics"), dict):
            # Each of a family's commits records every member it ever held: the newest is whole.
            return _family_position(version, record)
        if found is None:
            found = TablePosition(
                version=version,
                end={int(p): int(o) for p, o in record["end"].items()},
                batch=record.get("batch"),
                query=record.get("query"),
                topic_id=record.get("topic_id"),
            )
        # A commit made without the ID (a job run by hand, without the task's) does not drop it:
        # the newest ID the table's current state recorded is carried forward, so the check that
        # a re-created topic is not read as the old one never goes quiet.
        if record.get("topic_id"):
            return replace(found, topic_id=record["topic_id"])
    return found


def _family_position(version: int, record: Mapping[str, Any]) -> TablePosition:
    members = {
        str(t): {int(p): int(o) for p, o in (m.get("end") or {}).items()}
        for t, m in record["topics"].items()
        if isinstance(m, dict)
    }
    ids = {
        str(t): str(m["topic_id"])
        for t, m in record["topics"].items()
        if isinstance(m, dict) and m.get("topic_id")
    }
    return TablePosition(
        version, {}, record.get("batch"), record.get("query"), members=members, member_ids=ids
    )


def read_position(location: str, limit: int = 1000) -> TablePosition | None:
    """The table's recorded position (delta-rs, no JVM); None without a table or a record."""
    table = store_settings.open_delta(location)
    return None if table is None else position_in(table.history(limit))


def standard_topic_id(topic_id: str) -> str:
    """A topic ID as librdkafka (the pre-flight's client, whose spelling tables record) writes it:
    standard base64. Java's client writes the same 16 bytes in URL-safe base64 (``-`` and ``_``)."""
    return topic_id.replace("-", "+").replace("_", "/")


def recreated_message(topic: str, current_id: str, position: TablePosition) -> str | None:
    """The on-call detail when Kafka's topic is not the one the table's offsets came from; else None."""
    if not position.topic_id or standard_topic_id(position.topic_id) == standard_topic_id(current_id):
        return None
    return (
        f"topic {topic!r} was deleted and re-created in Kafka: its topic ID is now {current_id}, but "
        f"the table's offsets ({position.describe()}) were read from topic ID {position.topic_id}"
    )


def unknown_id_message(topic: str, position: TablePosition) -> str:
    """The on-call detail when Kafka did not say the topic's ID while the table's offsets carry one."""
    return (
        f"topic {topic!r}: Kafka did not say the topic's ID, and the table's offsets "
        f"({position.describe()}) were read from topic ID {position.topic_id}: whether the topic was "
        "deleted and re-created since cannot be checked, so nothing is read until it can"
    )


def identity_failure(topic: str, current_id: str | None, position: TablePosition | None) -> Failure | None:
    """Why the table's offsets may not be read on from Kafka's topic now; None when they may.

    ``topic_recreated`` (not retried) when Kafka's ID differs from the one the offsets were read
    from; ``broker_unreachable`` (retried, never skipped) when Kafka did not say the ID
    (``current_id`` None) while the offsets carry one: a re-created topic refilled past them would
    otherwise be read as the old one. The pre-flight and the job both ask this.
    """
    if position is None or not position.topic_id:
        return None  # nothing recorded to check against (a first run, a broker without topic IDs)
    if current_id is None:
        return failure(Kind.BROKER_UNREACHABLE, unknown_id_message(topic, position))
    recreated = recreated_message(topic, current_id, position)
    return None if recreated is None else failure(Kind.TOPIC_RECREATED, recreated)


def family_identity_failure(
    current_ids: Mapping[str, str | None], position: TablePosition | None
) -> Failure | None:
    """:func:`identity_failure` of each family member Kafka has now (``current_ids``: its ID, or None
    when Kafka did not say): the first member whose offsets may not be read on."""
    if position is None:
        return None
    for topic, current in sorted(current_ids.items()):
        failed = identity_failure(topic, current, position.member(topic))
        if failed is not None:
            return failed
    return None


def furthest(positions: Iterable[TablePosition | None]) -> Offsets:
    """Per partition, the furthest end of several tables' positions (the parsed side's tables)."""
    end: Offsets = {}
    for position in positions:
        for p, o in (position.end if position else {}).items():
            end[p] = max(end.get(p, 0), o)
    return end
