"""The re-ingest's window: from the offsets for a time to the checkpoint, refused when Kafka lost it."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from kafkalake.core.errors import ReingestRefusedError
from kafkalake.kafka.windows import (
    DEFAULT_CHUNK_RECORDS,
    Window,
    chunk_records,
    chunks,
    plan_window,
    resolve_window,
)

SINCE = datetime(2026, 5, 1, 10, 0, tzinfo=UTC)


def test_window_runs_from_the_offset_for_the_time_to_the_checkpoint_not_to_kafkas_end():
    window = plan_window(
        "t",
        SINCE,
        at_time={0: 40, 1: None, 2: 0},
        marks={0: (0, 120), 1: (0, 50), 2: (0, 90)},
        committed={0: 100, 1: 50, 2: 80},
    )

    # Partition 1 has no record that late: nothing to re-read there. Records past the checkpoint
    # (0: 100..119, 2: 80..89) are left to the stream.
    assert window.ranges == {0: (40, 100), 2: (0, 80)}
    assert window.records == 140
    assert window.app_id == "kafkalake-reingest:t:2026-05-01T10:00:00+00:00"
    assert "partition 0: 40..99" in window.describe()


def test_a_time_after_the_checkpoint_gives_an_empty_window():
    window = plan_window("t", SINCE, {0: 130}, {0: (0, 140)}, {0: 100})

    assert window.ranges == {} and window.records == 0


def test_a_partition_new_to_the_checkpoint_is_left_to_the_stream():
    window = plan_window("t", SINCE, {0: 5, 1: 0}, {0: (0, 10), 1: (0, 10)}, {0: 10})

    assert window.ranges == {0: (5, 10)}


def test_a_window_starting_before_what_kafka_still_holds_is_refused():
    with pytest.raises(ReingestRefusedError) as refused:
        plan_window("t", SINCE, {0: 50, 1: 30}, {0: (50, 200), 1: (0, 100)}, {0: 200, 1: 100})

    message = str(refused.value)
    assert "partition 0 starts at offset 50" in message and "partition 1" not in message
    assert "deleted by retention" in message and "Nothing was written" in message


def test_a_partition_retention_emptied_is_named_as_unreadable_not_left_out_silently():
    window = plan_window(
        "t", SINCE, {0: 5, 1: None, 2: None}, {0: (0, 10), 1: (100, 100), 2: (0, 0)}, {0: 10, 1: 100}
    )

    assert window.ranges == {0: (5, 10)} and window.emptied == (1,)
    assert "partition(s) 1 hold no record now" in window.describe()
    assert "cannot be read again" in window.describe()
    whole = plan_window("t", SINCE, {0: 5}, {0: (0, 10)}, {0: 10})
    assert whole.emptied == () and "no record now" not in whole.describe()


def test_offset_zero_is_never_expired():
    assert plan_window("t", SINCE, {0: 0}, {0: (0, 10)}, {0: 10}).ranges == {0: (0, 10)}


def test_no_checkpoint_means_nothing_to_repair():
    with pytest.raises(ReingestRefusedError, match="no checkpoint yet"):
        plan_window("t", SINCE, {0: 0}, {0: (0, 10)}, None)


def test_an_unreadable_checkpoint_is_refused_before_kafka_is_asked(tmp_path):
    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "0").write_text("")
    with pytest.raises(ReingestRefusedError, match=r"checkpoint cannot be read .*Run the DAG normally first"):
        resolve_window("t", str(tmp_path), {"bootstrap.servers": "nowhere.invalid:9092"}, SINCE)


def test_chunks_cover_the_window_once_with_bounded_size():
    window = Window("t", SINCE, start={0: 0, 1: 10, 2: 5}, end={0: 25, 1: 12, 2: 5})

    pieces = list(chunks(window, max_records=10))

    covered = [(p, o) for piece in pieces for p, (s, e) in piece.items() for o in range(s, e)]
    assert sorted(covered) == [(0, o) for o in range(25)] + [(1, 10), (1, 11)]
    assert len(covered) == len(set(covered))
    assert all(sum(e - s for s, e in piece.values()) <= 10 for piece in pieces)


def test_an_empty_window_has_no_chunks():
    assert list(chunks(Window("t", SINCE, {0: 5}, {0: 5}), 100)) == []


@pytest.mark.parametrize(
    ("max_offsets", "records"),
    [(200, 200), (1_000_000, 1_000_000), (2_000_000, 1_000_000), (None, DEFAULT_CHUNK_RECORDS)],
    ids=["small", "parsed default", "bronze-only default", "null"],
)
def test_a_chunk_is_the_topics_batch_but_never_more_than_a_cached_parsed_batch(max_offsets, records):
    assert chunk_records(max_offsets) == records
