"""Which of a batch's parsed-side commits records its Kafka position: the last one only."""

from __future__ import annotations

import pytest

from kafkalake.spark.batch_writer import position_carrier


@pytest.mark.parametrize(
    ("latest_by_key", "dead_letters", "carrier"),
    [(False, 0, "parsed"), (False, 3, "dead_letter"), (True, 0, "latest"), (True, 3, "latest")],
)
def test_the_batchs_last_parsed_side_write_carries_its_position(latest_by_key, dead_letters, carrier):
    # Writes go parsed, then dead letters (if any), then the latest-row MERGE (if on): a kill between
    # two of them leaves no table claiming the batch whole (test_lost_state shows the rebuild).
    assert position_carrier(latest_by_key, dead_letters) == carrier


@pytest.mark.parametrize("dead_letters", [0, 3])
def test_a_debezium_topics_current_state_merge_carries_its_position(dead_letters):
    # It is the batch's last write, after the change history and its dead letters.
    assert position_carrier(False, dead_letters, current=True) == "current"
