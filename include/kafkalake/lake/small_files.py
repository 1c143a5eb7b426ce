"""The few file operations the lake's small files need (checkpoint, schema history, backlog), local or on S3.

Local locations keep plain file semantics (``pathlib``); ``s3a://`` ones go through pyarrow's S3
filesystem with the process's :mod:`kafkalake.lake.store_settings` settings. On S3 a written object
appears whole or not at all, so :func:`write_text` is atomic there as its temp-file-and-rename is
locally. :func:`create_text` refuses to overwrite on S3 too, with a conditional PUT (boto3: pyarrow
cannot send one).
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from kafkalake.lake import store_settings

if TYPE_CHECKING:
    from pyarrow.fs import S3FileSystem

# pyarrow.fs and boto3 are imported only for an object-store location: the DAG file and every local lake's
# job import this module, and neither needs them (pyarrow.fs and boto3 add ~350 ms).

Location = str | os.PathLike[str]
#: boto3's S3 client (boto3 ships no type hints).
S3Client = Any


def _remote(location: Location) -> tuple[S3FileSystem, str] | None:
    """pyarrow's filesystem and ``bucket/key`` for an object-store location; None for a local one."""
    text = os.fspath(location)
    if not store_settings.is_object_store(text):
        return None
    parts = urlsplit(text)
    return _filesystem(), f"{parts.netloc}{parts.path}".rstrip("/")


#: The settings the cached filesystem and client were made with: another object in use (a call of
#: :func:`kafkalake.lake.store_settings.use`, even with equal settings) makes them anew.
_made_for: store_settings.StorageSettings | None = None


def _settings() -> store_settings.StorageSettings:
    """The process's settings, with the cached filesystem and client dropped when they changed."""
    global _made_for
    settings = store_settings.current()
    if settings is not _made_for:
        forget_filesystems()
        _made_for = settings
    return settings


def _filesystem() -> S3FileSystem:
    _settings()
    return _cached_filesystem()


@cache
def _cached_filesystem() -> S3FileSystem:
    from pyarrow.fs import S3FileSystem

    # The AWS SDK's default since 2025 adds CRC checksums to every upload and checks them on every
    # download; S3-compatible servers that predate them (s3proxy, older MinIO and Ceph) refuse the
    # uploads and break the downloads. As before: only when an operation requires one. Read by the
    # SDK when the filesystem's client is made; the process's own setting wins.
    os.environ.setdefault("AWS_REQUEST_CHECKSUM_CALCULATION", "WHEN_REQUIRED")
    os.environ.setdefault("AWS_RESPONSE_CHECKSUM_VALIDATION", "WHEN_REQUIRED")
    settings = store_settings.current()
    endpoint = settings.endpoint
    options: dict[str, object] = {}
    if endpoint:
        parts = urlsplit(endpoint)
        options["endpoint_override"] = parts.netloc
        options["scheme"] = parts.scheme
    return S3FileSystem(
        access_key=settings.access_key,
        secret_key=settings.secret_key,
        session_token=settings.session_token,
        region=settings.region,
        **options,
    )


def s3_client() -> S3Client:
    """boto3's S3 client on this process's settings: for the conditional PUTs pyarrow cannot send."""
    _settings()
    return _cached_s3_client()


@cache
def _cached_s3_client() -> S3Client:
    import boto3
    from botocore.config import Config

    settings = store_settings.current()
    config = Config(
        connect_timeout=10,
        read_timeout=30,
        retries={"max_attempts": 3, "mode": "standard"},
        # S3-compatible servers: path-style, and no checksum on every request (as _filesystem).
        s3={"addressing_style": "path"} if settings.endpoint else {},
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
    )
    return boto3.client(
        "s3",
        endpoint_url=settings.endpoint,
        region_name=settings.region,
        aws_access_key_id=settings.access_key,
        aws_secret_access_key=settings.secret_key,
        aws_session_token=settings.session_token,
        config=config,
    )


