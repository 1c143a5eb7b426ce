"""A topic's schema registry: how to reach it, and the schemas the topic's records name.

The registry is one with Confluent's Schema Registry API (Confluent's own, Apicurio's
``/apis/ccompat/v7``, Karapace, ...), reached through the Airflow connection a topic's
``registry_conn_id`` names: its host is the registry's URL, its login and password are basic auth,
and its extra takes the Kafka connection's TLS keys (``ssl_ca_pem`` for a private CA, and
``ssl_certificate_pem`` + ``ssl_key_pem`` for mutual TLS, each also as ``..._location``; see
:data:`TLS_EXTRA`). Like the Kafka and object-store settings, the task hands them to its Spark job
in a private file the job deletes on read (:func:`use_file_from_environment`), never on a command
line, and each process uses one set of settings (:func:`use`). The client key reaches a file only
for the instant Python's ``ssl`` needs one to load it (:func:`ssl_context`).

The wire format (Confluent's): byte 0 is the magic byte 0, bytes 1-4 the writer schema's id
(big-endian), the payload follows. :class:`WriterSchemas` fetches each id's schema once and keeps
it beside the topic's schema history (``<table>/_kafkalake/schemas/registry/<id>.json``), so a
record is decoded with the schema it was written with even after the registry forgot it, and a
replay or catch-up needs no registry for the ids it met.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import socket
import ssl
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from kafkalake.core.errors import (
    AuthenticationFailedError,
    AuthorizationFailedError,
    BadConfigError,
    KafkalakeError,
    RegistryUnreachableError,
    TlsUntrustedError,
    UnusableSchemaError,
)
from kafkalake.lake import small_files

log = logging.getLogger(__name__)

#: The settings file a Spark job reads (and deletes) at start, written by its Airflow task.
ENV_REGISTRY_CONFIG_FILE = "KAFKALAKE_REGISTRY_CONFIG_FILE"
#: Seconds one request may take: a registry that hangs parks the parsed side instead of the run.
TIMEOUT = 15.0


@dataclass(frozen=True)
class RegistrySettings:
    """Where the registry is (``url``, the API's root), the basic-auth login and the TLS settings."""

    url: str = ""
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    #: The Airflow connection they come from, for messages.
    conn_id: str | None = None
    #: The CA that signed the registry's certificate (PEM); None: the system's CAs.
    ssl_ca_pem: str | None = None
    #: Mutual TLS: the client's certificate chain and private key (PEM), and the key's password.
    ssl_certificate_pem: str | None = None
    ssl_key_pem: str | None = field(default=None, repr=False)
    ssl_key_password: str | None = field(default=None, repr=False)
    #: Whether the registry's certificate must name the URL's host (verification itself always holds).
    ssl_check_hostname: bool = True

    def secrets(self) -> list[str]:
        return [s for s in (self.password, self.ssl_key_pem, self.ssl_key_password) if s]

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str, where: str) -> RegistrySettings:
        try:
            loaded = json.loads(text)
            return cls(**{f.name: loaded[f.name] for f in fields(cls) if f.name in loaded})
        except (ValueError, TypeError, AttributeError) as err:
            raise BadConfigError(f"{where}: not the schema registry's settings ({err})") from None


#: The connection's extra: the Kafka connection's TLS keys (kafkalake.kafka.client_config), each
#: PEM given as text or as a file on the Airflow worker (read there: the job gets the text).
TLS_EXTRA = (
    "ssl_ca_pem",
    "ssl_ca_location",
    "ssl_certificate_pem",
    "ssl_certificate_location",
    "ssl_key_pem",
    "ssl_key_location",
    "ssl_key_password",
    "ssl_check_hostname",
)


def from_connection(
    conn_id: str,
    host: str | None,
    port: int | None,
    login: str | None,
    password: str | None,
    extra: Mapping[str, Any] | None = None,
) -> RegistrySettings:
    """The settings of an Airflow connection: host = the registry's URL (``http://registry:8081``,
    Apicurio's ``http://apicurio:8080/apis/ccompat/v7``), with ``port`` if the URL has none;
    login/password = basic auth; extra = the TLS keys of :data:`TLS_EXTRA`.

    Raises:
        BadConfigError: naming the connection and the field that cannot be used (a TLS key with
            an ``http://`` URL, a certificate without its key, a PEM Python's ``ssl`` cannot load).
    """
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
    settings = RegistrySettings(
        url=url,
        username=login or None,
        password=password or None,
        conn_id=conn_id,
        **_tls_settings(conn_id, dict(extra or {})),
    )
    tls = [k for k in TLS_EXTRA if (extra or {}).get(k) not in (None, "")]
    if tls and parts.scheme != "https":
        raise BadConfigError(
            f"connection {conn_id!r}: extra {tls[0]!r} is a TLS setting but the URL {url!r} is plain "
            "http: make the host https://..."
        )
    ssl_context(settings)  # a PEM that cannot be loaded fails the task, not the job's first batch
    return settings


