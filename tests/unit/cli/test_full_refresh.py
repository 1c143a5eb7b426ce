"""Full refresh's pure decisions: what it refuses before asking anything or deleting anything."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from kafkalake.cli.full_refresh import plan, unsafe_to_delete
from kafkalake.config.topic import TopicConfig
from kafkalake.kafka.offsets import is_compacted


def topic(**fields) -> TopicConfig:
    return TopicConfig(
        name="orders", freshness_sla=timedelta(hours=1), table="orders", path="/lake/o", **fields
    )


def test_a_compacted_topic_is_refused_unless_the_loss_is_accepted():
    marks = {0: (0, 10), 1: (0, 5)}
    refused = plan(topic(), marks, compacted=True)
    assert not refused.allowed and "compacted" in refused.reason and "--allow-compacted" in refused.reason
    assert plan(topic(), marks, compacted=True, allow_compacted=True).allowed
    assert plan(topic(), marks).allowed


@pytest.mark.parametrize(
    ("policy", "compacted"),
    [("delete", False), ("compact", True), ("compact,delete", True), ("delete, compact", True), ("", False)],
)
def test_cleanup_policy_compact_in_any_form_is_compaction(policy, compacted):
    assert is_compacted({"cleanup.policy": policy}) is compacted
    assert is_compacted({}) is False


def test_paths_inside_the_lake_may_be_deleted_and_the_lake_itself_never(tmp_path):
    lake = tmp_path / "lake"
    assert unsafe_to_delete(lake / "bronze" / "orders", lake) is None
    assert unsafe_to_delete(lake / "bronze" / "orders" / "_kafkalake" / "checkpoint", lake) is None
    assert "lake root" in (unsafe_to_delete(lake, lake) or "")
    assert "lake root" in (unsafe_to_delete(tmp_path, lake) or "")  # holds the lake
    assert "lake root" in (unsafe_to_delete(lake / "bronze" / "..", lake) or "")  # the same, spelled oddly


@pytest.mark.parametrize("path", ["/", "/tmp", "/etc", "/home"])
def test_roots_and_top_level_folders_are_never_deleted(path, tmp_path):
    assert unsafe_to_delete(Path(path), tmp_path / "lake") is not None


def test_the_home_folder_and_its_parents_are_never_deleted(tmp_path):
    assert unsafe_to_delete(Path.home(), tmp_path / "lake") is not None


def test_a_configured_location_outside_the_lake_must_hold_a_delta_table_or_nothing(tmp_path):
    lake = tmp_path / "lake"
    elsewhere = tmp_path / "data" / "orders"
    assert unsafe_to_delete(elsewhere, lake) is None  # nothing there yet
    elsewhere.mkdir(parents=True)
    (elsewhere / "precious.txt").write_text("not a table")
    assert "holds no Delta table" in (unsafe_to_delete(elsewhere, lake) or "")
    (elsewhere / "_delta_log").mkdir()
    assert unsafe_to_delete(elsewhere, lake) is None
