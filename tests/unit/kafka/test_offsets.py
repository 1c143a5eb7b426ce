"""Pre-flight: the pure decision, and reading a Structured Streaming checkpoint from disk.

The checkpoints are built by hand in Spark's on-disk formats (HDFSMetadataLog, version v1):
``offsets/<batchId>``, ``commits/<batchId>`` and the Kafka source's ``sources/0/0``, which begins
with a NUL byte. Spark also leaves ``.<batchId>.crc`` files and a ``metadata`` file around.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kafkalake.kafka.offsets import Decision, decide, expired_offsets
from kafkalake.lake.checkpoint import CheckpointState, _offsets_line, read_checkpoint

TOPIC = "orders"

# The metadata line Spark writes as the second line of each offsets/<batchId> file.
METADATA_LINE = json.dumps(
    {
        "batchWatermarkMs": 0,
        "batchTimestampMs": 1732291234567,
        "conf": {
            "spark.sql.streaming.stateStore.providerClass": (
                "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
            ),
            "spark.sql.streaming.join.stateFormatVersion": "2",
            "spark.sql.streaming.stateStore.compression.codec": "lz4",
            "spark.sql.streaming.stateStore.rocksdb.formatVersion": "5",
            "spark.sql.streaming.statefulOperator.useStrictDistribution": "true",
            "spark.sql.streaming.flatMapGroupsWithState.stateFormatVersion": "2",
            "spark.sql.streaming.multipleWatermarkPolicy": "min",
            "spark.sql.streaming.aggregation.stateFormatVersion": "2",
            "spark.sql.shuffle.partitions": "2",
        },
    },
    separators=(",", ":"),
)


def offsets_json(offsets: dict[int, int], topic: str = TOPIC) -> str:
    return json.dumps({topic: {str(p): o for p, o in offsets.items()}}, separators=(",", ":"))


def batch_offsets(batch: int) -> dict[int, int]:
    """Distinct, growing end offsets per batch, so a test can tell which batch was read."""
    return {0: 100 * (batch + 1), 1: 100 * (batch + 1) + 1, 2: 100 * (batch + 1) - 1}


class Checkpoint:
    """A checkpoint folder laid out the way Spark writes it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        (root / "metadata").write_text('{"id":"6b4f5f0e-7c8e-4a55-9a43-9a1f6a0a3c11"}')

    def _write(self, folder: str, name: str, text: str) -> None:
        directory = self.root / folder
        directory.mkdir(parents=True, exist_ok=True)
        (directory / name).write_text(text)
        (directory / f".{name}.crc").write_bytes(b"crc\x00\x01\x02")

    def initial(self, offsets: dict[int, int], topic: str = TOPIC) -> None:
        self._write("sources/0", "0", "\x00v1\n" + offsets_json(offsets, topic))

    def offsets(self, batch: int, offsets: dict[int, int], topic: str = TOPIC) -> None:
        self._write("offsets", str(batch), f"v1\n{METADATA_LINE}\n{offsets_json(offsets, topic)}")

    def commit(self, batch: int) -> None:
        self._write("commits", str(batch), 'v1\n{"nextBatchWatermarkMs":0}')

    def batches(self, offsets_up_to: int, commits_up_to: int | None) -> None:
        for batch in range(offsets_up_to + 1):
            self.offsets(batch, batch_offsets(batch))
        for batch in range(-1 if commits_up_to is None else commits_up_to + 1):
            self.commit(batch)


@pytest.fixture
def checkpoint(tmp_path) -> Checkpoint:
    return Checkpoint(tmp_path / "table" / "_kafkalake" / "checkpoint")


# ---------------------------------------------------------------------------------------------
# decide


def test_no_checkpoint_means_run():
    decision = decide(None, {0: 10})
    assert decision.run is True
    assert "first run" in decision.reason
    assert decision.lag == {}


def test_unfinished_batch_means_run_even_when_caught_up():
    decision = decide(CheckpointState({0: 10}, unfinished_batch=True), {0: 10})
    assert decision.run is True
    assert "interrupted" in decision.reason
    assert decision.lag == {}


def test_new_partition_means_run_and_counts_it_from_zero():
    decision = decide(CheckpointState({0: 10, 1: 20}, unfinished_batch=False), {0: 10, 1: 20, 2: 7})
    assert decision.run is True
    assert "[2]" in decision.reason
    assert decision.lag == {0: 0, 1: 0, 2: 7}


