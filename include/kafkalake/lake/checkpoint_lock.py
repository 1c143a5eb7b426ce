"""One run at a time on a checkpoint: a file lock the ingest job holds while its query runs.

``max_active_runs=1`` keeps the scheduler from starting two runs of one topic's DAG, but not a
job started by hand (``python -m kafkalake.cli.run_job ingest_topic``), an ``airflow dags test``
beside the scheduler, or a driver still running after Airflow gave up on its task. Two streaming
queries on one checkpoint race on its offset and commit logs; this lock makes the second one fail
at once instead.

The lock is ``fcntl.flock`` on ``<table>/_kafkalake/checkpoint.lock``, exclusive and non-blocking.
The kernel drops it when its holder exits, however it exits (SIGKILL included), so a killed run
leaves no stale lock behind; the file itself stays and is harmless. The holder writes its pid, host
and start time into the file, so the run that is turned away can name it. On NFS, Linux maps
``flock`` to POSIX locks, which NFS shares between clients.

Only local paths and ``file://`` URIs can be locked this way. On an object store (``s3a://``) the
lock is an object beside the checkpoint, taken with a conditional PUT and held by a lease
(:mod:`kafkalake.lake.lease_lock`); a run that lost its lease while it stalled is stopped before its
next commit by :func:`fence`, which every commit of a run calls first.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import socket
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import unquote, urlsplit

from kafkalake.core.errors import CheckpointLockedError, Kind, failure
from kafkalake.lake.lease_lock import LeaseLock
from kafkalake.lake.store_settings import is_object_store

log = logging.getLogger(__name__)

LOCK_SUFFIX = ".lock"

#: The leases this process holds, by checkpoint (object stores only).
_leases: dict[str, LeaseLock] = {}


def local_path(location: str) -> Path | None:
    """A local path or ``file://`` URI as a path; None for anything else (object stores)."""
    if "://" in location:
        parts = urlsplit(location)
        if parts.scheme != "file" or parts.netloc not in ("", "localhost"):
            return None
        location = unquote(parts.path)
    return Path(location.rstrip("/"))


def lock_file(checkpoint: str) -> Path | None:
    """The lock file of a checkpoint, beside it; None where file locks cannot work (object stores)."""
    path = local_path(checkpoint)
    return None if path is None else path.with_name(path.name + LOCK_SUFFIX)


@contextlib.contextmanager
def checkpoint_lock(checkpoint: str) -> Iterator[Path | None]:
    """Hold the run lock of ``checkpoint`` for the ``with`` block; yields the lock file.

    Raises:
        CheckpointLockedError: another process holds the lock (a transient failure: the task
            retries with backoff). Its message names the holder's pid, host and start time.
    """
    if is_object_store(checkpoint):
        with _lease(checkpoint):
            yield None
        return
    path = lock_file(checkpoint)
    if path is None:
        raise ValueError(f"{checkpoint}: no run lock for this kind of location")
    path.parent.mkdir(parents=True, exist_ok=True)
    # O_RDWR without O_TRUNC: truncating before the lock is ours would erase the holder's name.
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise _locked_error(checkpoint, path, _read_holder(fd)) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(_holder()).encode(), 0)
        log.info("took the run lock %s", path)
        try:
            yield path
        finally:
            # Cleared before the unlock, so the file never names a process that no longer holds it.
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


@contextlib.contextmanager
def _lease(checkpoint: str) -> Iterator[None]:
    lock = LeaseLock(checkpoint.rstrip("/") + LOCK_SUFFIX)
    lock.take()
    _leases[checkpoint] = lock
    try:
        yield
    finally:
        del _leases[checkpoint]
        lock.release()


def assert_held(checkpoint: str) -> None:
    """Before a write: raise when this process may no longer write behind ``checkpoint``'s lease.

    A no-op for local checkpoints (the kernel's lock cannot be lost while its holder lives) and
    for code that holds no lock (a test, a tool).

    Raises:
        CheckpointLockedError: the lease was lost (taken over, or its renewal stopped), or its last
            renewal is too old to be sure no other run takes it over while this one writes.
    """
    lock = _leases.get(checkpoint)
    why = lock.check_held() if lock is not None else None
    if why is not None:
        raise CheckpointLockedError(failure(Kind.CHECKPOINT_LOCKED, why).message)


def fence() -> None:
    """Before every commit this process makes (a table's, the checkpoint's, care's): every lease it
    holds must still be safely held. Called where the commit happens, so no path can skip it.

    Raises:
        CheckpointLockedError: as :func:`assert_held`, for any lease this process holds.
    """
    for checkpoint in list(_leases):
        assert_held(checkpoint)


def _holder() -> dict[str, object]:
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "since": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def _read_holder(fd: int) -> dict[str, object]:
    try:
        holder = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except ValueError:  # the holder is between taking the lock and writing its name
        return {}
    return holder if isinstance(holder, dict) else {}


def _locked_error(checkpoint: str, path: Path, holder: dict[str, object]) -> CheckpointLockedError:
    if "pid" in holder:
        who = f"pid {holder['pid']} on host {holder.get('host', '?')} since {holder.get('since', '?')}"
    else:
        who = "a process that has not written its pid yet"
    detail = f"checkpoint {checkpoint} is in use by another run: {who} (lock file {path})"
    return CheckpointLockedError(failure(Kind.CHECKPOINT_LOCKED, detail).message)
