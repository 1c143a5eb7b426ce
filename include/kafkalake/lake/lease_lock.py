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
- **a holder that stalled** past its lease (a frozen process) finds at its next renewal that the
  object changed: it marks the lease lost and :func:`assert_held` fails its next batch before it
  writes, with ``checkpoint_locked``. So does one that could not renew at all (the store
  unreachable for it) for a whole lease: it can no longer know that nobody took over.

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
#: Renewed this often (a part of the lease), so two renewals can fail before the lease runs out.
RENEW_FRACTION = 1 / 4


def lease_seconds() -> int:
    raw = os.environ.get(ENV_LEASE_SECONDS)
    if not raw:
        return DEFAULT_LEASE_SECONDS
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 4:
        raise ValueError(f"{ENV_LEASE_SECONDS} must be a whole number of seconds, at least 4; got {raw!r}")
    return value


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
        try:
            loaded = json.loads(body or b"{}")
            return cls(**loaded) if isinstance(loaded, dict) else None
        except (TypeError, ValueError):
            return None

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
        if holder is not None and not holder.released:
            if age is None or age < holder.lease:
                raise _locked(self.location, holder, holder.lease - (age or 0))
            log.warning(
                "run lock %s: the lease of %s ran out %d s ago (a killed run?); taking it over",
                self.location,
                holder.describe(),
                int(age - holder.lease),
            )
        try:
            return self._put(IfMatch=found["ETag"])
        except ClientError as err:
            if _status(err) in _LOST_RACE:  # another run took it over first
                raise _locked(self.location, None, self.lease) from None
            raise _store_error(self.location, err)  # noqa: B904 (the ClientError itself, or its kind)

    def _renew(self) -> None:
        while not self._stop.wait(self.lease * RENEW_FRACTION):
            if not self.renew_once():
                return

    def renew_once(self) -> bool:
        """Renew the lease; False once it is lost (the object changed under it)."""
        from botocore.exceptions import BotoCoreError, ClientError

        assert self.etag is not None
        try:
            self.etag = self._put(IfMatch=self.etag)
        except ClientError as err:
            if _status(err) in _LOST_RACE:
                return self._lose(
                    f"the run lock {self.location} was taken over by another run while this one held "
                    f"it (this run stalled for longer than its {self.lease} s lease)"
                )
            failed: Exception = err
        except BotoCoreError as err:  # the store unreachable for a moment
            failed = err
        else:
            self._written_at = self._clock()
            return True
        unrenewed = self._clock() - self._written_at
        if unrenewed >= self.lease:
            return self._lose(
                f"the run lock {self.location} could not be renewed for {int(unrenewed)} s, past its "
                f"{self.lease} s lease (last error: {failed}): another run may hold it now"
            )
        log.warning("run lock %s: renewal failed, trying again: %s", self.location, failed)
        return True

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
        f"(lock object {location}; its lease runs out in {max(0, int(left))} s unless renewed)"
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
