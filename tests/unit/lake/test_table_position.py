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
