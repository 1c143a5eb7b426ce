"""The schema registry's settings and client (kafkalake.kafka.schema_registry), against a tiny HTTP
server on loopback that answers as a registry would: what each answer becomes."""

from __future__ import annotations

import base64
import json
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from kafkalake.core.errors import (
    AuthenticationFailedError,
    AuthorizationFailedError,
    BadConfigError,
    RegistryUnreachableError,
    UnusableSchemaError,
)
from kafkalake.dev.broker import free_port
from kafkalake.kafka import schema_registry
from kafkalake.kafka.schema_registry import RegistryClient, RegistrySettings, WriterSchemas

SECRET = "canary-registry-5d2a"
SCHEMA = '{"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]}'


class Registry(BaseHTTPRequestHandler):
    #: path -> (status, body); every request's path and Authorization header, in order.
    answers: ClassVar[dict[str, tuple[int, object]]] = {}
    seen: ClassVar[list[tuple[str, str | None]]] = []

    def do_GET(self) -> None:
        self.seen.append((self.path, self.headers.get("Authorization")))
        status, body = self.answers.get(self.path, (404, {"error_code": 40403, "message": "not found"}))
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    Registry.answers, Registry.seen = {}, []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Registry)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/apis/ccompat/v7"
    httpd.shutdown()
    httpd.server_close()


def test_a_connection_s_host_is_the_url_and_its_login_basic_auth():
    settings = schema_registry.from_connection(
        "schemas", "http://reg.example:8081/apis/ccompat/v7/", None, "u", SECRET
    )
    assert settings.url == "http://reg.example:8081/apis/ccompat/v7"
    assert (settings.username, settings.password, settings.conn_id) == ("u", SECRET, "schemas")
    assert SECRET not in repr(settings)
    assert schema_registry.from_connection("s", "https://reg", 8443, None, None).url == "https://reg:8443"
    with pytest.raises(
        BadConfigError, match="connection 'schemas': its host must be the schema registry's URL"
    ):
        schema_registry.from_connection("schemas", "reg.example", 8081, None, None)


def test_the_settings_file_is_read_once_and_deleted(tmp_path, monkeypatch):
    file = tmp_path / "registry.json"
    file.write_text(RegistrySettings("http://r:1", "u", SECRET, "schemas").to_json())
    monkeypatch.setenv(schema_registry.ENV_REGISTRY_CONFIG_FILE, str(file))
    try:
        assert schema_registry.use_file_from_environment().password == SECRET
        assert not file.exists()
        assert schema_registry.ENV_REGISTRY_CONFIG_FILE not in os.environ
    finally:
        schema_registry.use(RegistrySettings())


def test_schemas_by_id_and_a_subject_s_latest_version(server):
    Registry.answers = {
        "/apis/ccompat/v7/schemas/ids/3": (200, {"schema": SCHEMA}),
        "/apis/ccompat/v7/subjects/orders-value/versions/latest": (
            200,
            {"subject": "orders-value", "version": 2, "id": 3, "schema": SCHEMA},
        ),
    }
    client = RegistryClient(RegistrySettings(server, "u", SECRET))
    assert client.schema(3) == schema_registry.RegisteredSchema(3, SCHEMA)
    assert client.schema(4) is None
    latest = client.latest("orders-value")
    assert latest is not None and (latest.id, latest.version, latest.subject) == (3, 2, "orders-value")
    assert client.latest("other-value") is None
    assert {auth for _, auth in Registry.seen} == {
        "Basic " + base64.b64encode(f"u:{SECRET}".encode()).decode()
    }


@pytest.mark.parametrize(
    ("status", "error", "says"),
    [
        (401, AuthenticationFailedError, "refused the login"),
        (403, AuthorizationFailedError, "HTTP 403"),
        (503, RegistryUnreachableError, "answered HTTP 503"),
    ],
)
def test_refusals_and_server_errors_have_their_kinds(server, status, error, says):
    Registry.answers = {"/apis/ccompat/v7/schemas/ids/1": (status, {"message": "no"})}
    with pytest.raises(error, match=says) as excinfo:
        RegistryClient(RegistrySettings(server, "u", SECRET, "schemas")).schema(1)
    assert "connection 'schemas'" in str(excinfo.value)
    assert SECRET not in str(excinfo.value)


def test_a_registry_that_does_not_answer_is_unreachable():
    client = RegistryClient(RegistrySettings(f"http://127.0.0.1:{free_port()}", "u", SECRET))
    with pytest.raises(RegistryUnreachableError, match="did not answer") as excinfo:
        client.schema(1)
    assert SECRET not in str(excinfo.value)


def test_writer_schemas_are_asked_once_and_kept_beside_the_history(server, tmp_path: Path):
    Registry.answers = {"/apis/ccompat/v7/schemas/ids/3": (200, {"schema": SCHEMA})}
    kept = tmp_path / "schemas" / "registry"
    assert WriterSchemas(str(kept), RegistrySettings(server)).get(3) == schema_registry.RegisteredSchema(
        3, SCHEMA
    )
    assert WriterSchemas(str(kept), RegistrySettings(server)).get(9) is None
    asked = len(Registry.seen)
    # Another run, with the registry gone: the kept schema is enough.
    gone = RegistrySettings(f"http://127.0.0.1:{free_port()}")
    assert WriterSchemas(str(kept), gone).get(3) == schema_registry.RegisteredSchema(3, SCHEMA)
    assert len(Registry.seen) == asked
    with pytest.raises(RegistryUnreachableError):
        WriterSchemas(str(kept), gone).get(9)


