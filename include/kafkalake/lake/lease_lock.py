"""The run lock on an object store: a lock object taken with a conditional PUT and held by a lease.

A file lock cannot exist on S3, and Delta's S3 log store keeps commits from conflicting only inside
one Spark driver, so two drivers on one ``s3a://`` topic would overwrite each other's checkpoint
files and commits. S3 (since 2024) and the S3-compatible servers that followed it refuse a PUT whose
precondition fails, which is enough for a lock:

- **take**: ``PUT <checkpoint>.lock`` with ``If-None-Match: *``; only one writer can create it.
- **hold**: a thread renews the lease every :data:`RENEW_FRACTION` of it with ``If-Match: <etag>``
  of its own last write; the object then names the holder and the time of the renewal.
- **release**: a conditional overwrite that marks the lease released (the object stays, as the
  local lock file does). The next run takes it over with ``If-Match`` on that ETag.
- **a holder that died** (SIGKILL, a lost machine) cannot release: its lease expires and the next
  run takes the object over, again with ``If-Match``, so of two runs that find it expired only one
  wins. Age is judged on the server's clock (the ``Date`` of the answer against the object's
  ``Last-Modified``), so clock skew between machines does not matter.
- **a fence, not only a lock**: the holder writes only while its last renewal is younger than
  :data:`SAFE_FRACTION` of the lease (on its own clock), checked before every commit the run makes
  (:func:`kafkalake.lake.checkpoint_lock.fence`); a taker waits the holder's lease plus
  :data:`TAKEOVER_MARGIN` of it (on the server's clock). A holder frozen mid-run (a GC pause, a
  SIGSTOP, a VM migration) therefore stops at its next commit before any taker may start: half a
  lease and a quarter lie between, room for the one commit that was under way when it froze. A
  holder whose renewal found the object changed, or could not renew for half a lease, or whose
  renewal thread ended for any reason, counts the lease as lost and fails with ``checkpoint_locked``.
- **an unreadable lock object** (a newer version's fields are ignored, but a body that is no holder
  at all) counts as held until its age passes :data:`MAX_LEASE_SECONDS` plus the margin: its lease
  cannot be read, so the longest one allowed is assumed.

Credentials and endpoint are the process's :mod:`kafkalake.lake.store_settings` settings (the client is
:func:`kafkalake.lake.small_files.s3_client`). A server that
ignores the preconditions (s3proxy before 3.0, some old MinIO and Ceph releases) cannot hold the
lock: it is tested for at the first take and refused with a clear error rather than trusted.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlsplit

from kafkalake.core.errors import (
    AuthenticationFailedError,
    AuthorizationFailedError,
    BadConfigError,
    CheckpointLockedError,
    Kind,
    failure,
)
from kafkalake.lake import store_settings
from kafkalake.lake.small_files import S3Client, s3_client

# botocore is imported where a request can fail: only a run on an object store takes the lease, and a local
# lake's run never loads the AWS SDK.

log = logging.getLogger(__name__)

#: How long a lease lasts without renewal; a killed run's lock is taken over after it.
ENV_LEASE_SECONDS = "KAFKALAKE_LOCK_LEASE_SECONDS"
DEFAULT_LEASE_SECONDS = 120
#: The longest lease a run may set: how long an unreadable lock object counts as held.
MAX_LEASE_SECONDS = 3600
#: Renewed this often (a part of the lease): two renewals in a row can fail and the holder still
#: writes (it stops at SAFE_FRACTION).
RENEW_FRACTION = 1 / 6
#: The holder writes only while its last renewal is younger than this part of the lease.
SAFE_FRACTION = 1 / 2
#: A taker waits the holder's lease and this part of it again: the holder stopped writing half a
#: lease before the lease ran out, so a commit under way when it froze ends before a taker starts.
TAKEOVER_MARGIN = 1 / 4


def lease_seconds() -> int:
    raw = os.environ.get(ENV_LEASE_SECONDS)
    if not raw:
        return DEFAULT_LEASE_SECONDS
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if not 4 <= value <= MAX_LEASE_SECONDS:
        raise ValueError(
            f"{ENV_LEASE_SECONDS} must be a whole number of seconds from 4 to {MAX_LEASE_SECONDS}; "
            f"got {raw!r}"
        )
    return value


def takeover_after(lease: float) -> float:
    """Seconds after a holder's last renewal (server clock) that a taker may take its lock over."""
    return lease * (1 + TAKEOVER_MARGIN)


