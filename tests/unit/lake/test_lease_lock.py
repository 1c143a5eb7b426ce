"""The run lock on an object store, against an in-memory stand-in for S3's conditional PUTs.

The real server (s3proxy) runs the same cases in tests/integration/test_object_store.py; these pin
the decisions: who wins, what the loser is told, when a lease counts as run out.
"""

from __future__ import annotations

import io
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import pytest
from botocore.exceptions import ClientError

from kafkalake.core.errors import (
    AuthenticationFailedError,
    AuthorizationFailedError,
    BadConfigError,
    CheckpointLockedError,
)
from kafkalake.lake import checkpoint_lock as checkpoint_lock_module
from kafkalake.lake import lease_lock
from kafkalake.lake.checkpoint_lock import assert_held, checkpoint_lock
from kafkalake.lake.lease_lock import Holder, LeaseLock

LOCATION = "s3a://lake/raw/orders/_kafkalake/checkpoint.lock"


def client_error(status: int, code: str) -> ClientError:
    return ClientError({"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, "PutObject")


class FakeS3:
    """Objects with ETags and the two preconditions S3 checks on PUT; a clock the test moves."""

    def __init__(self, *, honours_conditions: bool = True) -> None:
        self.objects: dict[tuple[str, str], tuple[str, bytes, datetime]] = {}
        self.now = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
        self.honours_conditions = honours_conditions
        self.refuse: ClientError | None = None
        #: Called once, after the next GET is answered (to let "another run" act in between).
        self.after_get: Callable[[], None] | None = None

    def put_object(self, *, Bucket: str, Key: str, Body: bytes, **extra: Any) -> dict[str, Any]:
        if self.refuse is not None:
            raise self.refuse
        current = self.objects.get((Bucket, Key))
        if self.honours_conditions:
            if extra.get("IfNoneMatch") == "*" and current is not None:
                raise client_error(412, "PreconditionFailed")
            if "IfMatch" in extra and (current is None or current[0] != extra["IfMatch"]):
                raise client_error(412, "PreconditionFailed")
        etag = f'"{uuid.uuid4().hex}"'
        self.objects[(Bucket, Key)] = (etag, Body, self.now.replace(microsecond=0))
        return {"ETag": etag}

    def get_object(self, *, Bucket: str, Key: str) -> dict[str, Any]:
        if (Bucket, Key) not in self.objects:
            raise client_error(404, "NoSuchKey")
        etag, body, modified = self.objects[(Bucket, Key)]
        if self.after_get is not None:
            hook, self.after_get = self.after_get, None
            hook()
        return {
            "ETag": etag,
            "Body": io.BytesIO(body),
            "LastModified": modified,
            "ResponseMetadata": {"HTTPHeaders": {"date": format_datetime(self.now, usegmt=True)}},
        }

    def holder(self) -> Holder:
        _etag, body, _modified = self.objects[("lake", "raw/orders/_kafkalake/checkpoint.lock")]
        found = Holder.parse(body)
        assert found is not None
        return found


@pytest.fixture
def s3() -> FakeS3:
    return FakeS3()


def lock(s3: FakeS3, lease: int = 120) -> LeaseLock:
    return LeaseLock(LOCATION, client=s3, lease=lease)


def test_the_first_run_takes_it_and_the_second_is_told_who_holds_it(s3):
    first = lock(s3)
    first.take()
    try:
        assert s3.holder().owner == first.owner and not s3.holder().released
        with pytest.raises(CheckpointLockedError) as refused:
            lock(s3).take()
        message = str(refused.value)
        assert message.startswith("[checkpoint_locked] ")
        assert f"pid {s3.holder().pid} on host {s3.holder().host}" in message
        assert "it can be taken over in 150 s" in message
        assert "checkpoint s3a://lake/raw/orders/_kafkalake/checkpoint " in message
    finally:
        first.release()


def test_a_released_lock_is_taken_over_at_once_and_only_by_one(s3):
    first = lock(s3)
    first.take()
    first.release()
    assert s3.holder().released
    second = lock(s3)
    second.take()
    assert s3.holder().owner == second.owner and not s3.holder().released
    with pytest.raises(CheckpointLockedError):
        lock(s3).take()
    second.release()


def test_a_dead_holders_lease_runs_out_and_the_next_run_takes_over(s3):
    dead = lock(s3, lease=60)
    dead.take()
    dead._stop.set()  # killed: no more renewals, no release
    # A taker waits the lease and a quarter of it again (75 s): the holder stopped writing at 30 s.
    s3.now += timedelta(seconds=74)
    with pytest.raises(CheckpointLockedError, match="taken over in 1 s"):
        lock(s3).take()
    s3.now += timedelta(seconds=2)
    taker = lock(s3)
    taker.take()
    assert s3.holder().owner == taker.owner
    # The stalled holder wakes up: its renewal finds the object changed and it knows it lost.
    assert dead.renew_once() is False
    assert dead.lost is not None and "taken over by another run" in dead.lost
    assert s3.holder().owner == taker.owner
    taker.release()


def test_the_holders_lease_decides_not_the_takers(s3):
    holder = lock(s3, lease=600)
    holder.take()
    s3.now += timedelta(seconds=300)
    with pytest.raises(CheckpointLockedError, match="taken over in 450 s"):
        lock(s3, lease=10).take()
    holder.release()


def test_a_renewal_restarts_the_lease(s3):
    holder = lock(s3, lease=60)
    holder.take()
    s3.now += timedelta(seconds=50)
    assert holder.renew_once() is True
    s3.now += timedelta(seconds=50)
    with pytest.raises(CheckpointLockedError):
        lock(s3).take()
    holder.release()


def test_a_holder_that_cannot_renew_for_a_whole_lease_counts_it_lost(s3):
    clock = [0.0]
    holder = LeaseLock(LOCATION, client=s3, lease=60, clock=lambda: clock[0])
    holder.take()
    holder._stop.set()  # renewals by hand below
    s3.refuse = client_error(503, "SlowDown")
    clock[0] = 30.0
    assert holder.renew_once() is True and holder.lost is None  # within its lease: tries again
    clock[0] = 61.0
    assert holder.renew_once() is False
    assert holder.lost is not None and "could not be renewed for 61 s, past its 60 s lease" in holder.lost
    s3.refuse = None
    holder.release()
    assert not s3.holder().released  # it does not touch what it may no longer hold


def test_a_renewal_that_gets_through_restarts_the_count(s3):
    clock = [0.0]
    holder = LeaseLock(LOCATION, client=s3, lease=60, clock=lambda: clock[0])
    holder.take()
    holder._stop.set()
    s3.refuse = client_error(503, "SlowDown")
    clock[0] = 45.0
    assert holder.renew_once() is True
    s3.refuse = None
    clock[0] = 50.0
    assert holder.renew_once() is True
    s3.refuse = client_error(503, "SlowDown")
    clock[0] = 100.0  # 50 s since the last renewal that got through
    assert holder.renew_once() is True and holder.lost is None
    s3.refuse = None
    holder.release()
    assert s3.holder().released


def test_of_two_runs_taking_over_an_expired_lease_only_one_wins(s3):
    dead = lock(s3, lease=10)
    dead.take()
    dead._stop.set()
    s3.now += timedelta(seconds=13)
    winner = lock(s3)
    loser = lock(s3)
    # The loser read the expired object; the winner takes it over before the loser's conditional PUT.
    s3.after_get = winner.take
    with pytest.raises(CheckpointLockedError, match="took it over just now"):
        loser.take()
    assert s3.holder().owner == winner.owner
    winner.release()


def test_a_store_that_ignores_conditional_writes_is_refused_not_trusted():
    s3 = FakeS3(honours_conditions=False)
    with pytest.raises(BadConfigError, match="ignores conditional writes"):
        lock(s3).take()


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (client_error(403, "AccessDenied"), AuthorizationFailedError),
        (client_error(403, "InvalidAccessKeyId"), AuthenticationFailedError),
        (client_error(403, "SignatureDoesNotMatch"), AuthenticationFailedError),
    ],
)
def test_refused_credentials_are_their_failure_kind(s3, error, expected):
    s3.refuse = error
    with pytest.raises(expected, match=LOCATION):
        lock(s3).take()


