"""The pre-flight of a family, without a JVM: run when any member has something new (or a new member
has records from starting_offsets); a deleted member is no reason to run. And a family's checkpoint
read per topic."""

from __future__ import annotations

import pytest

from kafkalake.kafka.offsets import decide_family
from kafkalake.lake.checkpoint import family_batch_end_offsets, read_family_checkpoint

pytestmark = pytest.mark.families


def state(committed, unfinished=False):
    from kafkalake.lake.checkpoint import FamilyCheckpointState

    return FamilyCheckpointState(committed, unfinished)


MARKS = {"a": {0: (0, 4), 1: (0, 2)}, "b": {0: (0, 3)}}


def test_idle_when_every_member_is_read_to_its_end():
    decision = decide_family(state({"a": {0: 4, 1: 2}, "b": {0: 3}, "gone": {0: 9}}), MARKS, "earliest")
    assert not decision.run and decision.lag == {"a": {0: 0, 1: 0}, "b": {0: 0}}


def test_one_member_with_new_records_runs_the_job():
    decision = decide_family(state({"a": {0: 4, 1: 1}, "b": {0: 3}}), MARKS, "earliest")
    assert decision.run and "a: 1 new records" in decision.reason
    assert decision.lag["a"] == {0: 0, 1: 1}


def test_a_new_member_runs_only_when_starting_offsets_gives_it_records():
    committed = {"a": {0: 4, 1: 2}}
    from_earliest = decide_family(state(committed), MARKS, "earliest")
    assert (
        from_earliest.run
        and from_earliest.new == ("b",)
        and "b: a new member, 3 records" in from_earliest.reason
    )
    from_latest = decide_family(state(committed), MARKS, "latest")
    assert not from_latest.run and from_latest.lag["b"] == {0: 0}


def test_expired_offsets_of_a_member_are_reported_per_member():
    decision = decide_family(state({"a": {0: 4, 1: 2}, "b": {0: 1}}), {**MARKS, "b": {0: (2, 3)}}, "earliest")
    assert decision.expired == {"b": {0: (1, 2)}}


def test_no_checkpoint_is_a_first_run():
    assert decide_family(None, MARKS, "latest").run


def test_a_family_checkpoint_is_read_per_topic(tmp_path):
    checkpoint = tmp_path / "checkpoint"
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "commits").mkdir()
    meta = '{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{}}'
    (checkpoint / "offsets" / "0").write_text(f'v1\n{meta}\n{{"a":{{"0":4,"1":2}},"b":{{"0":3}}}}')
    (checkpoint / "offsets" / "1").write_text(f'v1\n{meta}\n{{"a":{{"0":6,"1":2}},"b":{{"0":3}}}}')
    (checkpoint / "commits" / "0").write_text('v1\n{"nextBatchWatermarkMs":0}')
    read = read_family_checkpoint(str(checkpoint))
    assert read is not None and read.unfinished_batch
    assert read.committed == {"a": {0: 4, 1: 2}, "b": {0: 3}}
    assert family_batch_end_offsets(str(checkpoint), 1) == {"a": {0: 6, 1: 2}, "b": {0: 3}}
    assert read_family_checkpoint(str(tmp_path / "none")) is None