@dataclass(frozen=True)
class Holder:
    """What the lock object says: who holds it, and whether they let it go."""

    owner: str
    pid: int | None
    host: str
    since: str
    #: The holder's lease in seconds: a taker judges expiry by it, not by its own setting.
    lease: int
    released: bool = False

    def to_json(self) -> bytes:
        return json.dumps(self.__dict__).encode()

    @classmethod
    def parse(cls, body: bytes) -> Holder | None:
        """The holder the object names; None when the body is no holder at all.

        Fields this version does not know are passed over: a newer version's holder (a rolling
        upgrade) still names who holds the lock and for how long.
        """
        try:
            loaded = json.loads(body or b"{}")
        except ValueError:
            return None
        if not isinstance(loaded, dict):
            return None
        known = {name: loaded[name] for name in cls.__dataclass_fields__ if name in loaded}
        try:
            holder = cls(**known)
        except TypeError:  # a required field is missing
            return None
        if not isinstance(holder.lease, int) or isinstance(holder.lease, bool) or holder.lease <= 0:
            return None
        return holder

    def describe(self) -> str:
        return f"pid {self.pid} on host {self.host} since {self.since}"


def bucket_and_key(location: str) -> tuple[str, str]:
    """``s3a://bucket/a/b`` as ``("bucket", "a/b")``: the key as S3A and pyarrow name it."""
    parts = urlsplit(location)
    return parts.netloc, parts.path.strip("/")


def _status(err: Exception) -> int | None:
    response = getattr(err, "response", None) or {}
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return int(status) if status else None


# 412: the precondition failed. 409: S3's ConditionalRequestConflict, two conditional writes at once.
_LOST_RACE = (409, 412)


