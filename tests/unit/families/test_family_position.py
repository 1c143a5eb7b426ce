"""A family's position in its table's Delta log (per member topic: offsets and topic ID), the
single-topic record left as it was, and where a family's stream starts (checkpoint or table)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kafkalake.core.errors import Kind, TableStateError
from kafkalake.lake.checkpoint import FamilyCheckpointState
from kafkalake.lake.family_start import FamilyCheckpointFacts, decide_family_start
from kafkalake.lake.table_position import (
    TablePosition,
    commit_metadata,
    family_commit_metadata,
    family_identity_failure,
    position_in,
)

pytestmark = pytest.mark.families


def commit(version: int, metadata: str | None) -> dict[str, Any]:
    return {"version": version, "operation": "WRITE", "userMetadata": metadata, "timestamp": version}


def test_a_single_topics_record_is_unchanged():
    # Byte for byte what tables written before families hold, and what they are still given.
    assert commit_metadata({1: 7, 0: 5}, 3, "q", "ID1") == (
        '{"kafkalake": {"batch": 3, "end": {"0": 5, "1": 7}, "query": "q", "topic_id": "ID1"}}'
    )
    position = position_in([commit(0, commit_metadata({0: 5}, 0, "q", "ID1"))])
    assert position == TablePosition(0, {0: 5}, 0, "q", "ID1")
    assert position.members is None and position.member("x") is None


def test_a_family_records_each_member_with_its_offsets_and_topic_id():
    text = family_commit_metadata({"b": {0: 3}, "a": {1: 9, 0: 4}}, {"a": "IDA", "b": "IDB"}, 7, "q")
    assert json.loads(text) == {
        "kafkalake": {
            "batch": 7,
            "query": "q",
            "topics": {
                "a": {"end": {"0": 4, "1": 9}, "topic_id": "IDA"},
                "b": {"end": {"0": 3}, "topic_id": "IDB"},
            },
        }
    }
    older = family_commit_metadata({"a": {0: 1}}, {"a": "IDA"}, 6, "q")
    position = position_in([commit(4, older), commit(5, text), commit(6, None)])
    assert position is not None and position.version == 5 and position.batch == 7
    assert position.members == {"a": {0: 4, 1: 9}, "b": {0: 3}}
    assert position.member("a") == TablePosition(5, {0: 4, 1: 9}, 7, "q", "IDA")
    assert "a: partition 0: 4, partition 1: 9; b: partition 0: 3" in position.describe()


def test_a_recreated_member_is_told_by_its_new_id_and_an_unsaid_id_is_not_read_past():
    position = position_in(
        [commit(0, family_commit_metadata({"a": {0: 4}, "b": {0: 2}}, {"a": "A1", "b": "B1"}, 0, "q"))]
    )
    assert family_identity_failure({"a": "A1", "b": "B1"}, position) is None
    assert (
        family_identity_failure({"a": "A1", "new": "N1"}, position) is None
    )  # a new member: nothing to check
    recreated = family_identity_failure({"a": "A1", "b": "B2"}, position)
    assert recreated is not None and recreated.kind is Kind.TOPIC_RECREATED and "'b'" in recreated.message
    unknown = family_identity_failure({"a": None}, position)
    assert unknown is not None and unknown.kind is Kind.BROKER_UNREACHABLE


def facts(committed: dict[str, dict[int, int]] | None, query: str = "q", planned=(0, 1), done=(0, 1)):
    state = None if committed is None else FamilyCheckpointState(committed, set(planned) != set(done))
    return FamilyCheckpointFacts(state, query, tuple(planned), tuple(done))


def family(members: dict[str, dict[int, int]], batch: int = 1, query: str = "q") -> TablePosition:
    return TablePosition(3, {}, batch, query, members=members, member_ids={t: t.upper() for t in members})


def test_a_first_run_starts_every_member_from_starting_offsets():
    start = decide_family_start(["a", "b"], None, facts(None))
    assert start.rebuild_from is None and start.new == ("a", "b")


def test_the_checkpoint_holds_when_it_agrees_with_the_table_or_its_unfinished_batch_is_the_tables():
    table = family({"a": {0: 4}, "b": {0: 2}})
    assert decide_family_start(["a", "b"], table, facts({"a": {0: 4}, "b": {0: 2}})).rebuild_from is None
    # Killed after bronze's commit of batch 2, before the checkpoint's: Spark replays it, Delta skips it.
    killed = facts({"a": {0: 1}, "b": {0: 1}}, planned=(0, 1, 2), done=(0, 1))
    assert (
        decide_family_start(["a", "b"], family({"a": {0: 4}, "b": {0: 2}}, batch=2), killed).rebuild_from
        is None
    )


def test_a_lost_checkpoint_is_rebuilt_from_the_tables_offsets_per_member():
    table = family({"a": {0: 4, 1: 6}, "b": {0: 2}})
    start = decide_family_start(["a", "b"], table, facts(None))
    assert start.rebuild_from == {"a": {0: 4, 1: 6}, "b": {0: 2}}
    assert "missing" in start.reason and start.new == ()


def test_a_new_member_and_a_deleted_one_start_afresh_from_the_table():
    table = family({"a": {0: 4}, "gone": {0: 8}})
    start = decide_family_start(["a", "c"], table, facts({"a": {0: 4}, "gone": {0: 8}}))
    # c from starting_offsets (None); gone is not read, and keeps its record in each commit.
    assert start.rebuild_from == {"a": {0: 4}, "c": None}
    assert start.new == ("c",) and start.known == {"a": {0: 4}, "gone": {0: 8}}
    assert "new: c" in start.reason and "gone: gone" in start.reason


def test_a_checkpoint_that_never_committed_a_batch_keeps_the_offsets_it_pinned():
    start = decide_family_start(["a", "c"], None, facts({"a": {0: 0}}, planned=(), done=()))
    assert start.rebuild_from == {"a": {0: 0}, "c": None}


def test_a_checkpoint_behind_the_table_is_rebuilt():
    start = decide_family_start(["a"], family({"a": {0: 9}}, query="other"), facts({"a": {0: 4}}))
    assert start.rebuild_from == {"a": {0: 9}}


def test_a_single_topics_table_is_no_familys():
    with pytest.raises(TableStateError, match="single topic"):
        decide_family_start(["a"], TablePosition(1, {0: 3}, 0, "q"), facts(None))
