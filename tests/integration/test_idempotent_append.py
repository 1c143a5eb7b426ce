"""The idempotent append every batch write goes through (``write_idempotent``, Scala
``IdempotentAppend``): what it commits, what it skips, where it looks the version up, and that a
concurrent commit of the same batch still fails it. Real Spark and Delta; read back with delta-rs.

Each runs both ways (``use_extension``): through kafkalake's JVM extension, and through Delta's public
writer, which a job without it uses (``KAFKALAKE_JVM_EXTENSION=off``)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from kafkalake.spark import extension
from kafkalake.spark.batch_writer import write_idempotent as write_with

from .helpers import read_rows

pytestmark = pytest.mark.integration


@pytest.fixture(params=[True, False], ids=["extension", "delta writer"])
def use_extension(request, spark) -> bool:
    if request.param and not extension.loaded(spark):
        pytest.skip("this session runs without kafkalake's JVM extension (KAFKALAKE_JVM_EXTENSION=off)")
    return bool(request.param)


@pytest.fixture
def write_idempotent(use_extension) -> Any:
    """``write_idempotent`` the way the test runs."""

    def write(*args: Any, **kwargs: Any) -> bool:
        return write_with(*args, **kwargs, use_extension=use_extension)

    return write


def lookup(spark: Any) -> str:
    """Where the JVM's last idempotent append read the committed version: "checksum" or "state"."""
    return str(spark.sparkContext._jvm.org.apache.spark.sql.delta.kafkalake.IdempotentAppend.lastLookup())


def rows(spark: Any, batch: int, n: int = 3) -> Any:
    return spark.createDataFrame([(batch, i) for i in range(n)], "batch long, i long")


def crc_transactions(table: Path, version: int) -> list[dict[str, Any]] | None:
    crc = json.loads((table / "_delta_log" / f"{version:020d}.crc").read_text())
    return crc.get("setTransactions")


def test_commits_once_per_batch_and_app_and_reads_the_version_from_the_checksum(
    spark, tmp_path, write_idempotent, use_extension
):
    table = tmp_path / "t"
    path = str(table)
    assert write_idempotent(rows(spark, 0), path, "app-a", 0, metadata='{"note": "b0"}') is True
    assert write_idempotent(rows(spark, 1), path, "app-a", 1) is True
    assert not use_extension or lookup(spark) == "checksum"
    # The same batch again (a replay after a crash): skipped, whatever its rows.
    assert write_idempotent(rows(spark, 1, n=5), path, "app-a", 1) is False
    assert write_idempotent(rows(spark, 0), path, "app-a", 0) is False
    # Another app's batch 1 (a new checkpoint's query id): its own.
    assert write_idempotent(rows(spark, 1), path, "app-b", 1) is True

    landed = read_rows(table)
    assert sorted((r["batch"], r["i"]) for r in landed) == sorted(
        [(0, i) for i in range(3)] + [(1, i) for i in range(3)] * 2
    )
    # What an independent reader sees: Delta's own txn actions, and the commit's userMetadata.
    delta = DeltaTable(path)
    assert (delta.transaction_version("app-a"), delta.transaction_version("app-b")) == (1, 1)
    assert delta.version() == 2
    history = {c["version"]: c for c in delta.history()}
    assert history[0].get("userMetadata") == '{"note": "b0"}'
    assert {t["appId"]: t["version"] for t in crc_transactions(table, 2) or []} == {"app-a": 1, "app-b": 1}


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(None, id="gone"),  # another writer's commit, a crc that failed to write
        pytest.param(lambda text: text[: len(text) // 2], id="cut short"),  # what a full disk leaves
        pytest.param(lambda text: "\x00\xff not json", id="garbage"),
        pytest.param(lambda text: "", id="empty"),
    ],
)
# The extension's own look-up (the checksum, else the state); Delta's writer always asks the state.
@pytest.mark.parametrize("use_extension", [True], ids=["extension"], indirect=True)
def test_without_a_readable_checksum_the_table_state_answers(spark, tmp_path, damage, write_idempotent):
    table = tmp_path / "t"
    path = str(table)
    for batch in range(2):
        assert write_idempotent(rows(spark, batch), path, "app", batch) is True
    # Delta drops a .crc it cannot read; its state reconstruction answers, and answers the same.
    crc = table / "_delta_log" / f"{1:020d}.crc"
    if damage is None:
        crc.unlink()
    else:
        crc.write_text(damage(crc.read_text()))
    spark.sparkContext._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()

    # The replayed batch is still recognised, the next one lands once.
    assert write_idempotent(rows(spark, 1), path, "app", 1) is False
    assert lookup(spark) == "state"
    assert write_idempotent(rows(spark, 2), path, "app", 2) is True
    assert sorted(r["batch"] for r in read_rows(table)) == sorted([0, 1, 2] * 3)
    assert DeltaTable(path).transaction_version("app") == 2


def test_a_schema_change_needs_merge_schema(spark, tmp_path, write_idempotent):
    path = str(tmp_path / "t")
    write_idempotent(rows(spark, 0), path, "app", 0)
    wider = spark.createDataFrame([(1, 0, "x")], "batch long, i long, extra string")
    with pytest.raises(Exception, match=r"(?i)schema mismatch"):
        write_idempotent(wider, path, "app", 1)
    assert write_idempotent(wider, path, "app", 1, merge_schema=True) is True
    assert [r.get("extra") for r in read_rows(tmp_path / "t") if r["batch"] == 1] == ["x"]
    assert DeltaTable(path).transaction_version("app") == 1


def test_a_concurrent_commit_of_the_same_batch_fails_the_other(spark, tmp_path, write_idempotent):
    """Two drivers write one batch (one stalled past its lease while the next run replayed it):
    the second commit must fail, as Delta's own look-up makes it, not land the rows twice."""
    from pyspark.sql import functions as F

    table = tmp_path / "t"
    path = str(table)
    assert write_idempotent(rows(spark, 0), path, "app", 0) is True
    # The stalled write reads the version from the checksum (the path whose fence this shows).
    assert [(t["appId"], t["version"]) for t in crc_transactions(table, 0) or []] == [("app", 0)]

    started, release = tmp_path / "started", tmp_path / "release"

    @F.udf("long", useArrow=False)
    def wait_for_release(i: int) -> int:
        # Runs in a Python worker, while the stalled write holds its transaction open.
        started.touch()
        deadline = time.monotonic() + 120
        while not release.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        return i

    stalled = rows(spark, 1).withColumn("i", wait_for_release("i")).coalesce(1)
    outcome: dict[str, Any] = {}

    def stalled_write() -> None:
        try:
            outcome["written"] = write_idempotent(stalled, path, "app", 1)
        except Exception as err:  # what the driver would raise
            outcome["error"] = err

    writer = threading.Thread(target=stalled_write)
    writer.start()
    try:
        deadline = time.monotonic() + 120
        while not started.exists():
            assert time.monotonic() < deadline, "the stalled write never started"
            time.sleep(0.05)
        # Meanwhile the other driver commits the same batch.
        assert write_idempotent(rows(spark, 1), path, "app", 1) is True
    finally:
        release.touch()
        writer.join(180)
    assert not writer.is_alive()
    assert "written" not in outcome, "the stalled write committed the batch a second time"
    assert "ConcurrentTransactionException" in str(outcome["error"])
    assert sorted(r["batch"] for r in read_rows(table)) == [0, 0, 0, 1, 1, 1]
    assert DeltaTable(path).version() == 1