def _tls_settings(conn_id: str, extra: dict[str, Any]) -> dict[str, Any]:
    where = f"connection {conn_id!r}"
    unknown = sorted(k for k in extra if k not in TLS_EXTRA)
    if unknown:
        raise BadConfigError(
            f"{where}: extra {unknown[0]!r} is not a schema registry setting: use one of {list(TLS_EXTRA)}"
        )
    found: dict[str, Any] = {}
    for name in ("ssl_ca", "ssl_certificate", "ssl_key"):
        text, location = extra.get(f"{name}_pem"), extra.get(f"{name}_location")
        if text and location:
            raise BadConfigError(f"{where}: give {name}_pem or {name}_location, not both")
        if location:
            try:
                text = Path(str(location)).read_text()
            except OSError as err:
                raise BadConfigError(
                    f"{where}: extra '{name}_location': cannot read {location}: {err.strerror}"
                ) from None
        if text:
            found[f"{name}_pem"] = str(text)
    if bool(found.get("ssl_certificate_pem")) != bool(found.get("ssl_key_pem")):
        missing = (
            "ssl_key_pem (or ssl_key_location)"
            if "ssl_certificate_pem" in found
            else ("ssl_certificate_pem (or ssl_certificate_location)")
        )
        raise BadConfigError(
            f"{where}: a client certificate needs its key and the key its certificate: set {missing}"
        )
    if extra.get("ssl_key_password"):
        found["ssl_key_password"] = str(extra["ssl_key_password"])
    check = extra.get("ssl_check_hostname", True)
    if str(check).strip().lower() not in ("true", "false", "1", "0", "yes", "no"):
        raise BadConfigError(f"{where}: extra 'ssl_check_hostname' must be true or false, not {check!r}")
    found["ssl_check_hostname"] = str(check).strip().lower() in ("true", "1", "yes")
    return found


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)


def _no_password() -> bytes:
    # Without a callable, OpenSSL would prompt on the terminal for an encrypted key's password.
    return b""


def ssl_context(settings: RegistrySettings) -> ssl.SSLContext | None:
    """The TLS context of an ``https://`` registry (None for ``http://``): the connection's CA (else
    the system's), hostname checking unless turned off, the client certificate for mutual TLS.

    The CA is loaded from memory; Python's ``ssl`` loads a certificate and key only from files, so
    they are written (0600, in a 0700 folder of their own) and deleted as soon as they are loaded.

    Raises:
        BadConfigError: a PEM that does not load, naming the extra key it came from.
    """
    if urllib.parse.urlsplit(settings.url).scheme != "https":
        return None
    where = f"connection {settings.conn_id!r}" if settings.conn_id else "the schema registry's settings"
    try:
        context = ssl.create_default_context(cadata=settings.ssl_ca_pem or None)
    except (ssl.SSLError, ValueError) as err:
        raise BadConfigError(f"{where}: ssl_ca_pem holds no usable PEM certificate ({err})") from None
    context.check_hostname = settings.ssl_check_hostname
    if settings.ssl_certificate_pem and settings.ssl_key_pem:
        with tempfile.TemporaryDirectory(prefix="kafkalake-registry-tls-") as folder:
            certificate, key = Path(folder) / "client.crt", Path(folder) / "client.key"
            _write_private(certificate, settings.ssl_certificate_pem)
            _write_private(key, settings.ssl_key_pem)
            try:
                context.load_cert_chain(certificate, key, password=settings.ssl_key_password or _no_password)
            except ssl.SSLError as err:
                hint = (
                    ": the key is encrypted, set ssl_key_password"
                    if "ENCRYPTED" in settings.ssl_key_pem and not settings.ssl_key_password
                    else ""
                )
                raise BadConfigError(
                    f"{where}: ssl_certificate_pem / ssl_key_pem do not load as a certificate and its "
                    f"private key ({err.reason or err}){hint}"
                ) from None
    return context


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
class SchemaReference:
    """A schema's reference to another (Protobuf: a file it imports): the name it is imported by,
    and the subject version that holds it."""

    name: str
    subject: str
    version: int


