"""The schema registry over TLS (kafkalake.kafka.schema_registry): the connection's TLS extra, the
SSL context built from it, and what each failed handshake becomes, against a TLS server on loopback
(Python's own ssl, mutual TLS required) with certificates made for the test by the secured broker's
helper (kafkalake.dev.secured_broker.make_pki)."""

from __future__ import annotations

import json
import ssl
import stat
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from kafkalake.core.errors import AuthenticationFailedError, BadConfigError, TlsUntrustedError
from kafkalake.dev.secured_broker import PIPELINE_USER, Pki, make_pki
from kafkalake.dev.tls_proxy import TlsProxy
from kafkalake.kafka import schema_registry
from kafkalake.kafka.schema_registry import RegistryClient, RegistrySettings

SCHEMA = '{"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]}'


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"), [PIPELINE_USER])


def pem(path: Path) -> str:
    return path.read_text()


def client_pem(pki: Pki) -> dict[str, str]:
    cert, key = pki.client(PIPELINE_USER).pem()
    return {"ssl_certificate_pem": cert, "ssl_key_pem": key}


class Schemas(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        data = json.dumps({"schema": SCHEMA}).encode()
        self.send_response(200 if self.path.endswith("/schemas/ids/1") else 404)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


def tls_server(pki: Pki, host: str = "127.0.0.1") -> Iterator[str]:
    """An HTTPS registry on ``host`` that requires a client certificate signed by the dev CA; its own
    certificate names localhost and 127.0.0.1 only."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki.directory / "broker.crt", pki.directory / "broker.key")
    context.verify_mode = ssl.CERT_REQUIRED
    context.load_verify_locations(pki.ca)
    httpd = ThreadingHTTPServer((host, 0), Schemas)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"https://{host}:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def server(pki: Pki) -> Iterator[str]:
    yield from tls_server(pki)


@pytest.fixture
def nameless_server(pki: Pki) -> Iterator[str]:
    yield from tls_server(pki, host="127.0.0.2")  # loopback too, but not a name in the certificate


def settings(url: str, **tls: object) -> RegistrySettings:
    return schema_registry.from_connection("schemas", url, None, None, None, tls)


def test_the_connection_s_extra_takes_the_kafka_connection_s_tls_keys(pki: Pki, tmp_path: Path):
    got = settings("https://reg:8443", ssl_ca_pem=pem(pki.ca), **client_pem(pki), ssl_check_hostname="false")
    cert, key = pki.client(PIPELINE_USER).pem()
    assert (got.ssl_ca_pem, got.ssl_certificate_pem, got.ssl_key_pem) == (pem(pki.ca), cert, key)
    assert got.ssl_check_hostname is False
    assert key not in repr(got) and key in got.secrets()
    # ..._location: read on the worker, the job gets the text.
    located = settings(
        "https://reg:8443",
        ssl_ca_location=str(pki.ca),
        ssl_certificate_location=str(pki.client(PIPELINE_USER).certificate),
        ssl_key_location=str(pki.client(PIPELINE_USER).key),
    )
    assert (located.ssl_ca_pem, located.ssl_key_pem, located.ssl_check_hostname) == (pem(pki.ca), key, True)
    # The settings survive the hand-over file.
    assert RegistrySettings.from_json(got.to_json(), "f") == got
    assert RegistrySettings.from_json(RegistrySettings("http://r").to_json(), "f").ssl_check_hostname


@pytest.mark.parametrize(
    ("url", "extra", "says"),
    [
        ("https://r", {"ssl_cafile": "x"}, "extra 'ssl_cafile' is not a schema registry setting"),
        (
            "http://r",
            {"ssl_ca_pem": "x"},
            "extra 'ssl_ca_pem' is a TLS setting but the URL 'http://r' is plain",
        ),
        ("https://r", {"ssl_key_pem": "k"}, "a client certificate needs its key .* set ssl_certificate_pem"),
        (
            "https://r",
            {"ssl_ca_pem": "x", "ssl_ca_location": "y"},
            "give ssl_ca_pem or ssl_ca_location, not both",
        ),
        ("https://r", {"ssl_ca_location": "/nonexistent/ca.pem"}, "extra 'ssl_ca_location': cannot read"),
        ("https://r", {"ssl_check_hostname": "maybe"}, "'ssl_check_hostname' must be true or false"),
        ("https://r", {"ssl_ca_pem": "not a certificate"}, "ssl_ca_pem holds no usable PEM certificate"),
    ],
)
def test_unusable_tls_extra_fails_naming_the_field(url, extra, says):
    with pytest.raises(BadConfigError, match=says) as excinfo:
        settings(url, **extra)
    assert "connection 'schemas'" in str(excinfo.value)


def test_a_key_that_is_not_the_certificate_s_is_refused_without_a_trace(pki: Pki, tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    other_key = pem(pki.directory / "other-ca.key")
    with pytest.raises(BadConfigError, match="do not load as a certificate and its private key") as excinfo:
        settings("https://r", ssl_certificate_pem=pki.client(PIPELINE_USER).pem()[0], ssl_key_pem=other_key)
    assert other_key not in str(excinfo.value)
    assert list(tmp_path.iterdir()) == []


def test_the_client_key_is_on_disk_only_while_it_loads_and_only_for_its_owner(
    pki: Pki, tmp_path, monkeypatch
):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    seen: list[tuple[int, int, int]] = []
    load = ssl.SSLContext.load_cert_chain

    def watched(self: ssl.SSLContext, certfile: str, keyfile: str, password: object = None) -> None:
        modes = (
            Path(keyfile).parent.stat().st_mode,
            Path(certfile).stat().st_mode,
            Path(keyfile).stat().st_mode,
        )
        seen.append(tuple(stat.S_IMODE(m) for m in modes))  # type: ignore[arg-type]
        load(self, certfile, keyfile, password)

    monkeypatch.setattr(ssl.SSLContext, "load_cert_chain", watched)
    context = schema_registry.ssl_context(
        RegistrySettings("https://reg", ssl_ca_pem=pem(pki.ca), **client_pem(pki))  # type: ignore[arg-type]
    )
    assert context is not None and context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert seen == [(0o700, 0o600, 0o600)]
    assert list(tmp_path.iterdir()) == []
    assert schema_registry.ssl_context(RegistrySettings("http://reg")) is None


def test_mutual_tls_with_the_connection_s_ca_reads_schemas(pki: Pki, server: str):
    client = RegistryClient(settings(server, ssl_ca_pem=pem(pki.ca), **client_pem(pki)))
    assert client.schema(1) == schema_registry.RegisteredSchema(1, SCHEMA)
    assert client.schema(2) is None


def test_a_certificate_the_ca_did_not_sign_is_named_untrusted(pki: Pki, server: str):
    client = RegistryClient(settings(server, ssl_ca_pem=pem(pki.other_ca), **client_pem(pki)))
    with pytest.raises(
        TlsUntrustedError,
        match="certificate verify failed: the registry's certificate is not "
        "signed by the connection's ssl_ca_pem",
    ) as excinfo:
        client.schema(1)
    assert "connection 'schemas'" in str(excinfo.value)
    # Without ssl_ca_pem, the system's CAs do not know the dev CA either.
    with pytest.raises(TlsUntrustedError, match="not signed by a CA this machine trusts"):
        RegistryClient(settings(server, **client_pem(pki))).schema(1)


@pytest.mark.parametrize("given", ["none", "untrusted"])
def test_a_refused_client_certificate_is_an_authentication_failure(pki: Pki, server: str, given: str):
    extra: dict[str, str] = {"ssl_ca_pem": pem(pki.ca)}
    if given == "untrusted":  # the untrusted CA's own certificate, which the registry's CA never signed
        extra |= {
            "ssl_certificate_pem": pem(pki.other_ca),
            "ssl_key_pem": pem(pki.directory / "other-ca.key"),
        }
    with pytest.raises(AuthenticationFailedError, match="refused the TLS handshake") as excinfo:
        RegistryClient(settings(server, **extra)).schema(1)
    message = str(excinfo.value)
    assert (
        "gave its client certificate" if given == "untrusted" else "gave no client certificate"
    ) in message
    assert "BEGIN" not in message


def test_a_certificate_for_another_name_and_the_hostname_check(pki: Pki, nameless_server: str):
    extra = {"ssl_ca_pem": pem(pki.ca), **client_pem(pki)}
    with pytest.raises(TlsUntrustedError, match=r"does not name '127\.0\.0\.2'.*ssl_check_hostname: false"):
        RegistryClient(settings(nameless_server, **extra)).schema(1)
    unchecked = RegistryClient(settings(nameless_server, **extra, ssl_check_hostname=False))
    assert unchecked.schema(1) is not None


def test_the_dev_tls_front_requires_the_ca_s_client_certificates(pki: Pki):
    plain = ThreadingHTTPServer(("127.0.0.1", 0), Schemas)
    threading.Thread(target=plain.serve_forever, daemon=True).start()
    front = TlsProxy(
        pki.directory / "broker.crt", pki.directory / "broker.key", pki.ca, plain.server_address[1]
    )
    url = f"https://127.0.0.1:{front.start().port}"
    try:
        ca = {"ssl_ca_pem": pem(pki.ca)}
        assert RegistryClient(settings(url, **ca, **client_pem(pki))).schema(1) is not None
        with pytest.raises(AuthenticationFailedError, match="gave no client certificate"):
            RegistryClient(settings(url, **ca)).schema(1)
    finally:
        front.stop()
        plain.shutdown()
        plain.server_close()


def test_an_encrypted_client_key_needs_its_password(pki: Pki, tmp_path: Path):
    encrypted = tmp_path / "encrypted.key"
    client = pki.client(PIPELINE_USER)
    done = subprocess.run(
        ["openssl", "pkcs8", "-topk8", "-v2", "aes256", "-in", str(client.key), "-out", str(encrypted),
         "-passout", "pass:key-password-3f1"],
        capture_output=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    extra = {"ssl_certificate_pem": client.pem()[0], "ssl_key_pem": encrypted.read_text()}
    with pytest.raises(BadConfigError, match="the key is encrypted, set ssl_key_password"):
        settings("https://r", **extra)
    with pytest.raises(BadConfigError, match="do not load") as excinfo:
        settings("https://r", **extra, ssl_key_password="not-it-9c4e")
    assert "not-it-9c4e" not in str(excinfo.value)
    unlocked = settings("https://r", **extra, ssl_key_password="key-password-3f1")
    assert "key-password-3f1" in unlocked.secrets() and "key-password-3f1" not in repr(unlocked)