def forget_filesystems() -> None:
    """Drop the cached filesystem and client: the settings changed."""
    _cached_filesystem.cache_clear()
    _cached_s3_client.cache_clear()


def local(location: Location) -> Path:
    text = os.fspath(location)
    if "://" in text:
        text = urlsplit(text).path
    return Path(text.removeprefix("file:"))


def join(location: Location, *names: str) -> str:
    return "/".join([os.fspath(location).rstrip("/"), *names])


def read_text(location: Location) -> str | None:
    """The file's text; None when it does not exist."""
    remote = _remote(location)
    if remote is None:
        path = local(location)
        return path.read_text() if path.is_file() else None
    fs, key = remote
    try:
        with fs.open_input_stream(key) as stream:
            data: bytes = stream.read()
    except FileNotFoundError:
        return None
    return data.decode()


def names(folder: Location) -> list[str]:
    """Names of the entries of a folder (files and folders); [] when it does not exist."""
    remote = _remote(folder)
    if remote is None:
        path = local(folder)
        return [p.name for p in path.iterdir()] if path.is_dir() else []
    from pyarrow.fs import FileSelector

    fs, key = remote
    infos = fs.get_file_info(FileSelector(key, allow_not_found=True))
    return [info.base_name for info in infos]


def exists(location: Location) -> bool:
    remote = _remote(location)
    if remote is None:
        return local(location).exists()
    from pyarrow.fs import FileType

    fs, key = remote
    return bool(fs.get_file_info(key).type != FileType.NotFound)


def _fence() -> None:
    """Every write here is one of a run's commits (a backlog, a schema version, a registry schema, a
    checkpoint set aside): fenced by the run lock's lease, as the table commits are."""
    # Imported here: checkpoint_lock imports lease_lock, which imports this module (its S3 client).
    from kafkalake.lake.checkpoint_lock import fence

    fence()


def write_text(location: Location, text: str) -> None:
    """Replace the file with ``text``, atomically: a reader sees the old content or the new."""
    _fence()
    remote = _remote(location)
    if remote is None:
        path = local(location)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.partial")
        with partial.open("w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        partial.replace(path)
        return
    fs, key = remote
    with fs.open_output_stream(key) as stream:
        stream.write(text.encode())


def create_text(location: Location, text: str) -> None:
    """Write a new file; FileExistsError when it exists, locally and on S3 alike.

    On S3 a PUT with ``If-None-Match: *``: of two writers racing for one name, exactly one wins.
    """
    _fence()
    remote = _remote(location)
    if remote is None:
        path = local(location)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        return
    from botocore.exceptions import ClientError

    _fs, key = remote
    bucket, _, name = key.partition("/")
    try:
        s3_client().put_object(Bucket=bucket, Key=name, Body=text.encode(), IfNoneMatch="*")
    except ClientError as err:
        status = (err.response or {}).get("ResponseMetadata", {}).get("HTTPStatusCode")
        if status in (409, 412):  # 409: another conditional PUT of the name in flight
            raise FileExistsError(os.fspath(location)) from None
        raise


def delete(location: Location) -> None:
    """Remove a file; nothing happens when it does not exist."""
    _fence()
    remote = _remote(location)
    if remote is None:
        local(location).unlink(missing_ok=True)
        return
    fs, key = remote
    try:
        fs.delete_file(key)
    except FileNotFoundError:
        return


def rename_folder(source: Location, target: Location) -> None:
    """Move a folder (a checkpoint set aside). On S3 a copy of every object, then a delete."""
    _fence()
    remote = _remote(source)
    if remote is None:
        local(source).rename(local(target))
        return
    from pyarrow.fs import FileSelector, FileType

    fs, key = remote
    target_remote = _remote(target)
    assert target_remote is not None
    for info in fs.get_file_info(FileSelector(key, recursive=True, allow_not_found=True)):
        if info.type == FileType.File:
            fs.copy_file(info.path, target_remote[1] + info.path[len(key) :])
    fs.delete_dir(key)