def test_lag_is_computed_per_partition():
    decision = decide(CheckpointState({0: 10, 1: 20, 2: 30}, unfinished_batch=False), {0: 15, 1: 20, 2: 33})
    assert decision.run is True
    assert decision.lag == {0: 5, 1: 0, 2: 3}
    assert decision.total_lag == 8
    assert "8 new records" in decision.reason


def test_all_caught_up_means_no_run_with_zero_lag():
    decision = decide(CheckpointState({0: 10, 1: 20}, unfinished_batch=False), {0: 10, 1: 20})
    assert decision == Decision(False, decision.reason, {0: 0, 1: 0})
    assert decision.total_lag == 0


def test_lag_is_never_negative():
    decision = decide(CheckpointState({0: 10, 1: 20}, unfinished_batch=False), {0: 8, 1: 21})
    assert decision.lag == {0: 0, 1: 1}


def test_end_offsets_below_the_committed_ones_run_the_job_so_data_loss_is_reported():
    # A re-created or truncated topic: skipping would hide it; the job fails loudly instead.
    decision = decide(CheckpointState({0: 10, 1: 20}, unfinished_batch=False), {0: 8, 1: 20})
    assert decision.run
    assert "partition 0: end 8 < committed 10" in decision.reason
    assert decision.run is True


def test_lag_is_listed_in_partition_order():
    decision = decide(CheckpointState({0: 0, 1: 0, 2: 0}, unfinished_batch=False), {2: 1, 0: 1, 1: 1})
    assert list(decision.lag) == [0, 1, 2]


# ---------------------------------------------------------------------------------------------
# decide: offsets Kafka deleted before the table read them


def test_earliest_offset_above_committed_lists_the_expired_partitions_and_how_many_are_gone():
    checkpoint = CheckpointState({0: 10, 1: 20, 2: 30}, unfinished_batch=False)
    decision = decide(checkpoint, {0: 50, 1: 60, 2: 70}, {0: 25, 1: 20, 2: 31})
    assert decision.run is True
    assert decision.expired == {0: (10, 25), 2: (30, 31)}
    assert decision.reason == "16 unread records expired in Kafka"
    assert decision.lag == {0: 40, 1: 40, 2: 40}


def test_earliest_offset_at_or_below_committed_is_no_loss():
    checkpoint = CheckpointState({0: 10, 1: 20}, unfinished_batch=False)
    decision = decide(checkpoint, {0: 10, 1: 25}, {0: 10, 1: 3})
    assert decision.expired == {}
    assert decision.reason == "5 new records"


def test_everything_read_then_deleted_by_retention_is_no_loss_and_no_run():
    # Retention emptied the partitions, but only after the table had every record.
    decision = decide(CheckpointState({0: 10, 1: 20}, unfinished_batch=False), {0: 10, 1: 20}, {0: 10, 1: 20})
    assert decision.expired == {}
    assert decision.run is False


def test_expiry_is_found_even_when_the_last_batch_was_interrupted():
    # The rerun would re-plan from the committed offsets, which Kafka no longer holds.
    decision = decide(CheckpointState({0: 10}, unfinished_batch=True), {0: 90}, {0: 40})
    assert decision.expired == {0: (10, 40)}


def test_a_partition_new_to_the_checkpoint_is_read_from_zero_so_a_higher_earliest_is_a_loss():
    decision = decide(CheckpointState({0: 10}, unfinished_batch=False), {0: 10, 1: 9}, {0: 0, 1: 4})
    assert decision.expired == {1: (0, 4)}


def test_a_first_run_starts_wherever_kafka_starts_so_nothing_expired():
    decision = decide(None, {0: 100}, {0: 60})
    assert decision.expired == {}
    assert decision.reason == "first run: no checkpoint yet"


def test_without_earliest_offsets_nothing_is_reported_expired():
    decision = decide(CheckpointState({0: 10}, unfinished_batch=False), {0: 12})
    assert decision.expired == {}


def test_expired_offsets_is_pure_and_ordered():
    checkpoint = CheckpointState({0: 5, 1: 5, 2: 5}, unfinished_batch=False)
    assert list(expired_offsets(checkpoint, {2: 9, 0: 6, 1: 5})) == [0, 2]
    assert expired_offsets(None, {0: 9}) == {}


# ---------------------------------------------------------------------------------------------
# _offsets_line


def test_offsets_line_reads_the_topic_line_of_an_offsets_file():
    text = f"v1\n{METADATA_LINE}\n{offsets_json({0: 1668, 1: 1668, 2: 1667})}"
    assert _offsets_line(text, TOPIC) == {0: 1668, 1: 1668, 2: 1667}