@dataclass(frozen=True)
class RegisteredSchema:
    id: int
    #: The schema's text (Avro: its JSON; Protobuf: .proto text or a base64 FileDescriptorProto).
    schema: str
    schema_type: str = "AVRO"
    subject: str | None = None
    version: int | None = None
    references: tuple[SchemaReference, ...] = ()
    #: Protobuf: the schema with its references resolved, a base64 FileDescriptorSet
    #: (kafkalake.kafka.protobuf_schema.resolve); kept with it, so a replay needs no registry.
    descriptors: str | None = None
    #: Protobuf: why it could not be resolved (a reference missing, text that does not compile).
    problem: str | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RegisteredSchema:
        """From the registry's answer (``schema``, ``schemaType``, ``references``, ...) or a kept file."""
        refs = tuple(
            SchemaReference(str(r["name"]), str(r["subject"]), int(r["version"]))
            for r in data.get("references") or ()
        )
        version = data.get("version")
        return cls(
            int(data["id"]),
            str(data["schema"]),
            str(data.get("schema_type") or data.get("schemaType") or "AVRO"),
            data.get("subject"),
            None if version is None else int(version),
            refs,
            data.get("descriptors"),
        )

    def kept(self) -> str:
        """Its kept file's text (no ``problem``: resolving is tried again on a later run)."""
        return json.dumps({**asdict(self), "problem": None}, indent=2) + "\n"


#: OpenSSL's verify codes for a certificate no trusted CA signed (unable to get the issuer, self-signed
#: or in a self-signed chain, unable to verify the first certificate).
_UNTRUSTED_CODES = {2, 18, 19, 20, 21}
#: ... and for one that names another host or address.
_NAME_MISMATCH_CODES = {62, 64}
#: The alerts a server sends when it does not accept the client's certificate (or its absence).
_CLIENT_CERTIFICATE_REFUSED = {
    "TLSV1_ALERT_UNKNOWN_CA",
    "SSLV3_ALERT_BAD_CERTIFICATE",
    "SSLV3_ALERT_CERTIFICATE_UNKNOWN",
    "SSLV3_ALERT_CERTIFICATE_EXPIRED",
    "SSLV3_ALERT_CERTIFICATE_REVOKED",
    "TLSV13_ALERT_CERTIFICATE_REQUIRED",
    "TLSV1_ALERT_ACCESS_DENIED",
}


