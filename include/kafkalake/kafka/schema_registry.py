"""A topic's schema registry: how to reach it, and the schemas the topic's records name.

The registry is one with Confluent's Schema Registry API (Confluent's own, Apicurio's
``/apis/ccompat/v7``, Karapace, ...), reached through the Airflow connection a topic's
``registry_conn_id`` names: its host is the registry's URL, its login and password are basic auth.
Like the Kafka and object-store settings, the task hands them to its Spark job in a private file
the job deletes on read (:func:`use_file_from_environment`), never on a command line, and each
process uses one set of settings (:func:`use`).

The wire format (Confluent's): byte 0 is the magic byte 0, bytes 1-4 the writer schema's id
(big-endian), the payload follows. :class:`WriterSchemas` fetches each id's schema once and keeps
it beside the topic's schema history (``<table>/_kafkalake/schemas/registry/<id>.json``), so a
record is decoded with the schema it was written with even after the registry forgot it, and a
replay or catch-up needs no registry for the ids it met.
"""

from __future__ import annotations

import base64
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kafkalake.core.errors import (
    AuthenticationFailedError,
    AuthorizationFailedError,
    BadConfigError,
    RegistryUnreachableError,
)
from kafkalake.lake import small_files

#: The settings file a Spark job reads (and deletes) at start, written by its Airflow task.
ENV_REGISTRY_CONFIG_FILE = "KAFKALAKE_REGISTRY_CONFIG_FILE"
#: Seconds one request may take: a registry that hangs parks the parsed side instead of the run.
TIMEOUT = 15.0


@dataclass(frozen=True)
class RegistrySettings:
    """Where the registry is (``url``, the API's root) and the basic-auth login, if any."""

    url: str = ""
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    #: The Airflow connection they come from, for messages.
    conn_id: str | None = None

    def secrets(self) -> list[str]:
        return [self.password] if self.password else []

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str, where: str) -> RegistrySettings:
        try:
            loaded = json.loads(text)
            return cls(**{k: loaded.get(k) for k in ("url", "username", "password", "conn_id")})
        except (ValueError, TypeError, AttributeError) as err:
            raise BadConfigError(f"{where}: not the schema registry's settings ({err})") from None


def from_connection(
    conn_id: str, host: str | None, port: int | None, login: str | None, password: str | None
) -> RegistrySettings:
    """The settings of an Airflow connection: host = the registry's URL (``http://registry:8081``,
    Apicurio's ``http://apicurio:8080/apis/ccompat/v7``), with ``port`` if the URL has none;
    login/password = basic auth."""
    url = (host or "").strip().rstrip("/")
    if "://" not in url:
        raise BadConfigError(
            f"connection {conn_id!r}: its host must be the schema registry's URL "
            f"(http://host:port[/path] or https://...), not {host!r}"
        )
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadConfigError(f"connection {conn_id!r}: {url!r} is not an http(s) URL")
    if port and parts.port is None:
        url = urllib.parse.urlunsplit(parts._replace(netloc=f"{parts.netloc}:{port}"))
    return RegistrySettings(url=url, username=login or None, password=password or None, conn_id=conn_id)


_current = RegistrySettings()


def use(settings: RegistrySettings) -> None:
    """Reach the registry with ``settings`` from now on, in this process."""
    global _current
    _current = settings


def current() -> RegistrySettings:
    return _current


def load_file(path: str | os.PathLike[str], *, remove: bool = True) -> RegistrySettings:
    """Read the settings file a task wrote for its job, and (by default) delete it at once."""
    try:
        text = Path(path).read_text()
    finally:
        if remove:
            Path(path).unlink(missing_ok=True)
    return RegistrySettings.from_json(text, str(path))


def use_file_from_environment() -> RegistrySettings:
    """In a Spark job: use the settings its task handed over, if it handed any (read once)."""
    path = os.environ.pop(ENV_REGISTRY_CONFIG_FILE, None)
    if path:
        use(load_file(path))
    return current()


@dataclass(frozen=True)
class RegisteredSchema:
    id: int
    #: The schema's text (Avro: its JSON).
    schema: str
    schema_type: str = "AVRO"
    subject: str | None = None
    version: int | None = None