def test_offsets_line_ignores_the_leading_nul_of_sources_files():
    assert _offsets_line("\x00v1\n" + offsets_json({0: 0, 1: 5}), TOPIC) == {0: 0, 1: 5}


def test_offsets_line_is_none_for_another_topic():
    assert _offsets_line(f"v1\n{METADATA_LINE}\n{offsets_json({0: 1})}", "payments") is None


def test_offsets_line_is_not_fooled_by_a_topic_name_inside_the_metadata_line():
    # "lz4" and "min" appear quoted in the metadata line, but not as a source.
    text = f"v1\n{METADATA_LINE}\n{offsets_json({0: 42}, topic='lz4')}"
    assert _offsets_line(text, "lz4") == {0: 42}
    assert _offsets_line(f"v1\n{METADATA_LINE}\n{offsets_json({0: 1})}", "min") is None


def test_a_topic_named_like_a_key_of_the_metadata_line_reads_its_own_offsets(checkpoint):
    # "conf" is a key of the metadata line, its value a map of Spark settings: read as the topic's
    # offsets it failed with "invalid literal for int()", in the pre-flight of every run.
    text = f"v1\n{METADATA_LINE}\n{offsets_json({0: 42}, topic='conf')}"
    assert _offsets_line(text, "conf") == {0: 42}
    checkpoint.initial({0: 0}, topic="conf")
    checkpoint.offsets(0, {0: 42}, topic="conf")
    checkpoint.commit(0)
    assert read_checkpoint(checkpoint.root, "conf") == CheckpointState({0: 42}, False)


def test_offsets_line_keys_are_ints():
    result = _offsets_line(offsets_json({10: 5, 2: 7}), TOPIC)
    assert result == {10: 5, 2: 7}
    assert all(isinstance(p, int) and isinstance(o, int) for p, o in result.items())


# ---------------------------------------------------------------------------------------------
# read_checkpoint


def test_missing_folder_means_no_checkpoint(tmp_path):
    assert read_checkpoint(tmp_path / "nowhere", TOPIC) is None


def test_empty_folder_means_no_checkpoint(tmp_path):
    assert read_checkpoint(tmp_path, TOPIC) is None


def test_metadata_only_means_no_checkpoint(checkpoint):
    # Spark writes `metadata` first: a run that died right after it left nothing to resume.
    assert read_checkpoint(checkpoint.root, TOPIC) is None


def test_only_initial_offsets_are_committed_and_finished(checkpoint):
    checkpoint.initial({0: 0, 1: 0, 2: 0})
    assert read_checkpoint(checkpoint.root, TOPIC) == CheckpointState({0: 0, 1: 0, 2: 0}, False)


def test_all_batches_committed(checkpoint):
    checkpoint.initial({0: 0, 1: 0, 2: 0})
    checkpoint.batches(offsets_up_to=5, commits_up_to=5)
    assert read_checkpoint(checkpoint.root, TOPIC) == CheckpointState(batch_offsets(5), False)


def test_newest_batch_not_committed_is_unfinished(checkpoint):
    checkpoint.initial({0: 0, 1: 0, 2: 0})
    checkpoint.batches(offsets_up_to=5, commits_up_to=4)
    assert read_checkpoint(checkpoint.root, TOPIC) == CheckpointState(batch_offsets(4), True)


def test_first_batch_never_committed_falls_back_to_initial_offsets(checkpoint):
    checkpoint.initial({0: 0, 1: 3, 2: 0})
    checkpoint.batches(offsets_up_to=0, commits_up_to=None)
    assert read_checkpoint(checkpoint.root, TOPIC) == CheckpointState({0: 0, 1: 3, 2: 0}, True)


def test_batch_ids_sort_as_numbers_not_text(checkpoint):
    # "10" sorts before "9" as text; the newest batch is 10.
    checkpoint.initial({0: 0, 1: 0, 2: 0})
    checkpoint.batches(offsets_up_to=10, commits_up_to=10)
    assert read_checkpoint(checkpoint.root, TOPIC) == CheckpointState(batch_offsets(10), False)


def test_purged_early_batches_do_not_matter(checkpoint):
    # Spark deletes old log entries (minBatchesToRetain): only 97..103 remain here.
    checkpoint.initial({0: 0, 1: 0, 2: 0})
    for batch in range(97, 104):
        checkpoint.offsets(batch, batch_offsets(batch))
    for batch in range(97, 103):
        checkpoint.commit(batch)
    assert read_checkpoint(checkpoint.root, TOPIC) == CheckpointState(batch_offsets(102), True)