def test_other_store_errors_come_through_as_they_are_and_retry(s3):
    s3.refuse = client_error(503, "SlowDown")
    with pytest.raises(ClientError):
        lock(s3).take()


def test_assert_held_stops_a_run_whose_lease_was_taken_over(s3, monkeypatch):
    monkeypatch.setattr(checkpoint_lock_module, "LeaseLock", lambda location: LeaseLock(location, client=s3))
    checkpoint = LOCATION.removesuffix(".lock")
    with checkpoint_lock(checkpoint):
        assert_held(checkpoint)  # held: nothing happens
        mine = checkpoint_lock_module._leases[checkpoint]
        mine._stop.set()
        s3.now += timedelta(seconds=151)
        other = lock(s3)
        other.take()
        assert mine.renew_once() is False
        with pytest.raises(CheckpointLockedError, match="stalled for longer than its 120 s lease"):
            assert_held(checkpoint)
    assert checkpoint not in checkpoint_lock_module._leases
    # It never releases what it no longer holds.
    assert s3.holder().owner == other.owner and not s3.holder().released
    other.release()
    assert_held(checkpoint)  # no lease held here any more: nothing to check


@pytest.mark.parametrize("raw", ["0", "3", "soon", "-5", "3601"])
def test_a_bad_lease_setting_is_named(monkeypatch, raw):
    monkeypatch.setenv(lease_lock.ENV_LEASE_SECONDS, raw)
    with pytest.raises(ValueError, match=f"KAFKALAKE_LOCK_LEASE_SECONDS .*{raw!r}"):
        lease_lock.lease_seconds()


