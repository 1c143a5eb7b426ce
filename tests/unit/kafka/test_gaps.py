"""What a batch lost to Kafka's retention: only offsets both deleted and not read."""

from __future__ import annotations

from kafkalake.kafka.gaps import Gap, at_risk, lost_ranges


def test_offsets_deleted_before_the_batch_read_them_are_a_gap() -> None:
    # Planned 100..199 of partition 0; Kafka now starts at 150 and the batch holds 150 onwards.
    assert at_risk({0: 100}, {0: 200}, {0: 150}) == {0}
    assert lost_ranges({0: 100}, {0: 200}, {0: 150}, {0: 150}) == [Gap(0, 100, 150)]
    assert Gap(0, 100, 150).describe() == "partition 0: offsets 100..149 (50 offsets)"


def test_offsets_read_before_kafka_deleted_them_are_no_gap() -> None:
    # Kafka deleted up to 180 after the batch had read from 100: nothing lost.
    assert lost_ranges({0: 100}, {0: 200}, {0: 180}, {0: 100}) == []
    # Read from 120 on (100..119 were transaction markers, then deleted): 100..119 count as lost
    # offsets, markers included: the loss is stated in offsets, not records.
    assert lost_ranges({0: 100}, {0: 200}, {0: 180}, {0: 120}) == [Gap(0, 100, 120)]


def test_a_gap_never_reaches_past_the_batch() -> None:
    # Everything planned was deleted, and more: the gap is the batch's range, nothing beyond.
    assert lost_ranges({0: 100}, {0: 200}, {0: 500}, {}) == [Gap(0, 100, 200)]


def test_no_risk_when_kafka_still_holds_the_start() -> None:
    assert at_risk({0: 100, 1: 5}, {0: 200, 1: 9}, {0: 100, 1: 0}) == set()
    assert lost_ranges({0: 100}, {0: 200}, {0: 100}, {0: 130}) == []  # 100..129: markers, not loss


def test_a_partition_new_to_the_stream_is_planned_from_zero() -> None:
    assert at_risk({0: 10}, {0: 10, 1: 40}, {1: 25}) == {1}
    assert lost_ranges({0: 10}, {0: 10, 1: 40}, {1: 25}, {1: 25}) == [Gap(1, 0, 25)]


def test_an_empty_range_loses_nothing() -> None:
    assert at_risk({0: 200}, {0: 200}, {0: 300}) == set()
    assert lost_ranges({0: 200}, {0: 200}, {0: 300}, {}) == []


def test_a_log_shorter_than_the_stream_had_read_is_a_gap_of_the_new_log() -> None:
    # The topic was re-created (no topic ID to tell): the stream was at 100, the new log holds 0..39.
    # Spark plans nothing for the partition and goes on from 40, so 0..39 of the new log are lost.
    assert at_risk({0: 100}, {0: 40}, {0: 0}) == {0}
    assert lost_ranges({0: 100}, {0: 40}, {0: 0}, {}) == [Gap(0, 0, 40)]
    # Retention already moved the new log's start to 10; an empty new log loses nothing.
    assert lost_ranges({0: 100}, {0: 40}, {0: 10}, {}) == [Gap(0, 10, 40)]
    assert lost_ranges({0: 100, 1: 5}, {0: 0, 1: 9}, {0: 0, 1: 0}, {1: 5}) == []
    # Had Spark read the new log from its start, nothing would be lost: what a batch holds was read.
    assert lost_ranges({0: 100}, {0: 40}, {0: 0}, {0: 0}) == []
