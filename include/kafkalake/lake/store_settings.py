"""Where a table lives, and how this process reaches an object store (``s3a://``) without a JVM.

A topic's tables are local (a path or ``file://``) or on an S3 API store (``s3a://bucket/...``).
For the store, the endpoint and credentials come from an Airflow connection of type ``aws`` (the
topic's ``storage_conn_id``: login = access key, password = secret key, extra ``endpoint_url``,
``region_name``, ``aws_session_token``), or, without one, from the environment the processes run
in (``AWS_*`` variables, an instance or workload identity): the same for delta-rs, pyarrow and
Hadoop's S3A.

Each process uses one set of settings (:func:`use`): the Airflow tasks after their connection
lookup, a Spark job after reading the private file its task wrote (:func:`load_file`, deleted on
read, like the Kafka settings). Every reader in :mod:`kafkalake.lake` asks :func:`delta_options` and
:mod:`kafkalake.lake.small_files` for its location, so none of them takes credentials as arguments.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kafkalake.config.locations import is_object_store as is_object_store
from kafkalake.config.locations import scheme

if TYPE_CHECKING:
    from deltalake import DeltaTable

# deltalake is imported where a table is opened: the DAG file imports this module and parsing it never reads
# a table.

#: The settings file a Spark job reads (and deletes) at start, written by its Airflow task.
ENV_STORAGE_CONFIG_FILE = "KAFKALAKE_STORAGE_CONFIG_FILE"


@dataclass(frozen=True)
class StorageSettings:
    """How to reach the object store; every field None means "from the environment"."""

    endpoint: str | None = None
    region: str | None = None
    access_key: str | None = None
    secret_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)

    @property
    def _http(self) -> bool:
        return bool(self.endpoint) and str(self.endpoint).lower().startswith("http://")

    def delta_options(self) -> dict[str, str]:
        """delta-rs (object_store) storage options."""
        options = {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_REGION": self.region,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_SESSION_TOKEN": self.session_token,
            "AWS_ALLOW_HTTP": "true" if self._http else None,
            # A custom endpoint is an S3-compatible server: path-style addressing, as S3A's below.
            "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false" if self.endpoint else None,
        }
        return {k: v for k, v in options.items() if v}

    def hadoop_conf(self) -> dict[str, str]:
        """Hadoop S3A settings (set on the job's Hadoop configuration, never on the command line)."""
        conf = {
            "fs.s3a.endpoint": self.endpoint,
            "fs.s3a.endpoint.region": self.region,
            "fs.s3a.path.style.access": "true" if self.endpoint else None,
            "fs.s3a.connection.ssl.enabled": "false" if self._http else None,
            "fs.s3a.access.key": self.access_key,
            "fs.s3a.secret.key": self.secret_key,
            "fs.s3a.session.token": self.session_token,
        }
        if self.session_token:
            conf["fs.s3a.aws.credentials.provider"] = (
                "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
            )
        return {k: v for k, v in conf.items() if v}

    def secrets(self) -> list[str]:
        """The values a log must never show."""
        return [s for s in (self.secret_key, self.session_token) if s]

    def to_json(self) -> str:
        return json.dumps({k: v for k, v in asdict(self).items() if v})

    @classmethod
    def from_json(cls, text: str, source: str) -> StorageSettings:
        loaded = json.loads(text)
        if not isinstance(loaded, dict) or set(loaded) - set(cls.__dataclass_fields__):
            raise ValueError(f"{source}: not a storage settings file")
        return cls(**{k: str(v) for k, v in loaded.items()})


def from_connection(
    conn_id: str,
    login: str | None,
    password: str | None,
    extra: Mapping[str, Any] | None,
) -> StorageSettings:
    """Settings from an Airflow ``aws`` connection's fields (the Amazon provider's names).

    Raises:
        ValueError: only one of the key pair is given, or the endpoint is not an http(s) URL.
    """
    extra = dict(extra or {})
    access_key = login or extra.get("aws_access_key_id") or None
    secret_key = password or extra.get("aws_secret_access_key") or None
    if bool(access_key) != bool(secret_key):
        raise ValueError(
            f"connection {conn_id!r}: give both the access key (login) and the secret key (password), "
            "or neither (then the credentials come from the worker's environment)"
        )
    endpoint = extra.get("endpoint_url") or None
    if endpoint is not None and scheme(str(endpoint)) not in ("http", "https"):
        raise ValueError(
            f"connection {conn_id!r}: extra 'endpoint_url' must be an http(s) URL, got {endpoint!r}"
        )
    region = extra.get("region_name") or None
    token = extra.get("aws_session_token") or None
    return StorageSettings(
        endpoint=str(endpoint) if endpoint else None,
        region=str(region) if region else None,
        access_key=str(access_key) if access_key else None,
        secret_key=str(secret_key) if secret_key else None,
        session_token=str(token) if token else None,
    )


# ---------------------------------------------------------------------------------------------
# the settings this process uses

_current = StorageSettings()


def use(settings: StorageSettings) -> None:
    """Reach the object store with ``settings`` from now on, in this process.

    The filesystem and client :mod:`kafkalake.lake.small_files` made for the settings before are
    made anew on next use (it compares the settings it made them for with :func:`current`).
    """
    global _current
    _current = settings


def current() -> StorageSettings:
    return _current


def load_file(path: str | os.PathLike[str], *, remove: bool = True) -> StorageSettings:
    """Read the settings file a task wrote for its job, and (by default) delete it at once."""
    try:
        text = Path(path).read_text()
    finally:
        if remove:
            Path(path).unlink(missing_ok=True)
    return StorageSettings.from_json(text, str(path))


def use_file_from_environment() -> StorageSettings:
    """In a Spark job: use the settings its task handed over, if it handed any (read once)."""
    path = os.environ.pop(ENV_STORAGE_CONFIG_FILE, None)
    if path:
        use(load_file(path))
    return current()


def delta_options(location: str, settings: StorageSettings | None = None) -> dict[str, str] | None:
    """delta-rs storage options for ``location``: None for a local table. ``settings``: these
    instead of the process's (a web server reads many topics' stores at once, each with its own)."""
    if not is_object_store(location):
        return None
    return (settings or current()).delta_options()


def open_delta(location: str, settings: StorageSettings | None = None) -> DeltaTable | None:
    """The Delta table at ``location`` (delta-rs, no JVM); None when there is none."""
    from deltalake import DeltaTable

    options = delta_options(location, settings)
    if not DeltaTable.is_deltatable(location, storage_options=options):
        return None
    return DeltaTable(location, storage_options=options)
