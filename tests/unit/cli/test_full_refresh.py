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
    t = orders_topic(lake)
    for table in topic_tables(t):
        write_table(Path(table.location), description=f"Kafka topic orders, {table.kind}")
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


def write_table(path: Path, description: str | None = None, **configuration: str) -> None:
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    write_deltalake(str(path), pa.table({"x": [1]}), description=description)
    if configuration:
        # delta-rs creates tables with delta.* properties only; Spark's tables carry any (it reads them).
        DeltaTable(str(path)).alter.set_table_properties(configuration, raise_if_not_exists=False)


def orders_topic(lake: Path) -> TopicConfig:
    return TopicConfig(
        name="orders",
        freshness_sla=timedelta(hours=1),
        table="orders",
        path=str(lake / "bronze" / "orders"),
        parsed=ParsedConfig(latest_by_key=True),
        parsed_location=str(lake / "silver" / "orders"),
    )


def test_only_tables_whose_log_names_this_topic_are_ours(tmp_path):
    t = orders_topic(tmp_path / "lake")
    assert full_refresh.not_ours(tmp_path / "nothing-here", t) is None
    tagged = tmp_path / "tagged"
    write_table(tagged, **{full_refresh.TOPIC_PROPERTY: "orders"})
    assert full_refresh.not_ours(tagged, t) is None
    other = tmp_path / "other"
    write_table(
        other, description="Kafka topic orders, as landed", **{full_refresh.TOPIC_PROPERTY: "payments"}
    )
    assert "table of topic 'payments', not 'orders'" in (full_refresh.not_ours(other, t) or "")
    # Tables created before the property: kafkalake's own description names the topic.
    for ok in ("Kafka topic orders, as landed by kafkalake (bronze)", "Kafka topic orders: parsed table"):
        write_table(tmp_path / ok[-6:], description=ok)
        assert full_refresh.not_ours(tmp_path / ok[-6:], t) is None
    # A topic whose name starts the same is another topic.
    write_table(tmp_path / "eu", description="Kafka topic orders.eu, as landed by kafkalake")
    assert "did not create for topic 'orders'" in (full_refresh.not_ours(tmp_path / "eu", t) or "")
    write_table(tmp_path / "theirs", description="the finance team's ledger")
    assert "did not create" in (full_refresh.not_ours(tmp_path / "theirs", t) or "")
    write_table(tmp_path / "bare")
    assert "did not create" in (full_refresh.not_ours(tmp_path / "bare", t) or "")


def test_a_folder_without_a_table_may_hold_only_kafkalakes_own_files(tmp_path):
    t = orders_topic(tmp_path / "lake")
    folder = tmp_path / "bronze"
    (folder / "_kafkalake" / "checkpoint" / "offsets").mkdir(parents=True)
    assert full_refresh.not_ours(folder, t) is None
    (folder / "report.csv").write_text("a,b")
    assert "holds files but no Delta table (report.csv)" in (full_refresh.not_ours(folder, t) or "")
    broken = tmp_path / "broken"
    (broken / "_delta_log").mkdir(parents=True)
    (broken / "_delta_log" / "00000000000000000000.json").write_text("not json")
    assert "cannot be read" in (full_refresh.not_ours(broken, t) or "")


def test_a_refresh_that_finds_a_foreign_table_deletes_nothing(tmp_path):
    lake = tmp_path / "lake"
    t = orders_topic(lake)
    tables = topic_tables(t)
    for table in tables[:-1]:
        write_table(Path(table.location), description=f"Kafka topic orders, {table.kind}")
    write_table(Path(tables[-1].location), description="someone else's table")
    with pytest.raises(
        SystemExit, match=r"REFUSED: .* did not create for topic 'orders'.*nothing was deleted"
    ):
        full_refresh.delete_tables(t, lake)
    assert all(Path(table.location, "_delta_log").is_dir() for table in tables)