class RegistryClient:
    """The few calls of Confluent's API the parsed side needs, over plain HTTP(S)."""

    def __init__(self, settings: RegistrySettings, timeout: float = TIMEOUT) -> None:
        if not settings.url:
            raise BadConfigError(
                "no schema registry settings: a topic in a registry format needs its registry_conn_id "
                "connection handed to the job"
            )
        self.settings = settings
        self.timeout = timeout

    @property
    def _whose(self) -> str:
        conn = f" (connection {self.settings.conn_id!r})" if self.settings.conn_id else ""
        return f"the schema registry at {self.settings.url}{conn}"

    def _get(self, path: str) -> Any | None:
        """The JSON answer to ``GET <url><path>``; None for 404 (no such schema or subject)."""
        request = urllib.request.Request(
            self.settings.url + path, headers={"Accept": "application/vnd.schemaregistry.v1+json"}
        )
        if self.settings.username is not None:
            login = f"{self.settings.username}:{self.settings.password or ''}".encode()
            request.add_header("Authorization", "Basic " + base64.b64encode(login).decode())
        try:
            # The registry's URL comes from the operator's connection.
            with urllib.request.urlopen(request, timeout=self.timeout) as answer:
                return json.loads(answer.read())
        except urllib.error.HTTPError as err:
            if err.code == 404:
                return None
            if err.code == 401:
                raise AuthenticationFailedError(
                    f"{self._whose} refused the login (HTTP 401): fix the connection's login/password"
                ) from None
            if err.code == 403:
                raise AuthorizationFailedError(
                    f"{self._whose} denied {path.split('/')[1]} (HTTP 403): grant the connection's "
                    "user read access to the topic's subjects and schemas"
                ) from None
            raise RegistryUnreachableError(f"{self._whose} answered HTTP {err.code} to GET {path}") from None
        except (urllib.error.URLError, OSError, ValueError) as err:
            reason = getattr(err, "reason", err)
            raise RegistryUnreachableError(f"{self._whose} did not answer GET {path}: {reason}") from None

    def schema(self, schema_id: int) -> RegisteredSchema | None:
        """The schema registered under ``schema_id``; None when the registry has no such id."""
        body = self._get(f"/schemas/ids/{schema_id}")
        if body is None:
            return None
        return RegisteredSchema(schema_id, str(body["schema"]), str(body.get("schemaType") or "AVRO"))

    def latest(self, subject: str) -> RegisteredSchema | None:
        """The subject's latest version; None when the registry has no such subject."""
        quoted = urllib.parse.quote(subject, safe="")
        body = self._get(f"/subjects/{quoted}/versions/latest")
        if body is None:
            return None
        return RegisteredSchema(
            int(body["id"]),
            str(body["schema"]),
            str(body.get("schemaType") or "AVRO"),
            subject,
            int(body["version"]),
        )


class WriterSchemas:
    """Writer schemas by id: this run's, then those kept beside the schema history, then the
    registry's (asked once per id a run; what it returns is kept)."""

    def __init__(self, directory: str, settings: RegistrySettings | None = None) -> None:
        self.directory = directory
        self._settings = settings
        self._known: dict[int, RegisteredSchema] = {}
        self._client: RegistryClient | None = None

    @property
    def client(self) -> RegistryClient:
        if self._client is None:
            self._client = RegistryClient(self._settings or current())
        return self._client

    def _file(self, schema_id: int) -> str:
        return small_files.join(self.directory, f"{schema_id}.json")

    def get(self, schema_id: int) -> RegisteredSchema | None:
        """The writer schema of ``schema_id``; None when the registry has no such id.

        Raises:
            RegistryUnreachableError: the id is not kept here and the registry did not answer.
        """
        if schema_id in self._known:
            return self._known[schema_id]
        kept = small_files.read_text(self._file(schema_id))
        if kept is not None:
            found: RegisteredSchema | None = RegisteredSchema(**json.loads(kept))
        else:
            found = self.client.schema(schema_id)
            if found is None:
                return None  # asked again next run: it may be registered by then
            small_files.write_text(self._file(schema_id), json.dumps(asdict(found), indent=2) + "\n")
        assert found is not None
        self._known[schema_id] = found
        return found