def test_the_lease_setting(monkeypatch):
    monkeypatch.delenv(lease_lock.ENV_LEASE_SECONDS, raising=False)
    assert lease_lock.lease_seconds() == lease_lock.DEFAULT_LEASE_SECONDS
    monkeypatch.setenv(lease_lock.ENV_LEASE_SECONDS, "30")
    assert lease_lock.lease_seconds() == 30


def test_bucket_and_key_as_s3a_names_them():
    assert lease_lock.bucket_and_key("s3a://b/a b/c%41/x.lock") == ("b", "a b/c%41/x.lock")


def test_a_holder_stops_writing_at_half_its_lease_without_a_renewal(s3):
    """A frozen holder (GC pause, SIGSTOP) wakes and is fenced off before its renewal thread ran:
    by its own clock, half a lease without a renewal is too late to write."""
    clock = [0.0]
    holder = LeaseLock(LOCATION, client=s3, lease=60, clock=lambda: clock[0])
    holder.take()
    try:
        assert holder.check_held() is None
        clock[0] = 29.0
        assert holder.check_held() is None
        clock[0] = 30.0
        why = holder.check_held()
        assert why is not None and "last renewed 30 s ago, past half its 60 s lease" in why
        # A renewal that gets through lets it write again (nobody could have taken over yet).
        assert holder.renew_once() is True
        assert holder.check_held() is None
    finally:
        holder.release()


def test_a_renewal_thread_that_dies_on_any_error_loses_the_lease(s3):
    """A store answering without an ETag (KeyError in the renewal) must not end the renewals
    silently while the run writes on."""

    class NoETag(FakeS3):
        def put_object(self, **kwargs: Any) -> dict[str, Any]:
            if kwargs.get("IfMatch"):
                raise KeyError("ETag")
            return super().put_object(**kwargs)

    s3 = NoETag()
    clock = [0.0]
    holder = LeaseLock(LOCATION, client=s3, lease=60, clock=lambda: clock[0])
    holder.take()
    holder._stop.set()
    holder._renewer.join()
    clock[0] = 10.0
    assert holder.renew_once() is True  # a failed renewal within the lease: tried again
    clock[0] = 61.0
    assert holder.renew_once() is False and "KeyError" in (holder.lost or "")

    # And the thread itself: an error that escapes renew_once ends it, and the lease counts lost.
    other = LeaseLock(LOCATION + "2", client=FakeS3(), lease=4)
    other.take()

    def boom() -> bool:
        raise RuntimeError("unforeseen")

    other.renew_once = boom  # type: ignore[method-assign]
    other._renewer.join(timeout=5)
    assert not other._renewer.is_alive()
    assert other.lost is not None and "renewal stopped unexpectedly" in other.lost
    assert other.check_held() == other.lost
    other.release()