def test_spark_temp_and_crc_files_are_ignored(checkpoint):
    checkpoint.initial({0: 0, 1: 0, 2: 0})
    checkpoint.batches(offsets_up_to=2, commits_up_to=2)
    # A half-written next batch as Spark leaves it: a hidden temp file, never renamed into place.
    (checkpoint.root / "offsets" / ".3.7d1c2e4f-temp").write_text("v1\n")
    assert read_checkpoint(checkpoint.root, TOPIC) == CheckpointState(batch_offsets(2), False)


@pytest.mark.parametrize(
    ("file", "text"),
    [
        ("offsets/5", ""),  # the newest batch's offsets: renamed into place, its bytes lost
        ("offsets/4", "v1\n"),  # the batch before it, which Spark reads too
        ("offsets/5", f"v1\n{METADATA_LINE}\n" + '{"orders":{"0":6'),
        ("commits/5", "v1\n"),
    ],
)
def test_a_log_file_spark_reads_as_it_starts_empty_or_cut_short_is_an_unreadable_checkpoint(
    checkpoint, file, text
):
    # Spark fails every start on such a file ("Incomplete log file"). Read as {} committed, the
    # pre-flight reported every offset Kafka had expired as lost (offsets_expired, not retried) and
    # the job resumed from the checkpoint; unreadable, the job rebuilds the position from the table.
    checkpoint.initial({0: 0, 1: 0, 2: 0})
    checkpoint.batches(offsets_up_to=5, commits_up_to=5)
    (checkpoint.root / file).write_text(text)
    with pytest.raises(ValueError, match=f"{file}|Expecting|Unterminated"):
        read_checkpoint(checkpoint.root, TOPIC)


def test_an_unfinished_batch_whose_offsets_are_empty_is_an_unreadable_checkpoint(checkpoint):
    checkpoint.initial({0: 0, 1: 0, 2: 0})
    checkpoint.batches(offsets_up_to=6, commits_up_to=5)
    (checkpoint.root / "offsets" / "6").write_text("")
    with pytest.raises(ValueError, match="offsets/6 is empty or cut short"):
        read_checkpoint(checkpoint.root, TOPIC)


@pytest.mark.parametrize("lost", [["5"], ["0", "1", "2", "3", "4", "5"]], ids=["newest", "all"])
def test_a_commit_log_ahead_of_the_offset_log_is_an_unreadable_checkpoint(checkpoint, lost):
    # Read as batch 4's offsets (or the initial ones) with batch 5 committed, the job resumed from
    # the checkpoint: Spark planned batch 5 (or 0..5) again from there, with new records in it,
    # and Delta skipped those writes as already committed by the same query id.
    checkpoint.initial({0: 0, 1: 0, 2: 0})
    checkpoint.batches(offsets_up_to=5, commits_up_to=5)
    for batch in lost:
        (checkpoint.root / "offsets" / batch).unlink()
    with pytest.raises(ValueError, match="commits/5 is ahead of the offset log"):
        read_checkpoint(checkpoint.root, TOPIC)


def test_an_older_log_file_spark_no_longer_reads_does_not_matter(checkpoint):
    checkpoint.initial({0: 0, 1: 0, 2: 0})
    checkpoint.batches(offsets_up_to=5, commits_up_to=5)
    (checkpoint.root / "offsets" / "2").write_text("")
    (checkpoint.root / "commits" / "3").write_text("")
    assert read_checkpoint(checkpoint.root, TOPIC) == CheckpointState(batch_offsets(5), False)


@pytest.mark.parametrize(
    ("offsets_up_to", "commits_up_to", "end", "run", "lag"),
    [
        (5, 5, batch_offsets(5), False, {0: 0, 1: 0, 2: 0}),
        (5, 5, {**batch_offsets(5), 1: batch_offsets(5)[1] + 9}, True, {0: 0, 1: 9, 2: 0}),
        (5, 5, {**batch_offsets(5), 3: 4}, True, {0: 0, 1: 0, 2: 0, 3: 4}),
        (5, 4, batch_offsets(5), True, {}),
    ],
)
def test_checkpoint_on_disk_to_decision(checkpoint, offsets_up_to, commits_up_to, end, run, lag):
    checkpoint.initial({0: 0, 1: 0, 2: 0})
    checkpoint.batches(offsets_up_to, commits_up_to)
    decision = decide(read_checkpoint(checkpoint.root, TOPIC), end)
    assert (decision.run, decision.lag) == (run, lag)
