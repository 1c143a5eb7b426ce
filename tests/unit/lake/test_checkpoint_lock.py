"""The checkpoint run lock, held and contested by real processes (no Spark, no broker)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from kafkalake.core import errors, job_failures
from kafkalake.core.errors import CheckpointLockedError, Kind
from kafkalake.lake.checkpoint_lock import checkpoint_lock, lock_file

INCLUDE = Path(__file__).resolve().parents[3] / "include"

# Takes the lock, says so, and holds it until its stdin closes.
HOLDER = textwrap.dedent(
    """
    import sys
    from kafkalake.lake.checkpoint_lock import checkpoint_lock

    with checkpoint_lock(sys.argv[1]) as path:
        print(f"locked {path}", flush=True)
        sys.stdin.read()
    print("released", flush=True)
    """
)


@pytest.fixture
def checkpoint(tmp_path) -> str:
    return str(tmp_path / "lake" / "bronze" / "orders" / "_kafkalake" / "checkpoint")


@pytest.fixture
def holder(checkpoint) -> Iterator[subprocess.Popen[str]]:
    """Another process holding the lock of ``checkpoint``, until the test closes its stdin."""
    env = {**os.environ, "PYTHONPATH": str(INCLUDE)}
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, checkpoint],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().startswith("locked "), "the holder did not take the lock"
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=30)


def test_second_process_fails_fast_naming_the_holder(checkpoint, holder):
    with pytest.raises(CheckpointLockedError) as raised, checkpoint_lock(checkpoint):
        pytest.fail("took a lock another process holds")

    message = str(raised.value)
    assert f"pid {holder.pid} on host " in message
    assert checkpoint in message
    assert message.startswith("[checkpoint_locked] ")
    assert "retrying with backoff" in message
    assert isinstance(raised.value, errors.TransientError)
    assert raised.value.kind is Kind.CHECKPOINT_LOCKED
    # The turned-away run must not have erased the holder's name.
    path = lock_file(checkpoint)
    assert path is not None and f'"pid": {holder.pid}' in path.read_text()


def test_lock_is_free_again_once_the_holder_releases_it(checkpoint, holder):
    assert holder.stdin is not None and holder.stdout is not None
    holder.stdin.close()
    assert holder.stdout.readline().strip() == "released"
    holder.wait(timeout=30)

    with checkpoint_lock(checkpoint) as path:
        assert path is not None and f'"pid": {os.getpid()}' in path.read_text()
    assert path.read_text() == ""


def test_a_killed_holder_leaves_no_stale_lock(checkpoint, holder):
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=30)

    with checkpoint_lock(checkpoint) as path:
        assert path == Path(checkpoint + ".lock")


def test_lock_file_sits_beside_the_checkpoint_under_the_underscore_folder(checkpoint):
    assert lock_file(checkpoint) == Path(checkpoint + ".lock")
    assert lock_file(checkpoint + "/") == Path(checkpoint + ".lock")
    assert lock_file("file:///data/t/_kafkalake/checkpoint") == Path("/data/t/_kafkalake/checkpoint.lock")
    assert lock_file("file:///data/my%20t/_kafkalake/checkpoint") == Path(
        "/data/my t/_kafkalake/checkpoint.lock"
    )


@pytest.mark.parametrize(
    "uri", ["s3a://bucket/t/_kafkalake/checkpoint", "abfss://c@acct.dfs.core.windows.net/t/_kafkalake/cp"]
)
def test_no_lock_file_on_a_store(uri):
    assert lock_file(uri) is None


def test_an_s3a_checkpoint_is_held_by_a_lease_object_beside_it(monkeypatch):
    taken: list[str] = []

    class Lease:
        def __init__(self, location: str) -> None:
            self.location, self.lost = location, None

        def take(self) -> None:
            taken.append(self.location)

        def release(self) -> None:
            taken.remove(self.location)

    monkeypatch.setattr("kafkalake.lake.checkpoint_lock.LeaseLock", Lease)
    with checkpoint_lock("s3a://bucket/t/_kafkalake/checkpoint/") as path:
        assert path is None
        assert taken == ["s3a://bucket/t/_kafkalake/checkpoint.lock"]
    assert taken == []


def test_a_location_no_lock_can_hold_is_refused():
    with pytest.raises(ValueError, match="abfss://c@acct/t/cp: no run lock"):
        with checkpoint_lock("abfss://c@acct/t/cp"):
            pass


def test_the_lock_is_reentrant_for_nobody(checkpoint):
    """Even the same process cannot take it twice: flock locks an open file, not a process."""
    with checkpoint_lock(checkpoint), pytest.raises(CheckpointLockedError, match=f"pid {os.getpid()} "):
        with checkpoint_lock(checkpoint):
            pass


def test_a_job_reports_the_lock_failure_with_its_own_exit_code(checkpoint, holder):
    with pytest.raises(CheckpointLockedError) as raised, checkpoint_lock(checkpoint):
        pass
    failed = errors.failure_of(raised.value)
    line = job_failures.failure_line(failed)
    assert job_failures.exit_code(failed.kind) == 73
    parsed = job_failures.classify_job_failure(
        "ingest_topic.py", "orders", f"Error code is: 73.\nLast spark-submit output:\n{line}"
    )
    assert parsed.kind is Kind.CHECKPOINT_LOCKED
    assert parsed.retryable
    assert isinstance(parsed.error(), CheckpointLockedError)