class RegistryClient:
    """The few calls of Confluent's API the parsed side needs, over HTTP or HTTPS (mutual TLS too)."""

    def __init__(self, settings: RegistrySettings, timeout: float = TIMEOUT) -> None:
        if not settings.url:
            raise BadConfigError(
                "no schema registry settings: a topic in a registry format needs its registry_conn_id "
                "connection handed to the job"
            )
        self.settings = settings
        self.timeout = timeout
        self._context = ssl_context(settings)

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
            with urllib.request.urlopen(request, timeout=self.timeout, context=self._context) as answer:
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
            cause = err.reason if isinstance(err, urllib.error.URLError) else err
            if self._context is not None and isinstance(cause, ssl.SSLEOFError | ConnectionResetError):
                cause = self._handshake_verdict() or cause
            if isinstance(cause, ssl.SSLError):
                raise self._tls_failure(cause) from None
            raise RegistryUnreachableError(f"{self._whose} did not answer GET {path}: {cause}") from None

    def _handshake_verdict(self) -> ssl.SSLError | None:
        """The server's TLS alert, if it sends one, on a connection that sends nothing.

        In TLS 1.3 the server judges the client's certificate after the client's handshake is done:
        its alert arrives while the request is being sent, and the server's hang-up can turn it
        into a bare EOF (a reset discards it). A connection that only reads gets the alert itself."""
        parts = urllib.parse.urlsplit(self.settings.url)
        host = parts.hostname or ""
        assert self._context is not None
        try:
            with socket.create_connection((host, parts.port or 443), timeout=self.timeout) as raw:
                with self._context.wrap_socket(raw, server_hostname=host) as tls:
                    tls.settimeout(min(2.0, self.timeout))
                    tls.recv(1)
        except ssl.SSLError as err:
            return err
        except OSError:
            return None  # no alert within the wait (a healthy server waits for the request)
        return None

    def _tls_failure(self, err: ssl.SSLError) -> KafkalakeError:
        """What a failed TLS handshake means, named for whoever fixes the connection."""
        ca = "the connection's ssl_ca_pem" if self.settings.ssl_ca_pem else "a CA this machine trusts"
        if isinstance(err, ssl.SSLCertVerificationError):
            code = err.verify_code
            if code in _UNTRUSTED_CODES:
                why = (
                    f"the registry's certificate is not signed by {ca}: set the connection's extra "
                    "ssl_ca_pem to the CA that signed it"
                )
            elif code in _NAME_MISMATCH_CODES:
                host = urllib.parse.urlsplit(self.settings.url).hostname
                why = (
                    f"the registry's certificate does not name {host!r}: use a host it names in the "
                    "URL (or, if it must be so, extra ssl_check_hostname: false)"
                )
            else:
                why = f"{err.verify_message} (verify code {code})"
            return TlsUntrustedError(f"{self._whose}: certificate verify failed: {why}")
        reason = err.reason or ""
        given = "its client certificate" if self.settings.ssl_certificate_pem else "no client certificate"
        if reason in _CLIENT_CERTIFICATE_REFUSED:
            return AuthenticationFailedError(
                f"{self._whose} refused the TLS handshake ({reason}): the connection gave {given}; "
                "it needs ssl_certificate_pem and ssl_key_pem of a certificate the registry trusts"
            )
        if isinstance(err, ssl.SSLEOFError):
            # A server that refuses a client certificate may hang up without an alert (or before the
            # client reads it); so may one that is going down: retried, with the likelier cause named.
            return RegistryUnreachableError(
                f"{self._whose} closed the TLS connection without an answer ({err}): if it requires "
                f"mutual TLS, it did not accept {given} (extra ssl_certificate_pem / ssl_key_pem)"
            )
        return TlsUntrustedError(f"{self._whose}: the TLS handshake failed ({reason or err})")

    def schema(self, schema_id: int, protobuf: bool = False) -> RegisteredSchema | None:
        """The schema registered under ``schema_id``; None when the registry has no such id.

        ``protobuf``: asked as confluent-kafka's ProtobufDeserializer asks, ``?format=serialized``
        (Confluent's registry then answers a base64 FileDescriptorProto instead of ``.proto`` text;
        one that does not know the parameter answers what it keeps).
        """
        body = self._get(f"/schemas/ids/{schema_id}" + (_SERIALIZED if protobuf else ""))
        if body is None:
            return None
        return RegisteredSchema.from_dict({**body, "id": schema_id})

    def version(self, subject: str, version: int | str, protobuf: bool = False) -> RegisteredSchema | None:
        """A version (``latest`` or a number) of ``subject``; None when the registry has none.

        ``protobuf``: ``format=serialized``, as for :meth:`schema`; and a deleted version too, as
        confluent-kafka's deserializer reads a reference (a schema that imports it still needs it).
        """
        quoted = urllib.parse.quote(subject, safe="")
        query = (_SERIALIZED + ("&deleted=true" if version != "latest" else "")) if protobuf else ""
        body = self._get(f"/subjects/{quoted}/versions/{version}{query}")
        if body is None:
            return None
        return RegisteredSchema.from_dict({**body, "subject": subject})

    def latest(self, subject: str, protobuf: bool = False) -> RegisteredSchema | None:
        """The subject's latest version; None when the registry has no such subject."""
        return self.version(subject, "latest", protobuf)


_SERIALIZED = "?format=serialized"
#: How deep references of references may go before a schema is refused as a cycle.
MAX_REFERENCE_DEPTH = 32


