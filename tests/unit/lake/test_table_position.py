"""A table's recorded Kafka position, read from its commit history: restores and other commits."""

from __future__ import annotations

import json
from typing import Any

from kafkalake.lake.table_position import (
    TablePosition,
    commit_metadata,
    furthest,
    position_in,
    recreated_message,
    standard_topic_id,
    unknown_id_message,
)


def write(version: int, end: dict[int, int] | None, batch: int = 0, ts: int = 0) -> dict[str, Any]:
    meta = commit_metadata(end, batch, "q-1") if end is not None else None
    return {"version": version, "operation": "WRITE", "userMetadata": meta, "timestamp": ts or version * 1000}


def op(at: int, operation: str, **parameters: Any) -> dict[str, Any]:
    return {"version": at, "operation": operation, "operationParameters": parameters, "timestamp": at * 1000}


def test_the_newest_recorded_commit_counts_and_other_commits_are_passed_over():
    history = [write(0, {0: 5}), write(1, {0: 9, 1: 3}, batch=1), op(2, "OPTIMIZE"), write(3, None)]
    assert position_in(history) == TablePosition(1, {0: 9, 1: 3}, batch=1, query="q-1")


def test_no_record_no_position():
    assert position_in([write(0, None), op(1, "OPTIMIZE")]) is None
    assert position_in([]) is None
    assert position_in([{"version": 0, "userMetadata": "not json"}]) is None
    assert position_in([{"version": 0, "userMetadata": json.dumps({"other": 1})}]) is None


def test_a_restore_hides_the_commits_after_the_version_it_went_back_to():
    history = [write(0, {0: 5}), write(1, {0: 9}), write(2, {0: 14}), op(3, "RESTORE", version=1)]
    assert position_in(history).end == {0: 9}
    # Writes after the restore count again.
    assert position_in([*history, write(4, {0: 11})]).end == {0: 11}


def test_a_restore_by_timestamp_goes_back_to_the_last_commit_at_that_time():
    history = [
        write(0, {0: 5}),
        write(1, {0: 9}),
        write(2, {0: 14}),
        op(3, "RESTORE", timestamp="1970-01-01T00:00:01.500Z"),
    ]
    assert position_in(history).end == {0: 9}


def test_a_restore_to_before_any_record_means_no_position():
    history = [write(0, None), write(1, {0: 9}), op(2, "RESTORE", version=0)]
    assert position_in(history) is None


def test_the_parsed_side_is_as_far_as_its_furthest_table_per_partition():
    assert furthest([TablePosition(3, {0: 10, 1: 4}), None, TablePosition(7, {0: 8, 2: 1})]) == {
        0: 10,
        1: 4,
        2: 1,
    }


def test_a_different_topic_id_is_a_recreated_topic_and_an_unknown_one_is_not():
    position = TablePosition(4, {0: 100}, topic_id="old-id")
    assert "re-created in Kafka: its topic ID is now new-id" in (
        recreated_message("t", "new-id", position) or ""
    )
    assert recreated_message("t", "old-id", position) is None
    assert recreated_message("t", "new-id", TablePosition(4, {0: 100})) is None  # recorded before IDs were
    meta = commit_metadata({0: 100}, 3, "q", "old-id")
    assert position_in([{"version": 4, "userMetadata": meta}]) == TablePosition(4, {0: 100}, 3, "q", "old-id")


def with_id(version: int, end: dict[int, int], topic_id: str | None) -> dict[str, Any]:
    meta = commit_metadata(end, version, "q", topic_id)
    return {"version": version, "operation": "WRITE", "userMetadata": meta}


def test_a_commit_without_the_topic_id_carries_the_newest_recorded_one_forward():
    """A job run by hand (no ID handed) must not make the recreated-topic check go quiet."""
    history = [with_id(0, {0: 5}, "id-a"), with_id(1, {0: 9}, "id-b"), with_id(2, {0: 12}, None)]
    assert position_in(history) == TablePosition(2, {0: 12}, batch=2, query="q", topic_id="id-b")
    # Only the table's current state counts: a restore to version 0 hides id-b.
    restored = [*history, op(3, "RESTORE", version=0), with_id(4, {0: 6}, None)]
    assert position_in(restored) == TablePosition(4, {0: 6}, batch=4, query="q", topic_id="id-a")
    # A restore whose target cannot be told ends the walk: the newest position stands, without an ID.
    unknown = [with_id(0, {0: 5}, "id-a"), op(1, "RESTORE"), with_id(2, {0: 7}, None)]
    assert position_in(unknown) == TablePosition(2, {0: 7}, batch=2, query="q")
    assert position_in([with_id(0, {0: 5}, None)]) == TablePosition(0, {0: 5}, batch=0, query="q")


def test_an_unknown_topic_id_message_names_the_recorded_one():
    message = unknown_id_message("orders", TablePosition(4, {0: 100}, topic_id="old-id"))
    assert "'orders'" in message and "topic ID old-id" in message and "partition 0: 100" in message


def test_the_java_and_librdkafka_spellings_of_one_topic_id_are_one_topic():
    position = TablePosition(4, {0: 100}, topic_id="XxG+JaaORES+MWMnOn/hPQ")
    assert standard_topic_id("XxG-JaaORES-MWMnOn_hPQ") == "XxG+JaaORES+MWMnOn/hPQ"
    assert recreated_message("t", "XxG-JaaORES-MWMnOn_hPQ", position) is None
    assert recreated_message("t", "XxG-JaaORES-MWMnOn_hPZ", position) is not None