class LeaseLock:
    """One lock object; :meth:`take`, then :meth:`release` (renewed in between by a thread)."""

    def __init__(
        self,
        location: str,
        client: S3Client | None = None,
        lease: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.location = location
        self.bucket, self.key = bucket_and_key(location)
        self.client = client or s3_client()
        self.lease = lease or lease_seconds()
        self.owner = uuid.uuid4().hex
        self.etag: str | None = None
        #: Why the lease was lost while held (a renewal found the object changed), or None.
        self.lost: str | None = None
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self._clock = clock
        #: When this process last wrote the object (its own clock): past the lease, it cannot know
        #: whether another run took over, so it counts the lease as lost.
        self._written_at = clock()

    def _holder(self, *, released: bool = False) -> Holder:
        return Holder(
            owner=self.owner,
            pid=os.getpid(),
            host=socket.gethostname(),
            since=datetime.now(UTC).isoformat(timespec="seconds"),
            lease=self.lease,
            released=released,
        )

    def _put(self, **condition: str) -> str:
        answer = self.client.put_object(
            Bucket=self.bucket,
            Key=self.key,
            Body=self._holder().to_json(),
            ContentType="application/json",
            **condition,
        )
        return str(answer["ETag"])

    def take(self) -> None:
        """Take the lock or raise :class:`CheckpointLockedError` naming its holder."""
        from botocore.exceptions import ClientError

        try:
            self.etag = self._put(IfNoneMatch="*")
        except ClientError as err:
            if _status(err) not in _LOST_RACE:
                raise _store_error(self.location, err)  # noqa: B904 (the ClientError itself, or its kind)
            self.etag = self._take_over()
        else:
            self._check_server_refuses_overwrite()
        self._written_at = self._clock()
        log.info("took the run lock %s (lease %d s)", self.location, self.lease)
        self._renewer = threading.Thread(target=self._renew, name="kafkalake-lease", daemon=True)
        self._renewer.start()

    def _check_server_refuses_overwrite(self) -> None:
        """A server that ignores ``If-None-Match`` would hand every run the lock: refuse it."""
        from botocore.exceptions import ClientError

        try:
            self._put(IfNoneMatch="*")
        except ClientError as err:
            if _status(err) in _LOST_RACE:
                return
            raise _store_error(self.location, err)  # noqa: B904 (the ClientError itself, or its kind)
        raise BadConfigError(
            f"the object store at {store_settings.current().endpoint or 'AWS'} ignores conditional writes "
            f"(a second PUT of {self.location} with If-None-Match: * succeeded), so it cannot hold "
            "a run lock: use a server that supports them (AWS S3, MinIO, s3proxy 3.0 or later)"
        )

    def _take_over(self) -> str:
        """The object exists: take it over if it was released or its lease ran out."""
        from botocore.exceptions import ClientError

        try:
            found = self.client.get_object(Bucket=self.bucket, Key=self.key)
        except ClientError as err:
            if _status(err) == 404:  # released and deleted by hand meanwhile: try once more
                return self._put(IfNoneMatch="*")
            raise _store_error(self.location, err)  # noqa: B904 (the ClientError itself, or its kind)
        holder = Holder.parse(found["Body"].read())
        age = _age_seconds(found)
        if holder is None or not holder.released:
            # An unreadable holder's lease is unknown: the longest one allowed is assumed.
            lease = holder.lease if holder is not None else MAX_LEASE_SECONDS
            wait = takeover_after(lease)
            if age is None or age < wait:
                raise _locked(self.location, holder, wait - (age or 0))
            log.warning(
                "run lock %s: the lease of %s ran out %d s ago (a killed run?); taking it over",
                self.location,
                holder.describe() if holder is not None else "an unreadable holder",
                int(age - lease),
            )
        try:
            return self._put(IfMatch=found["ETag"])
        except ClientError as err:
            if _status(err) in _LOST_RACE:  # another run took it over first
                raise _locked(self.location, None, self.lease) from None
            raise _store_error(self.location, err)  # noqa: B904 (the ClientError itself, or its kind)

    def _renew(self) -> None:
        try:
            while not self._stop.wait(self.lease * RENEW_FRACTION):
                if not self.renew_once():
                    return
        finally:
            # However the thread ends before release (an error nobody foresaw included), the
            # lease is no longer renewed: the run must not write on as if it were.
            if not self._stop.is_set() and self.lost is None:
                self._lose(f"the run lock {self.location}'s renewal stopped unexpectedly")

    def renew_once(self) -> bool:
        """Renew the lease; False once it is lost (the object changed under it)."""
        from botocore.exceptions import ClientError

        try:
            if self.etag is None:
                raise RuntimeError("no lease taken")
            self.etag = self._put(IfMatch=self.etag)
        except ClientError as err:
            if _status(err) in _LOST_RACE:
                return self._lose(
                    f"the run lock {self.location} was taken over by another run while this one held "
                    f"it (this run stalled for longer than its {self.lease} s lease)"
                )
            failed: Exception = err
        except Exception as err:  # the store unreachable for a moment, an answer without an ETag, ...
            failed = err
        else:
            self._written_at = self._clock()
            return True
        unrenewed = self._clock() - self._written_at
        if unrenewed >= self.lease:
            return self._lose(
                f"the run lock {self.location} could not be renewed for {int(unrenewed)} s, past its "
                f"{self.lease} s lease (last error: {type(failed).__name__}: {failed}): another run "
                "may hold it now"
            )
        log.warning("run lock %s: renewal failed, trying again: %s", self.location, failed)
        return True

    def check_held(self) -> str | None:
        """Why this process may not write now (the lease lost, or its renewal too old); None: it may.

        Judged on this process's clock, which kept running while the process was frozen: a holder
        that wakes after half its lease stops here even before its renewal thread ran again.
        """
        if self.lost is not None:
            return self.lost
        if self._renewer is None or not self._renewer.is_alive():
            self._lose(f"the run lock {self.location} is not being renewed")
            return self.lost
        unrenewed = self._clock() - self._written_at
        if unrenewed >= self.lease * SAFE_FRACTION:
            return (
                f"the run lock {self.location} was last renewed {int(unrenewed)} s ago, past half its "
                f"{self.lease} s lease (this run stalled, or the store refused its renewals): another "
                "run may take it over, so this one writes nothing more"
            )
        return None

    def _lose(self, why: str) -> bool:
        self.lost = why
        log.error("%s; the run stops before its next write", why)
        return False

    def release(self) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        self._stop.set()
        if self._renewer is not None:
            self._renewer.join()
        if self.lost is not None or self.etag is None:
            return
        try:
            self.client.put_object(
                Bucket=self.bucket,
                Key=self.key,
                Body=self._holder(released=True).to_json(),
                IfMatch=self.etag,
            )
        except (BotoCoreError, ClientError) as err:
            # Not fatal: the lease runs out and the next run takes the lock over then.
            log.warning(
                "run lock %s: could not release it (%s); it frees itself in %d s",
                self.location,
                err,
                self.lease,
            )
        else:
            log.info("released the run lock %s", self.location)


def _age_seconds(found: dict[str, Any]) -> float | None:
    """Seconds since the object was last written, on the server's clock."""
    modified = found.get("LastModified")
    date = found.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
    if modified is None or not date:
        return None
    return float((parsedate_to_datetime(date) - modified).total_seconds())


def _locked(location: str, holder: Holder | None, left: float) -> CheckpointLockedError:
    who = holder.describe() if holder is not None else "another run that took it over just now"
    detail = (
        f"checkpoint {location.removesuffix('.lock')} is in use by another run: {who} "
        f"(lock object {location}; it can be taken over in {max(0, int(left))} s unless renewed)"
    )
    return CheckpointLockedError(failure(Kind.CHECKPOINT_LOCKED, detail).message)


#: S3's error codes for a key or signature the store does not know.
_UNKNOWN_CREDENTIALS = frozenset(
    {"InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken"}
)


def _store_error(location: str, err: Exception) -> Exception:
    """A refused request as the failure kind on-call acts on; anything else as it came (retried)."""
    code = str((getattr(err, "response", None) or {}).get("Error", {}).get("Code", ""))
    if code in _UNKNOWN_CREDENTIALS:
        return AuthenticationFailedError(
            failure(
                Kind.AUTHENTICATION_FAILED,
                f"the object store refused the credentials writing the run lock {location}: {code}",
            ).message
        )
    if _status(err) == 403:
        return AuthorizationFailedError(
            failure(
                Kind.AUTHORIZATION_FAILED,
                f"the object store refused writing the run lock {location}: {code or 403}",
            ).message
        )
    return err