class WriterSchemas:
    """Writer schemas by id: this run's, then those kept beside the schema history, then the
    registry's (asked once per id a run; what it returns is kept).

    A Protobuf schema is resolved (:func:`kafkalake.kafka.protobuf_schema.resolve`): ``.proto``
    text compiled, each reference (a subject version) fetched once a run and kept too, under
    ``references/``, the result (``descriptors``) kept with the schema.
    """

    def __init__(self, directory: str, settings: RegistrySettings | None = None) -> None:
        self.directory = directory
        self._settings = settings
        self._known: dict[int, RegisteredSchema] = {}
        self._references: dict[tuple[str, int], RegisteredSchema] = {}
        self._client: RegistryClient | None = None

    @property
    def client(self) -> RegistryClient:
        if self._client is None:
            self._client = RegistryClient(self._settings or current())
        return self._client

    def _file(self, schema_id: int) -> str:
        return small_files.join(self.directory, f"{schema_id}.json")

    def get(
        self, schema_id: int, protobuf: bool = False, subject: str | None = None
    ) -> RegisteredSchema | None:
        """The writer schema of ``schema_id``; None when the registry has no such id.

        ``protobuf``: the topic's records are Protobuf (the form to ask for); ``subject``: the
        subject the records are read for, named in a problem's message.

        Raises:
            RegistryUnreachableError: the id (or a reference) is not kept here and the registry did
                not answer.
        """
        if schema_id in self._known:
            return self._known[schema_id]
        kept = small_files.read_text(self._file(schema_id))
        if kept is not None:
            found: RegisteredSchema | None = RegisteredSchema.from_dict(json.loads(kept))
        else:
            found = self.client.schema(schema_id, protobuf)
            if found is None:
                return None  # asked again next run: it may be registered by then
            small_files.write_text(self._file(schema_id), found.kept())
        assert found is not None
        if found.schema_type.upper() == "PROTOBUF" and found.descriptors is None:
            found = self.resolved(found, subject)
            if found.descriptors is not None:
                small_files.write_text(self._file(schema_id), found.kept())
        elif found.schema_type.upper() == "AVRO" and found.references:
            inlined = self.self_contained(found)
            if inlined.schema != found.schema:
                small_files.write_text(self._file(schema_id), inlined.kept())
            found = inlined
        self._known[schema_id] = found
        return found

    def self_contained(self, schema: RegisteredSchema, depth: int = 0) -> RegisteredSchema:
        """An Avro ``schema`` with every named type its references define inlined at its first use
        (:func:`kafkalake.kafka.avro_references.inline`), references of references too: one schema
        ``from_avro`` can parse. What is kept is this form, so a replay needs no registry.

        Raises:
            UnusableSchemaError: a reference the registry does not have, one that is not a named
                Avro type, or references nested deeper than 32 (a cycle).
            RegistryUnreachableError: a reference is not kept here and the registry did not answer.
        """
        from kafkalake.kafka import avro_references

        if not schema.references:
            return schema
        named = f"schema id {schema.id}" if schema.id >= 0 else f"subject {schema.subject!r}"
        if depth > MAX_REFERENCE_DEPTH:
            raise UnusableSchemaError(f"its references nest deeper than {MAX_REFERENCE_DEPTH} (a cycle?)")
        try:
            texts = {
                ref.name: self.self_contained(self.reference(ref, protobuf=False), depth + 1).schema
                for ref in schema.references
            }
            return replace(schema, schema=avro_references.inline(schema.schema, texts))
        except UnusableSchemaError as err:
            if depth:  # named once, by the schema the records name
                raise
            raise UnusableSchemaError(f"{named}: {err}") from None

    def resolved(self, schema: RegisteredSchema, subject: str | None = None) -> RegisteredSchema:
        """A Protobuf ``schema`` with its ``descriptors``, or with the ``problem`` that kept them
        from being built (naming the schema id and subject; logged).

        Raises:
            RegistryUnreachableError: a reference is not kept here and the registry did not answer.
        """
        from kafkalake.kafka import protobuf_schema

        try:
            return replace(schema, descriptors=protobuf_schema.resolve(schema, self.reference))
        except UnusableSchemaError as err:
            whose = schema.subject or subject
            named = f"schema id {schema.id}" + (f" (subject {whose!r})" if whose else "")
            problem = f"{named}: {err}"
            log.warning("the registry's Protobuf %s", problem)
            return replace(schema, problem=problem)

    def reference(self, ref: SchemaReference, protobuf: bool = True) -> RegisteredSchema:
        """The subject version a reference names: this run's, kept, or the registry's (then kept).
        ``protobuf``: asked in the serialized form (:meth:`RegistryClient.version`).

        Raises:
            UnusableSchemaError: the registry has no such version.
        """
        key = (ref.subject, ref.version)
        if key in self._references:
            return self._references[key]
        path = small_files.join(
            self.directory, "references", urllib.parse.quote(ref.subject, safe=""), f"{ref.version}.json"
        )
        kept = small_files.read_text(path)
        if kept is not None:
            found = RegisteredSchema.from_dict(json.loads(kept))
        else:
            answer = self.client.version(ref.subject, ref.version, protobuf=protobuf)
            if answer is None:
                raise UnusableSchemaError(
                    f"its reference {ref.name!r} (subject {ref.subject!r} version {ref.version}) is not "
                    "in the registry"
                )
            found = answer
            small_files.write_text(path, found.kept())
        self._references[key] = found
        return found
