"""Full refresh: what it refuses before asking anything or deleting anything, and how it deletes."""

from __future__ import annotations

import fcntl
import os
import shutil
from datetime import timedelta
from pathlib import Path

import pytest

from kafkalake.cli import full_refresh
from kafkalake.cli.full_refresh import plan, unsafe_to_delete
from kafkalake.config.parsed import ParsedConfig
from kafkalake.config.tables import topic_tables
from kafkalake.config.topic import TopicConfig
from kafkalake.kafka.offsets import is_compacted
from kafkalake.lake.checkpoint_lock import lock_file


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


def test_the_run_lock_is_held_until_every_table_is_gone_and_its_file_goes_last(tmp_path, monkeypatch):
    """The lock file lives in bronze's folder: deleted first, it would let an ingest start while the
    parsed tables are still being deleted. Every deletion happens while the lock is held."""
    lake = tmp_path / "lake"
    t = TopicConfig(
        name="orders",
        freshness_sla=timedelta(hours=1),
        table="orders",
        path=str(lake / "bronze" / "orders"),
        parsed=ParsedConfig(latest_by_key=True),
        parsed_location=str(lake / "silver" / "orders"),
    )
    for table in topic_tables(t):
        (Path(table.location) / "_delta_log").mkdir(parents=True)
        (Path(table.location) / "part-0.parquet").write_bytes(b"x")
    (Path(t.checkpoint_path) / "offsets").mkdir(parents=True)
    lock = lock_file(t.checkpoint_path)
    assert lock is not None

    def held() -> bool:
        fd = os.open(lock, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False

    seen: list[tuple[str, bool]] = []
    rmtree = shutil.rmtree

    def watched(path, *args, **kwargs):
        seen.append((str(path), lock.exists() and held()))
        rmtree(path, *args, **kwargs)

    monkeypatch.setattr(full_refresh.shutil, "rmtree", watched)
    deleted = full_refresh.delete_tables(t, lake)
    assert sorted(deleted) == sorted([*(tb.location for tb in topic_tables(t)), t.checkpoint_path])
    assert seen and all(was_held for _, was_held in seen), seen
    assert [p for p, _ in seen][-1].startswith(t.path)  # bronze's own folder went last
    assert not Path(t.path).exists() and not any(Path(tb.location).exists() for tb in topic_tables(t))