def test_a_holder_whose_renewals_stopped_may_not_write(s3):
    holder = lock(s3)
    holder.take()
    holder._stop.set()
    holder._renewer.join()
    why = holder.check_held()
    assert why is not None and "is not being renewed" in why
    holder.release()


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"not json",
        b"[1, 2]",
        b'{"owner": "x"}',
        b'{"owner": "x", "pid": 1, "host": "h", "since": "s", "lease": "soon"}',
    ],
)
def test_an_unreadable_holder_counts_as_held_for_the_longest_lease(s3, body):
    s3.objects[("lake", "raw/orders/_kafkalake/checkpoint.lock")] = ('"e1"', body, s3.now)
    with pytest.raises(CheckpointLockedError, match="in use by another run"):
        lock(s3).take()
    s3.now += timedelta(seconds=lease_lock.takeover_after(lease_lock.MAX_LEASE_SECONDS) - 1)
    with pytest.raises(CheckpointLockedError):
        lock(s3).take()
    s3.now += timedelta(seconds=2)
    taker = lock(s3)
    taker.take()
    assert s3.holder().owner == taker.owner
    taker.release()


def test_a_newer_versions_holder_is_read_and_its_lease_kept(s3):
    """A rolling upgrade: the holder's object carries a field this version does not know."""
    import json

    body = json.dumps(
        {"owner": "x", "pid": 7, "host": "other", "since": "s", "lease": 60, "released": False, "epoch": 3}
    ).encode()
    s3.objects[("lake", "raw/orders/_kafkalake/checkpoint.lock")] = ('"e1"', body, s3.now)
    assert Holder.parse(body) == Holder(owner="x", pid=7, host="other", since="s", lease=60)
    s3.now += timedelta(seconds=60)
    with pytest.raises(CheckpointLockedError, match="pid 7 on host other"):
        lock(s3).take()
    s3.now += timedelta(seconds=16)
    lock(s3).take()


def test_fence_checks_every_lease_this_process_holds(s3, monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(
        checkpoint_lock_module,
        "LeaseLock",
        lambda location: LeaseLock(location, client=s3, lease=60, clock=lambda: clock[0]),
    )
    checkpoint = LOCATION.removesuffix(".lock")
    with checkpoint_lock(checkpoint):
        checkpoint_lock_module.fence()
        clock[0] = 31.0
        with pytest.raises(CheckpointLockedError, match="past half its 60 s lease"):
            checkpoint_lock_module.fence()
    checkpoint_lock_module.fence()  # nothing held: nothing to check


def test_every_small_file_write_is_fenced(s3, monkeypatch, tmp_path):
    """The run's small files (backlog, schema versions, the registry's writer schemas, a checkpoint
    set aside) go through lake/small_files, which checks the lease before each write."""
    from kafkalake.lake import small_files

    clock = [0.0]
    monkeypatch.setattr(
        checkpoint_lock_module,
        "LeaseLock",
        lambda location: LeaseLock(location, client=s3, lease=60, clock=lambda: clock[0]),
    )
    with checkpoint_lock(LOCATION.removesuffix(".lock")):
        small_files.write_text(tmp_path / "a.json", "{}")
        clock[0] = 31.0
        for write in (
            lambda: small_files.write_text(tmp_path / "b.json", "{}"),
            lambda: small_files.create_text(tmp_path / "c.json", "{}"),
            lambda: small_files.delete(tmp_path / "a.json"),
            lambda: small_files.rename_folder(tmp_path / "x", tmp_path / "y"),
        ):
            with pytest.raises(CheckpointLockedError, match="past half its 60 s lease"):
                write()
    assert (tmp_path / "a.json").exists() and not (tmp_path / "b.json").exists()