PROTO_TIER = 'syntax = "proto3"; package shop; enum Tier { NONE = 0; GOLD = 1; }'
PROTO_ORDER = (
    'syntax = "proto3"; package shop; import "shop/tier.proto";'
    " message Order { int64 id = 1; Tier tier = 2; }"
)


def test_protobuf_writer_schemas_are_asked_serialized_with_references_resolved_once_and_kept(
    server, tmp_path: Path
):
    ids = "/apis/ccompat/v7/schemas/ids"
    reference = {"name": "shop/tier.proto", "subject": "shop/tier.proto", "version": 1}
    Registry.answers = {
        # A registry that keeps what it was given answers .proto text even to format=serialized.
        f"{ids}/5?format=serialized": (
            200,
            {"schema": PROTO_ORDER, "schemaType": "PROTOBUF", "references": [reference]},
        ),
        f"{ids}/6?format=serialized": (
            200,
            {"schema": PROTO_ORDER + " message B {", "schemaType": "PROTOBUF", "references": [reference]},
        ),
        "/apis/ccompat/v7/subjects/shop%2Ftier.proto/versions/1?format=serialized&deleted=true": (
            200,
            {
                "subject": "shop/tier.proto",
                "version": 1,
                "id": 4,
                "schema": PROTO_TIER,
                "schemaType": "PROTOBUF",
            },
        ),
    }
    kept = tmp_path / "schemas" / "registry"
    writers = WriterSchemas(str(kept), RegistrySettings(server))
    five = writers.get(5, protobuf=True, subject="orders-value")
    assert five is not None and five.problem is None and five.descriptors
    six = writers.get(6, protobuf=True, subject="orders-value")
    # Text that does not compile: the schema id, the subject and protoc's words; no descriptors.
    assert six is not None and six.descriptors is None
    assert six.problem is not None and six.problem.startswith("schema id 6 (subject 'orders-value'): ")
    assert "does not compile" in six.problem
    paths = [path for path, _ in Registry.seen]
    assert (
        paths.count("/apis/ccompat/v7/subjects/shop%2Ftier.proto/versions/1?format=serialized&deleted=true")
        == 1
    )
    assert (kept / "references" / "shop%2Ftier.proto" / "1.json").is_file()
    assert (
        "problem" not in json.loads((kept / "6.json").read_text())
        or json.loads((kept / "6.json").read_text())["problem"] is None
    )

    # A replay, the registry gone: schema and reference from what was kept, the same descriptors.
    gone = RegistrySettings(f"http://127.0.0.1:{free_port()}")
    again = WriterSchemas(str(kept), gone).get(5, protobuf=True)
    assert again == five
    assert len(Registry.seen) == len(paths)
    # The bad one is tried again (from its kept text): a problem still, not the registry asked.
    later = WriterSchemas(str(kept), gone).get(6, protobuf=True, subject="orders-value")
    assert later is not None and later.problem == six.problem


def test_a_missing_reference_is_a_problem_of_that_schema(server, tmp_path: Path):
    Registry.answers = {
        "/apis/ccompat/v7/schemas/ids/7?format=serialized": (
            200,
            {
                "schema": PROTO_ORDER,
                "schemaType": "PROTOBUF",
                "references": [{"name": "shop/tier.proto", "subject": "tiers", "version": 3}],
            },
        )
    }
    found = WriterSchemas(str(tmp_path), RegistrySettings(server)).get(7, protobuf=True, subject="o-value")
    assert found is not None and found.problem == (
        "schema id 7 (subject 'o-value'): its reference 'shop/tier.proto' (subject 'tiers' version 3) "
        "is not in the registry"
    )


AVRO_TIER = '{"type": "enum", "name": "Tier", "namespace": "shop", "symbols": ["GOLD", "SILVER"]}'
AVRO_ORDER = (
    '{"type": "record", "name": "Order", "namespace": "shop", "fields": ['
    '{"name": "id", "type": "long"}, {"name": "tier", "type": "shop.Tier"}]}'
)
AVRO_TIER_REF = {"name": "shop.Tier", "subject": "tiers", "version": 3}


def test_avro_references_are_inlined_once_and_the_kept_schema_needs_no_registry(server, tmp_path: Path):
    Registry.answers = {
        "/apis/ccompat/v7/schemas/ids/5": (200, {"schema": AVRO_ORDER, "references": [AVRO_TIER_REF]}),
        "/apis/ccompat/v7/subjects/tiers/versions/3": (200, {"id": 4, "schema": AVRO_TIER, "version": 3}),
    }
    found = WriterSchemas(str(tmp_path), RegistrySettings(server)).get(5)
    assert found is not None
    tier = json.loads(found.schema)["fields"][1]["type"]
    assert tier == json.loads(AVRO_TIER)
    asked = [path for path, _ in Registry.seen]
    assert asked == ["/apis/ccompat/v7/schemas/ids/5", "/apis/ccompat/v7/subjects/tiers/versions/3"]
    # Another run, the registry gone: the kept schema (inlined) and reference are enough.
    gone = RegistrySettings(f"http://127.0.0.1:{free_port()}")
    assert WriterSchemas(str(tmp_path), gone).get(5) == found


def test_a_missing_avro_reference_refuses_the_schema_naming_it(server, tmp_path: Path):
    Registry.answers = {
        "/apis/ccompat/v7/schemas/ids/5": (200, {"schema": AVRO_ORDER, "references": [AVRO_TIER_REF]}),
    }
    with pytest.raises(UnusableSchemaError) as refused:
        WriterSchemas(str(tmp_path), RegistrySettings(server)).get(5)
    assert str(refused.value) == (
        "schema id 5: its reference 'shop.Tier' (subject 'tiers' version 3) is not in the registry"
    )
