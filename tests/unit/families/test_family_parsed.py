"""A family's parsed side: what a rebuild under a new checkpoint parses from bronze first (the spans
the parsed tables' recorded positions lack), and the replay window per (member, partition)."""

from __future__ import annotations

import pytest

from kafkalake.lake.family_start import parsed_behind
from kafkalake.spark.replay import BRONZE_COLUMNS, PARSED_COLUMNS, Selection, window_predicate

pytestmark = pytest.mark.families


def test_the_parsed_side_whole_lacks_nothing():
    bronze = {"a": {0: 5, 1: 3}, "b": {0: 7}}
    assert parsed_behind(bronze, [bronze, None]) == {}


def test_a_batch_a_kill_left_to_the_parsed_side_is_the_span_between_the_two_positions():
    bronze = {"a": {0: 9, 1: 3}, "b": {0: 7}}
    # The parsed table recorded an older batch; the latest table (the carrier) a newer one of a.
    parsed = [{"a": {0: 5, 1: 3}, "b": {0: 4}}, {"a": {0: 6}}]
    assert parsed_behind(bronze, parsed) == {"a": {0: (6, 9)}, "b": {0: (4, 7)}}


def test_a_member_the_parsed_side_never_saw_is_behind_from_offset_zero():
    assert parsed_behind({"new": {0: 2, 1: 0}}, [{"a": {0: 1}}]) == {"new": {0: (0, 2)}}


def test_a_familys_replay_window_names_each_members_partition():
    offsets = {("b", 0): 4, ("a", 0): 9}
    assert window_predicate(offsets, Selection(), BRONZE_COLUMNS) == (
        "((topic = 'a' AND partition = 0 AND offset <= 9) OR (topic = 'b' AND partition = 0 AND offset <= 4))"
    )
    assert window_predicate(offsets, Selection(), PARSED_COLUMNS).startswith(
        "((_kafka.topic = 'a' AND _kafka.partition = 0 AND _kafka.offset <= 9) OR "
    )
