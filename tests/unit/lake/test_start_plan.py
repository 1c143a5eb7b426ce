"""Where the stream starts: the table's recorded position against the checkpoint."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pyarrow as pa
from deltalake import write_deltalake

from kafkalake.lake.care_due import read_state
from kafkalake.lake.checkpoint import CheckpointState
from kafkalake.lake.start_plan import (
    CheckpointFacts,
    StartPlan,
    checkpoint_facts,
    decide_start,
    landed_records,
    read_table,
)
from kafkalake.lake.table_position import TablePosition

Q = "query-1"


def checkpoint(committed: dict[int, int], planned: int, done: int, query: str = Q) -> CheckpointFacts:
    state = CheckpointState(committed, unfinished_batch=planned > done)
    return CheckpointFacts(state, query, tuple(range(planned + 1)), tuple(range(done + 1)))


def test_a_checkpoint_that_agrees_with_the_table_is_used():
    position = TablePosition(7, {0: 100, 1: 50}, batch=4, query=Q)
    assert decide_start(position, checkpoint({0: 100, 1: 50}, 4, 4), {}) == StartPlan()


def test_the_normal_resume_after_a_crash_between_the_commit_and_the_checkpoint_uses_the_checkpoint():
    # Bronze committed batch 5, the checkpoint planned it but did not commit it: Spark replays it.
    position = TablePosition(8, {0: 120, 1: 60}, batch=5, query=Q)
    assert decide_start(position, checkpoint({0: 100, 1: 50}, 5, 4), {}) == StartPlan()


def test_no_checkpoint_and_a_recorded_table_rebuilds_from_the_table():
    position = TablePosition(8, {0: 120, 1: 60}, batch=5, query=Q)
    plan = decide_start(position, CheckpointFacts(None, None), {})
    assert plan.rebuild_from == {0: 120, 1: 60}
    assert "checkpoint is missing" in plan.reason and "version 8" in plan.reason


def test_a_table_restored_behind_its_checkpoint_rebuilds_from_the_table():
    position = TablePosition(3, {0: 40}, batch=2, query=Q)
    plan = decide_start(position, checkpoint({0: 100}, 6, 6), {})
    assert plan.rebuild_from == {0: 40} and "restored to an older version" in plan.reason


def test_a_checkpoint_older_than_the_table_rebuilds_from_the_table():
    position = TablePosition(9, {0: 150}, batch=8, query=Q)
    plan = decide_start(position, checkpoint({0: 100}, 4, 4), {})
    assert plan.rebuild_from == {0: 150} and "(partition 0: 100) is older than the table" in plan.reason


def test_a_checkpoint_of_another_stream_is_used_only_when_its_offsets_match_the_table():
    position = TablePosition(9, {0: 150}, batch=8, query="query-0")
    assert decide_start(position, checkpoint({0: 150}, 2, 2), {}) == StartPlan()
    assert decide_start(position, checkpoint({0: 90}, 2, 2), {}).rebuild_from == {0: 150}


def test_a_rebuild_catches_the_parsed_side_up_where_it_is_behind_and_skips_where_it_is_ahead():
    position = TablePosition(9, {0: 150, 1: 80}, batch=8, query=Q)
    plan = decide_start(position, CheckpointFacts(None, None), {0: 120, 1: 95})
    assert plan.parsed_backlog_from == {0: 120}
    assert plan.parsed_skip_below == {1: 95}


def test_bronze_gone_with_its_checkpoint_never_gives_the_parsed_tables_a_record_twice():
    plan = decide_start(None, CheckpointFacts(None, None), {0: 120})
    assert plan.rebuild_from is None and plan.parsed_skip_below == {0: 120}


def test_a_first_run_is_a_plain_start():
    assert decide_start(None, CheckpointFacts(None, None), {}) == StartPlan()


#: An offset-log file of batch 0 that read 100 offsets of partition 0 of topic "orders".
BATCH_0_OFFSETS = 'v1\n{"batchWatermarkMs":0}\n{"orders":{"0":100}}'


def write_checkpoint(tmp_path: Path, offsets: Mapping[str, str], commits: Sequence[str]) -> Path:
    """A checkpoint of query ``Q`` with these offset-log files (batch → text) and committed batches."""
    root = tmp_path / "checkpoint"
    (root / "offsets").mkdir(parents=True)
    (root / "commits").mkdir()
    (root / "metadata").write_text(f'{{"id":"{Q}"}}')
    for batch, text in offsets.items():
        (root / "offsets" / batch).write_text(text)
    for batch in commits:
        (root / "commits" / batch).write_text('v1\n{"nextBatchWatermarkMs":0}')
    return root


def test_a_checkpoint_whose_newest_offsets_file_is_empty_is_rebuilt_from_the_table(tmp_path):
    # A power loss after Spark renamed offsets/1 into place, before its bytes reached the disk:
    # Spark fails every start on it, so the checkpoint that agrees with the table by its ids must
    # not be used.
    root = write_checkpoint(tmp_path, {"0": BATCH_0_OFFSETS, "1": ""}, commits=("0", "1"))
    facts = checkpoint_facts(root, "orders")
    assert facts == CheckpointFacts(None, None)
    assert landed_records(root, "orders") is None
    plan = decide_start(TablePosition(3, {0: 150}, batch=1, query=Q), facts, {})
    assert plan.rebuild_from == {0: 150} and "unreadable" in plan.reason


def test_a_checkpoint_whose_offset_log_lost_the_committed_batch_is_rebuilt_from_the_table(tmp_path):
    # commits/1 without offsets/1: resumed, Spark would plan batch 1 again, and Delta would skip
    # it (batch 1 of this query id is committed) with whatever new records it covers.
    root = write_checkpoint(tmp_path, {"0": BATCH_0_OFFSETS}, commits=("0", "1"))
    plan = decide_start(TablePosition(3, {0: 150}, batch=1, query=Q), checkpoint_facts(root, "orders"), {})
    assert plan.rebuild_from == {0: 150}


def test_read_table_counts_files_rows_and_bytes_of_the_current_version(tmp_path):
    path = str(tmp_path / "t")
    assert read_table(path) is None and read_state(path) is None
    write_deltalake(path, pa.table({"id": [1, 2], "first name": ["a", "b"]}))
    write_deltalake(path, pa.table({"id": [3], "first name": ["c"]}), mode="append")
    facts = read_table(path)
    on_disk = sum(p.stat().st_size for p in (tmp_path / "t").glob("*.parquet"))
    assert facts is not None and (facts.files, facts.rows, facts.bytes) == (2, 3, on_disk)
    state = read_state(path)
    assert state is not None and state.columns == ("id", "first name")
