"""Topics written in a schema registry's wire format, against a real registry (Apicurio, started by
the project: kafkalake.dev.schema_registry) spoken to through its Confluent-compatible API.

The records are produced with confluent-kafka's own serializers, and land through the ingest job's
own run (IngestRun) in the tests' Spark session; the tables are read back with delta-rs.
"""

from __future__ import annotations

import io
import json
import struct
import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import fastavro
import pytest
from confluent_kafka.schema_registry import _KEY_SCHEMA_ID as KEY_SCHEMA_ID
from confluent_kafka.schema_registry import _VALUE_SCHEMA_ID as VALUE_SCHEMA_ID
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from kafkalake.config.catalog import load_catalog
from kafkalake.config.parsed import ParsedConfig
from kafkalake.config.topic import TopicConfig
from kafkalake.core.errors import (
    AuthenticationFailedError,
    KafkalakeError,
    RegistryUnreachableError,
    TlsUntrustedError,
)
from kafkalake.dev import local_airflow, producer
from kafkalake.dev.broker import free_port
from kafkalake.dev.producer import Record
from kafkalake.dev.schema_registry import CCOMPAT_PATH, LocalRegistry
from kafkalake.dev.secured_broker import PIPELINE_USER, Pki, make_pki
from kafkalake.dev.tls_proxy import TlsProxy
from kafkalake.kafka import schema_registry
from kafkalake.lake import parsed_backlog
from kafkalake.lake.schema_history import SchemaHistory

from .helpers import PsWatcher, assert_exactly_once, files_containing, make_topic, read_rows
from .helpers import run_ingest as run

pytestmark = [pytest.mark.integration, pytest.mark.registry]

ORDER_V1 = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {
            "name": "customer",
            "type": {
                "type": "record",
                "name": "Customer",
                "fields": [
                    {"name": "name", "type": "string"},
                    {"name": "tier", "type": {"type": "enum", "name": "Tier", "symbols": ["GOLD", "SILVER"]}},
                ],
            },
        },
        {
            "name": "items",
            "type": {
                "type": "array",
                "items": {
                    "type": "record",
                    "name": "Item",
                    "fields": [{"name": "sku", "type": "string"}, {"name": "qty", "type": "int"}],
                },
            },
        },
        {"name": "attrs", "type": {"type": "map", "values": "string"}},
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
        {"name": "created", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}
#: v1 with a field added with a default: a compatible evolution.
ORDER_V2 = {
    **ORDER_V1,
    "fields": [*ORDER_V1["fields"], {"name": "channel", "type": "string", "default": "web"}],
}


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRegistry]:
    """One registry for the module, in memory: each test registers under subjects of its own.

    The jobs' process-wide registry settings point at it for the module (the ingest job reads them
    from the file its task hands over; the tests run the job's code in-process)."""
    server = LocalRegistry(tmp_path_factory.mktemp("registry")).start()
    schema_registry.use(schema_registry.RegistrySettings(url=server.url, conn_id="it_registry"))
    yield server
    schema_registry.use(schema_registry.RegistrySettings())
    server.stop()


def avro_topic(
    kafka: Any, lake: Path, name: str, partitions: int, parsed: ParsedConfig | None = None
) -> TopicConfig:
    """A topic in Kafka (``partitions``), and its catalog entry with ``format: avro``."""
    producer.create_topic(kafka.bootstrap_servers, name, partitions=partitions)
    entry = make_topic(lake, name, parsed or ParsedConfig())
    return replace(entry, format="avro", registry_conn_id="it_registry")


def order(i: int, **extra: Any) -> dict[str, Any]:
    return {
        "id": i,
        "customer": {"name": f"c{i}", "tier": "GOLD" if i % 2 else "SILVER"},
        "items": [{"sku": f"s{i}-{j}", "qty": j + 1} for j in range(i % 3)],
        "attrs": {"src": "test", f"k{i}": str(i)},
        "amount": Decimal(f"{i}.{i % 100:02d}"),
        "created": datetime(2026, 11, 28, 12, i % 60, tzinfo=UTC),
        "note": None if i % 2 else f"note {i}",
        **extra,
    }


def serialized(
    url: str | dict[str, str], topic: str, schema: dict[str, Any], orders: list[dict[str, Any]]
) -> list[Record]:
    """The orders as confluent-kafka's AvroSerializer frames them (it registers the schema); ``url``
    or the registry client's whole settings."""
    client = SchemaRegistryClient(url if isinstance(url, dict) else {"url": url})
    serialize = AvroSerializer(client, json.dumps(schema))
    context = SerializationContext(topic, MessageField.VALUE)
    return [Record(str(o["id"]).encode(), serialize(o, context)) for o in orders]


def as_produced(row: dict[str, Any]) -> dict[str, Any]:
    """A parsed row's fields in the producer's form: enums are strings, maps come back as pairs."""
    fields = {k: v for k, v in row.items() if not k.startswith("_")}
    fields["attrs"] = dict(fields["attrs"])
    return fields


def test_confluent_avro_serializer_registers_through_the_compatible_api(
    registry: LocalRegistry,
) -> None:
    client = SchemaRegistryClient({"url": registry.url})
    schema = (
        '{"type": "record", "name": "Probe", "fields": [{"name": "id", "type": "long"},'
        ' {"name": "tags", "type": {"type": "array", "items": "string"}}]}'
    )
    serialize = AvroSerializer(client, schema)
    framed = serialize({"id": 7, "tags": ["a", "b"]}, SerializationContext("probe", MessageField.VALUE))
    assert framed is not None

    magic, schema_id = struct.unpack(">bI", framed[:5])
    assert magic == 0
    assert client.get_latest_version("probe-value").schema_id == schema_id
    # The writer schema comes back from the registry by the id in the frame, and decodes the payload.
    writer = fastavro.parse_schema(json.loads(client.get_schema(schema_id).schema_str))
    assert fastavro.schemaless_reader(io.BytesIO(framed[5:]), writer) == {"id": 7, "tags": ["a", "b"]}


def test_avro_records_land_once_with_the_values_produced(spark, kafka, registry, tmp_path):
    name = "it-avro-orders"
    topic = avro_topic(kafka, tmp_path, name, partitions=2, parsed=ParsedConfig(latest_by_key=True))
    orders = [order(i) for i in range(1, 9)]
    producer.produce(kafka.bootstrap_servers, name, serialized(registry.url, name, ORDER_V1, orders))
    # A key given again: the latest table keeps its newest record only.
    newer = order(3, note="newer")
    producer.produce(kafka.bootstrap_servers, name, serialized(registry.url, name, ORDER_V1, [newer]))

    stats = run(spark, topic, kafka.bootstrap_servers).stats

    rows = read_rows(Path(topic.parsed_path))
    assert_exactly_once([r["_kafka"] for r in rows], name, kafka.bootstrap_servers)
    by_offset = sorted(rows, key=lambda r: (r["id"], r["_kafka"]["timestamp"], r["_kafka"]["offset"]))
    assert [as_produced(r) for r in by_offset] == sorted([*orders, newer], key=lambda o: o["id"])
    assert stats.parsed_rows == len(orders) + 1 and not stats.dead_letters
    latest = {r["_kafka"]["key"]: as_produced(r) for r in read_rows(Path(topic.latest_path))}
    assert latest == {str(o["id"]).encode(): o for o in [*orders[:2], newer, *orders[3:]]}
    # The writer schema is kept beside the schema history: a replay needs no registry for it.
    kept = list(Path(topic.registry_schema_dir).glob("*.json"))
    assert len(kept) == 1 and json.loads(json.loads(kept[0].read_text())["schema"])["name"] == "Order"


def test_a_schema_evolved_between_runs_lands_both_versions(spark, kafka, registry, tmp_path):
    name = "it-avro-evolving"
    topic = avro_topic(kafka, tmp_path, name, partitions=1)
    first = [order(i) for i in range(1, 4)]
    producer.produce(kafka.bootstrap_servers, name, serialized(registry.url, name, ORDER_V1, first))
    run(spark, topic, kafka.bootstrap_servers)

    second = [order(i, channel="app") for i in range(4, 7)]
    producer.produce(kafka.bootstrap_servers, name, serialized(registry.url, name, ORDER_V2, second))
    # Written with v1 after v2 was registered: read with v2, the field takes its default.
    late = [order(7)]
    producer.produce(kafka.bootstrap_servers, name, serialized(registry.url, name, ORDER_V1, late))
    run(spark, topic, kafka.bootstrap_servers)

    rows = {r["id"]: as_produced(r) for r in read_rows(Path(topic.parsed_path))}
    assert len(rows) == 7
    assert [rows[o["id"]] for o in first] == [{**o, "channel": None} for o in first]
    assert [rows[o["id"]] for o in second] == second
    assert rows[7] == {**late[0], "channel": "web"}
    history = SchemaHistory(topic.schema_dir)
    assert history.versions() == [1, 2]
    assert history.read(2).changes == ("+ channel: string",)
    assert "registry subject it-avro-evolving-value version 2" in history.read(2).source

    # A field removed (v3 has no note): its column stays, null for the records written without it.
    v3 = {**ORDER_V2, "fields": [f for f in ORDER_V2["fields"] if f["name"] != "note"]}
    third = [{k: v for k, v in order(i, channel="pos").items() if k != "note"} for i in (8, 10)]
    producer.produce(kafka.bootstrap_servers, name, serialized(registry.url, name, v3, third))
    # Written with v2 after v3 dropped the field: its value is still read (the reader is widened).
    older = [order(12, channel="pos")]
    producer.produce(kafka.bootstrap_servers, name, serialized(registry.url, name, ORDER_V2, older))
    run(spark, topic, kafka.bootstrap_servers)

    rows = {r["id"]: as_produced(r) for r in read_rows(Path(topic.parsed_path))}
    assert [rows[o["id"]] for o in third] == [{**o, "note": None} for o in third]
    assert rows[12] == older[0] and older[0]["note"] == "note 12"
    assert len(rows) == 10 and history.versions() == [1, 2]


def test_bad_input_becomes_dead_letters_with_their_reasons(spark, kafka, registry, tmp_path):
    name = "it-avro-bad-input"
    topic = avro_topic(kafka, tmp_path, name, partitions=1)
    good = serialized(registry.url, name, ORDER_V1, [order(i) for i in range(1, 5)])
    framed_id = struct.unpack(">I", good[0].value[1:5])[0]
    bad = {
        b"json": (b'{"id": 1}', "bad_magic_byte"),
        b"short": (b"\x00\x00\x01", "bad_magic_byte"),
        b"unknown-id": (b"\x00" + struct.pack(">I", 987654) + good[1].value[5:], "unknown_schema_id"),
        b"garbage": (b"\x00" + struct.pack(">I", framed_id) + b"\xff\xff\xff", "undecodable"),
        b"empty": (b"", "empty_value"),
    }
    records = [good[0], good[1], *(Record(k, v) for k, (v, _) in bad.items()), good[2], good[3]]
    producer.produce(kafka.bootstrap_servers, name, records)

    stats = run(spark, topic, kafka.bootstrap_servers).stats

    parsed = read_rows(Path(topic.parsed_path))
    assert sorted(r["id"] for r in parsed) == [1, 2, 3, 4]
    dead = {r["key"]: r for r in read_rows(Path(topic.dead_letter_path))}
    assert {k: r["reason"] for k, r in dead.items()} == {k: reason for k, (_, reason) in bad.items()}
    assert all(dead[k]["value"] == v for k, (v, _) in bad.items())
    assert "987654 is not in the registry" in dead[b"unknown-id"]["detail"]
    assert "0x7b is not the magic byte" in dead[b"json"]["detail"]
    assert "shorter than" in dead[b"short"]["detail"]
    assert stats.dead_letters == {
        "bad_magic_byte": 2,
        "unknown_schema_id": 1,
        "undecodable": 1,
        "empty_value": 1,
    }


def test_registry_unreachable_parks_the_parsed_side_until_it_answers(spark, kafka, registry, tmp_path):
    name = "it-avro-outage"
    topic = avro_topic(kafka, tmp_path, name, partitions=2)
    orders = [order(i) for i in range(1, 7)]
    producer.produce(kafka.bootstrap_servers, name, serialized(registry.url, name, ORDER_V1, orders))

    down = schema_registry.RegistrySettings(url=f"http://127.0.0.1:{free_port()}", conn_id="it_registry")
    schema_registry.use(down)
    try:
        with pytest.raises(RegistryUnreachableError, match="did not answer"):
            run(spark, topic, kafka.bootstrap_servers)
    finally:
        schema_registry.use(replace(down, url=registry.url))
    # Bronze landed every record; the parsed side waits, and says why.
    assert_exactly_once(read_rows(Path(topic.path)), name, kafka.bootstrap_servers)
    backlog = parsed_backlog.read(topic)
    assert backlog is not None and backlog.kind == "registry_unreachable"
    assert not Path(topic.parsed_path, "_delta_log").exists() or not read_rows(Path(topic.parsed_path))

    run(spark, topic, kafka.bootstrap_servers)

    rows = read_rows(Path(topic.parsed_path))
    assert_exactly_once([r["_kafka"] for r in rows], name, kafka.bootstrap_servers)
    assert sorted((as_produced(r) for r in rows), key=lambda r: r["id"]) == orders
    assert parsed_backlog.read(topic) is None


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """The secured broker's dev CA, an untrusted CA, a server certificate for 127.0.0.1 and the
    pipeline's client certificate."""
    return make_pki(tmp_path_factory.mktemp("pki"), [PIPELINE_USER])


@pytest.fixture(scope="module")
def tls_registry(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRegistry]:
    """A second registry that serves HTTPS only, with a certificate of the dev CA."""
    server = LocalRegistry(tmp_path_factory.mktemp("registry-tls"), pki=pki).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def mtls_registry(pki: Pki, registry: LocalRegistry) -> Iterator[str]:
    """The module's registry behind a TLS front that requires a client certificate of the dev CA
    (Apicurio's own HTTPS cannot: Quarkus 2.16 fixes client-auth at build): its URL."""
    front = TlsProxy(
        pki.directory / "broker.crt", pki.directory / "broker.key", pki.ca, registry.port
    ).start()
    yield f"https://127.0.0.1:{front.port}{CCOMPAT_PATH}"
    front.stop()


def refused_then_caught_up(
    spark: Any,
    kafka: Any,
    topic: TopicConfig,
    orders: list[dict[str, Any]],
    settings: tuple[schema_registry.RegistrySettings, schema_registry.RegistrySettings],
    error: type[KafkalakeError],
    says: str,
) -> None:
    """A run with the first settings, which the registry's TLS refuses: the run fails with ``error``
    (its message ``says`` it, no key in it), bronze lands every record, the parsed side parks with the
    error's kind; then a run with the second: the parsed table catches up with every order once."""
    refused, fixed = settings
    previous = schema_registry.current()
    schema_registry.use(refused)
    try:
        with pytest.raises(error) as excinfo:
            run(spark, topic, kafka.bootstrap_servers)
        assert_exactly_once(read_rows(Path(topic.path)), topic.name, kafka.bootstrap_servers)
        assert says in str(excinfo.value) and "PRIVATE KEY" not in str(excinfo.value)
        backlog = parsed_backlog.read(topic)
        assert backlog is not None and backlog.kind == error.kind and backlog.reason in str(excinfo.value)
        schema_registry.use(fixed)
        run(spark, topic, kafka.bootstrap_servers)
    finally:
        schema_registry.use(previous)
    rows = read_rows(Path(topic.parsed_path))
    assert_exactly_once([r["_kafka"] for r in rows], topic.name, kafka.bootstrap_servers)
    assert sorted((as_produced(r) for r in rows), key=lambda r: r["id"]) == orders
    assert parsed_backlog.read(topic) is None


def test_a_registry_over_tls_is_trusted_through_the_connection_s_ca_only(
    spark: Any, kafka: Any, tls_registry: LocalRegistry, tmp_path: Path
) -> None:
    assert tls_registry.pki is not None and tls_registry.url.startswith("https://")
    name = "it-avro-tls"
    topic = avro_topic(kafka, tmp_path, name, partitions=1)
    orders = [order(i) for i in range(1, 5)]
    client = {"url": tls_registry.url, "ssl.ca.location": str(tls_registry.pki.ca)}
    producer.produce(kafka.bootstrap_servers, name, serialized(client, name, ORDER_V1, orders))

    trusted = tls_registry.settings()
    # First the connection trusts a CA that did not sign the registry's certificate.
    untrusted = replace(trusted, ssl_ca_pem=tls_registry.pki.other_ca.read_text())
    says = (
        f"the schema registry at {tls_registry.url} (connection 'it_registry'): certificate verify "
        "failed: the registry's certificate is not signed by the connection's ssl_ca_pem"
    )
    refused_then_caught_up(spark, kafka, topic, orders, (untrusted, trusted), TlsUntrustedError, says)


def test_mutual_tls_reads_schemas_with_the_client_certificate_and_names_a_refused_one(
    spark: Any, kafka: Any, registry: LocalRegistry, pki: Pki, mtls_registry: str, tmp_path: Path
) -> None:
    name = "it-avro-mtls"
    topic = avro_topic(kafka, tmp_path, name, partitions=1)
    orders = [order(i) for i in range(1, 5)]
    producer.produce(kafka.bootstrap_servers, name, serialized(registry.url, name, ORDER_V1, orders))

    certificate, key = pki.client(PIPELINE_USER).pem()
    # As the task hands them over: the connection's extra, PEM text.
    extra = {"ssl_ca_pem": pki.ca.read_text(), "ssl_certificate_pem": certificate, "ssl_key_pem": key}
    good = schema_registry.from_connection("it_registry", mtls_registry, None, None, None, extra)
    # First the untrusted CA's own certificate: one the registry's CA never signed.
    wrong = replace(
        good,
        ssl_certificate_pem=pki.other_ca.read_text(),
        ssl_key_pem=(pki.directory / "other-ca.key").read_text(),
    )
    says = (
        f"the schema registry at {mtls_registry} (connection 'it_registry') refused the TLS handshake "
        "(TLSV1_ALERT_UNKNOWN_CA): the connection gave its client certificate"
    )
    refused_then_caught_up(spark, kafka, topic, orders, (wrong, good), AuthenticationFailedError, says)


def test_json_schema_values_are_read_after_their_frame(spark, kafka, registry, tmp_path):
    name = "it-json-schema"
    producer.create_topic(kafka.bootstrap_servers, name, partitions=1)
    topic = replace(make_topic(tmp_path, name, ParsedConfig()), format="json_schema")
    schema = {
        "type": "object",
        "properties": {
            "id": {"type": "integer"},
            "item": {"type": "object", "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}}},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["id"],
    }
    serialize = JSONSerializer(json.dumps(schema), SchemaRegistryClient({"url": registry.url}))
    context = SerializationContext(name, MessageField.VALUE)
    events = [{"id": i, "item": {"sku": f"s{i}", "qty": i}, "tags": [f"t{i}"] * (i % 3)} for i in range(1, 6)]
    good = [Record(str(e["id"]).encode(), serialize(e, context)) for e in events]
    frame = good[0].value[:5]
    bad = {
        b"plain-json": (b'{"id": 99}', "bad_magic_byte"),
        b"frame-only": (frame, "empty_value"),
        b"framed-malformed": (frame + b'{"id": ', "malformed_json"),
    }
    producer.produce(
        kafka.bootstrap_servers, name, [*good[:2], *(Record(k, v) for k, (v, _) in bad.items()), *good[2:]]
    )

    run(spark, topic, kafka.bootstrap_servers)

    rows = read_rows(Path(topic.parsed_path))
    assert (
        sorted(({k: v for k, v in r.items() if not k.startswith("_")} for r in rows), key=lambda r: r["id"])
        == events
    )
    dead = {r["key"]: r for r in read_rows(Path(topic.dead_letter_path))}
    assert {k: r["reason"] for k, r in dead.items()} == {k: reason for k, (_, reason) in bad.items()}
    assert dead[b"frame-only"]["value"] == frame  # dead letters keep the raw bytes, frame and all
    assert "0x7b is not the magic byte" in dead[b"plain-json"]["detail"]


def test_a_dag_run_leaves_the_registry_password_and_client_key_nowhere(
    kafka: Any, registry: LocalRegistry, pki: Pki, mtls_registry: str, tmp_path: Path
) -> None:
    """The topic's whole DAG run (``airflow dags test``: the ingest task hands the registry
    connection to its spark-submit job, then the follow-ups), over mutual TLS, the connection's
    password a canary and its client key a secret: neither in a command line (``ps``), the run
    output, anything under AIRFLOW_HOME (task logs, the metadata DB: XCom, rendered fields,
    serialized DAGs), the lake or the runs' temp folder, where the job's key file is gone too."""
    canary = f"canary{uuid.uuid4().hex}"
    certificate, key = pki.client(PIPELINE_USER).pem()
    key_line = key.splitlines()[1]  # 64 characters of the key itself
    name = "it-avro-handover"
    producer.create_topic(kafka.bootstrap_servers, name, partitions=1)
    orders = [order(i) for i in range(1, 4)]
    producer.produce(kafka.bootstrap_servers, name, serialized(registry.url, name, ORDER_V1, orders))
    paths = {part: tmp_path / part for part in ("lake", "airflow", "tmp")}
    for path in paths.values():
        path.mkdir()
    catalog = tmp_path / "topics.yaml"
    entry = f"  - name: {name}\n    freshness_sla: 1h\n    format: avro\n    registry_conn_id: it_schemas\n"
    catalog.write_text(f"topics:\n{entry}")
    env = local_airflow.environment(
        paths["airflow"], kafka_bootstrap=kafka.bootstrap_servers, catalog=catalog, lake_root=paths["lake"]
    )
    # Apicurio without OIDC takes any login: what is checked is where the password travels.
    connection = {
        "conn_type": "http",
        "host": mtls_registry,
        "login": "pipeline",
        "password": canary,
        "extra": {"ssl_ca_pem": pki.ca.read_text(), "ssl_certificate_pem": certificate, "ssl_key_pem": key},
    }
    env["AIRFLOW_CONN_IT_SCHEMAS"] = json.dumps(connection)
    env["TMPDIR"] = str(paths["tmp"])  # the runs' own, so what they leave can be searched exactly
    env["KAFKALAKE_STRICT"] = "1"
    topic = load_catalog(catalog, paths["lake"]).topic(name)
    with local_airflow.served_home(env) as served, PsWatcher() as ps:
        run = local_airflow.test_dag(served, topic.dag_id, sync=False)

    assert run.task_states["ingest"] == "success"
    rows = read_rows(Path(topic.parsed_path))
    assert sorted((as_produced(r) for r in rows), key=lambda r: r["id"]) == orders
    assert local_airflow.xcom_value(paths["airflow"], run, "ingest", "run_metrics")["rows"] == len(orders)
    assert any("ingest_topic.py" in line for line in ps.lines), "ps never saw the job"
    for secret in (canary, key_line):
        assert ps.samples > 5 and not [line for line in ps.lines if secret in line]
        assert secret not in run.output
        for where in paths.values():
            assert files_containing(where, secret) == [], where
    assert list(paths["tmp"].glob("kafkalake-secrets-*/*")) == []  # the settings file read and deleted
    assert list(paths["tmp"].glob("kafkalake-registry-tls-*")) == []  # the key file loaded and deleted


ORDER_KEY = {
    "type": "record",
    "name": "OrderKey",
    "namespace": "shop",
    "fields": [{"name": "id", "type": "long"}],
}


def in_header(payload: bytes, ctx: Any, schema_id: Any) -> bytes:
    """A ``schema.id.serializer`` putting the schema id in the record header, as Confluent's
    ``header_schema_id_serializer`` does, but the id (magic byte 0), not a GUID: Apicurio 2.4.2
    assigns no GUIDs, so the client's own serializer refuses ("Schema GUID is not set")."""
    name = KEY_SCHEMA_ID if ctx.field == MessageField.KEY else VALUE_SCHEMA_ID
    ctx.headers.append((name, schema_id.id_to_bytes()))
    return payload


def framed_records(
    url: str, topic: str, orders: list[dict[str, Any]], *, header: bool = False
) -> list[Record]:
    """Orders with an Avro key {id} and value, both framed by AvroSerializer: the schema ids in
    the prefix, or (``header``) in the ``__key_schema_id`` / ``__value_schema_id`` headers."""
    client = SchemaRegistryClient({"url": url})
    conf = {"schema.id.serializer": in_header} if header else None
    keys = AvroSerializer(client, json.dumps(ORDER_KEY), conf=conf)
    values = AvroSerializer(client, json.dumps(ORDER_V1), conf=conf)
    records = []
    for o in orders:
        headers: list[tuple[str, bytes | None]] = []
        key = keys({"id": o["id"]}, SerializationContext(topic, MessageField.KEY, headers))
        value = values(o, SerializationContext(topic, MessageField.VALUE, headers))
        records.append(Record(key, value, headers=headers))
    return records


def test_framed_keys_and_header_schema_ids(spark, kafka, registry, tmp_path):
    """key_format: avro, ids in the prefix or in the headers: the latest table keeps one row per
    key whichever way its id travelled, a tombstone deletes by the key's payload, bad keys and
    headers are dead letters with their reasons."""
    name = "it-avro-keys"
    producer.create_topic(kafka.bootstrap_servers, name, partitions=1)
    entry = make_topic(tmp_path, name, ParsedConfig(latest_by_key=True, changelog=True))
    topic = replace(entry, format="avro", registry_conn_id="it_registry", key_format="avro")
    orders = [order(i) for i in range(1, 5)]
    prefixed = framed_records(registry.url, name, orders)
    newer = order(2, note="newer, ids in headers")
    carried = framed_records(registry.url, name, [newer], header=True)
    assert carried[0].key is not None and carried[0].key[0] != 0  # no frame: the key's Avro payload
    key_id = struct.unpack(">I", (prefixed[0].key or b"")[1:5])[0]
    value = prefixed[0].value
    guid = b"\x01" + uuid.uuid4().bytes
    bad = [
        (Record(b"plain-key", value), "bad_magic_byte", "key: first byte 0x70 is not the magic byte"),
        (
            Record(b"\x00" + struct.pack(">I", 999999) + b"\x02", value),
            "unknown_schema_id",
            "key: schema id 999999 is not in the registry",
        ),
        (
            Record(b"\x00" + struct.pack(">I", key_id) + b"\x81", value),
            "undecodable",
            f"key: the payload does not decode with writer schema id {key_id}",
        ),
        (
            Record(b"guid-key", value, headers=[(KEY_SCHEMA_ID, guid)]),
            "bad_magic_byte",
            "key: header __key_schema_id holds a schema GUID",
        ),
        (
            Record(None, b"\x02", headers=[(VALUE_SCHEMA_ID, guid)]),
            "bad_magic_byte",
            "header __value_schema_id holds a schema GUID",
        ),
    ]
    # Order 4 deleted by a tombstone whose key is framed (its id in the prefix).
    tombstone = Record(prefixed[3].key, None)
    records = [*prefixed, *(r for r, _, _ in bad), *carried, tombstone]
    spots = producer.produce(kafka.bootstrap_servers, name, records)

    stats = run(spark, topic, kafka.bootstrap_servers).stats

    key_schema = fastavro.parse_schema(ORDER_KEY)

    def key_id_of(key: bytes) -> int:
        return int(fastavro.schemaless_reader(io.BytesIO(key), key_schema)["id"])  # type: ignore[index,call-overload]

    rows = read_rows(Path(topic.parsed_path))
    dead = {(r["partition"], r["offset"]): r for r in read_rows(Path(topic.dead_letter_path))}
    landed = sorted([(r["_kafka"]["partition"], r["_kafka"]["offset"]) for r in rows] + list(dead))
    assert landed == sorted(spots[:-1])  # every record once, but the tombstone (latest table only)
    # The parsed rows' keys are the payloads, the frame left out, and decode to the order's id.
    assert sorted((key_id_of(r["_kafka"]["key"]), r["id"]) for r in rows) == [
        (1, 1),
        (2, 2),
        (2, 2),
        (3, 3),
        (4, 4),
    ]
    latest = {key_id_of(r["_kafka"]["key"]): as_produced(r) for r in read_rows(Path(topic.latest_path))}
    assert latest == {1: orders[0], 2: newer, 3: orders[2]}
    # Each bad record a dead letter with its reason and detail, its key and value as written.
    bad_spots = spots[len(prefixed) : len(prefixed) + len(bad)]
    for spot, (record, reason, detail) in zip(bad_spots, bad, strict=True):
        letter = dead[spot]
        assert (letter["reason"], letter["key"], letter["value"]) == (reason, record.key, record.value)
        assert letter["detail"].startswith(detail), letter["detail"]
    assert stats.dead_letters == {"bad_magic_byte": 3, "unknown_schema_id": 1, "undecodable": 1}


def test_json_schema_keys_key_the_latest_table_by_their_payload(spark, kafka, registry, tmp_path):
    name = "it-json-schema-keys"
    producer.create_topic(kafka.bootstrap_servers, name, partitions=1)
    entry = make_topic(tmp_path, name, ParsedConfig(latest_by_key=True))
    topic = replace(entry, format="json_schema", key_format="json_schema")
    client = SchemaRegistryClient({"url": registry.url})
    key_schema = '{"type": "object", "properties": {"id": {"type": "integer"}}}'
    value_schema = '{"type": "object", "properties": {"id": {"type": "integer"}, "v": {"type": "string"}}}'
    records = []
    for i, v, header in [(1, "a", False), (2, "b", False), (1, "c", True)]:
        conf = {"schema.id.serializer": in_header} if header else None
        headers: list[tuple[str, bytes | None]] = []
        key = JSONSerializer(key_schema, client, conf=conf)(
            {"id": i}, SerializationContext(name, MessageField.KEY, headers)
        )
        value = JSONSerializer(value_schema, client, conf=conf)(
            {"id": i, "v": v}, SerializationContext(name, MessageField.VALUE, headers)
        )
        records.append(Record(key, value, headers=headers))
    unframed = Record(b'{"id": 3}', records[0].value)
    producer.produce(kafka.bootstrap_servers, name, [*records, unframed])

    run(spark, topic, kafka.bootstrap_servers)

    latest = {json.loads(r["_kafka"]["key"])["id"]: r["v"] for r in read_rows(Path(topic.latest_path))}
    assert latest == {1: "c", 2: "b"}  # key 1's id in the frame, then in the header: one row
    (dead,) = read_rows(Path(topic.dead_letter_path))
    assert (dead["reason"], dead["key"]) == ("bad_magic_byte", unframed.key)
    assert dead["detail"].startswith("key: first byte 0x7b is not the magic byte")


def test_registry_stopped_mid_run_parks_the_parsed_side_then_it_catches_up(
    spark, kafka, tmp_path, monkeypatch
):
    """The registry process stopped after the run's first batch: bronze lands every batch, the
    parsed side parks; restarted, the next run catches the parsed table up, nothing twice."""
    from kafkalake.core import kill_points

    # A registry of its own: in memory, so restarted it gets the schemas registered again, in the
    # same order, and gives them the same ids (a registry with storage keeps them).
    own = LocalRegistry(tmp_path / "registry").start()
    name = "it-avro-stopped"
    producer.create_topic(kafka.bootstrap_servers, name, partitions=1)
    topic = replace(
        make_topic(tmp_path, name, ParsedConfig(), max_offsets=3),
        format="avro",
        registry_conn_id="it_registry",
    )
    first = [order(i) for i in range(1, 4)]
    later = [order(i, channel="app") for i in range(4, 10)]
    records = serialized(own.url, name, ORDER_V1, first) + serialized(own.url, name, ORDER_V2, later)
    ids = sorted({struct.unpack(">I", (r.value or b"")[1:5])[0] for r in records})
    producer.produce(kafka.bootstrap_servers, name, records)

    real_reached = kill_points.reached

    def stop_after_the_first_batch(point: str) -> None:
        if point == "ingest:after_parsed_commits" and own.running_pid() is not None:
            own.stop()
        real_reached(point)

    monkeypatch.setattr(kill_points, "reached", stop_after_the_first_batch)
    previous = schema_registry.current()
    schema_registry.use(schema_registry.RegistrySettings(url=own.url, conn_id="it_registry"))
    try:
        with pytest.raises(RegistryUnreachableError):
            run(spark, topic, kafka.bootstrap_servers)
        assert own.running_pid() is None, "the registry was stopped mid-run"
        # Bronze is current (three batches); the parsed side holds the first batch and waits.
        assert_exactly_once(read_rows(Path(topic.path)), name, kafka.bootstrap_servers)
        assert sorted(r["id"] for r in read_rows(Path(topic.parsed_path))) == [1, 2, 3]
        backlog = parsed_backlog.read(topic)
        assert backlog is not None and backlog.kind == "registry_unreachable"

        own.start()
        again = [
            SchemaRegistryClient({"url": own.url}).register_schema(
                f"{name}-value", Schema(json.dumps(s), "AVRO")
            )
            for s in (ORDER_V1, ORDER_V2)
        ]
        assert sorted(again) == ids
        own_settings = schema_registry.RegistrySettings(url=own.url, conn_id="it_registry")
        schema_registry.use(own_settings)
        run(spark, topic, kafka.bootstrap_servers)
    finally:
        schema_registry.use(previous)
        own.stop()

    rows = read_rows(Path(topic.parsed_path))
    assert_exactly_once([r["_kafka"] for r in rows], name, kafka.bootstrap_servers)
    assert sorted((as_produced(r) for r in rows), key=lambda r: r["id"]) == [
        # v2 was the latest version from the first batch on: v1's records take its default.
        *({**o, "channel": "web"} for o in first),
        *later,
    ]
    assert parsed_backlog.read(topic) is None


def order_file() -> Any:
    """``shop/order.proto`` as a FileDescriptorProto, built here rather than by protoc: an Order
    (nested message, repeated, map, enum, oneof, int64, bytes, a Timestamp) and a Shipment, the
    file's second message (message index [1])."""
    from google.protobuf import descriptor_pb2

    F = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(
        name="shop/order.proto",
        package="shop",
        syntax="proto3",
        dependency=["google/protobuf/timestamp.proto"],
    )

    def field(message: Any, name: str, number: int, kind: int, **more: Any) -> None:
        message.field.add(
            name=name, number=number, type=kind, label=more.pop("label", F.LABEL_OPTIONAL), **more
        )

    order = file.message_type.add(name="Order")
    customer = order.nested_type.add(name="Customer")
    field(customer, "name", 1, F.TYPE_STRING)
    field(customer, "tier", 2, F.TYPE_ENUM, type_name=".shop.Order.Tier")
    entry = order.nested_type.add(name="AttrsEntry")
    entry.options.map_entry = True
    field(entry, "key", 1, F.TYPE_STRING)
    field(entry, "value", 2, F.TYPE_STRING)
    tier = order.enum_type.add(name="Tier")
    for number, symbol in enumerate(("TIER_UNSPECIFIED", "GOLD", "SILVER")):
        tier.value.add(name=symbol, number=number)
    order.oneof_decl.add(name="payment")
    field(order, "id", 1, F.TYPE_INT64)
    field(order, "customer", 2, F.TYPE_MESSAGE, type_name=".shop.Order.Customer")
    field(order, "skus", 3, F.TYPE_STRING, label=F.LABEL_REPEATED)
    field(order, "attrs", 4, F.TYPE_MESSAGE, type_name=".shop.Order.AttrsEntry", label=F.LABEL_REPEATED)
    field(order, "card", 5, F.TYPE_STRING, oneof_index=0)
    field(order, "voucher", 6, F.TYPE_INT64, oneof_index=0)
    field(order, "created", 7, F.TYPE_MESSAGE, type_name=".google.protobuf.Timestamp")
    field(order, "blob", 8, F.TYPE_BYTES)
    shipment = file.message_type.add(name="Shipment")
    field(shipment, "id", 1, F.TYPE_INT64)
    field(shipment, "carrier", 2, F.TYPE_STRING)
    return file


def order_classes(file: Any = None) -> tuple[Any, Any]:
    from google.protobuf import descriptor_pool, message_factory, timestamp_pb2

    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(file or order_file())
    return tuple(
        message_factory.GetMessageClass(pool.FindMessageTypeByName(f"shop.{n}"))
        for n in ("Order", "Shipment")
    )


def proto_order(i: int) -> dict[str, Any]:
    """An Order's values as the parsed row should hold them."""
    return {
        "id": 2**40 + i,
        "customer": {"name": f"c{i}", "tier": "GOLD" if i % 2 else "SILVER"},
        "skus": [f"s{i}-{j}" for j in range(i % 3)],
        "attrs": {"src": "test", f"k{i}": str(i)},
        "card": f"card{i}" if i % 2 else None,
        "voucher": None if i % 2 else 10 * i,
        "created": datetime(2026, 11, 28, 12, i % 60, 1, 250000, tzinfo=UTC),
        "blob": bytes([i, 0, 255]),
        "carrier": None,
    }


def as_message(cls: Any, values: dict[str, Any]) -> Any:
    message = cls(id=values["id"], skus=values["skus"], attrs=values["attrs"], blob=values["blob"])
    message.customer.name = values["customer"]["name"]
    message.customer.tier = cls.Tier.Value(values["customer"]["tier"])
    if values["card"] is not None:
        message.card = values["card"]
    else:
        message.voucher = values["voucher"]
    message.created.FromDatetime(values["created"])
    return message


def proto_row(row: dict[str, Any]) -> dict[str, Any]:
    """A parsed row's fields, its map as a dict (delta-rs reads maps as pairs)."""
    fields = {k: v for k, v in row.items() if not k.startswith("_")}
    if fields["attrs"] is not None:
        fields["attrs"] = dict(fields["attrs"])
    return fields


def test_protobuf_records_land_with_the_values_produced(spark, kafka, registry, tmp_path):
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

    name = "it-protobuf-orders"
    producer.create_topic(kafka.bootstrap_servers, name, partitions=1)
    topic = replace(
        make_topic(tmp_path, name, ParsedConfig()), format="protobuf", registry_conn_id="it_registry"
    )
    order_cls, shipment_cls = order_classes()
    client = SchemaRegistryClient({"url": registry.url})
    context = SerializationContext(name, MessageField.VALUE)
    conf = {"use.deprecated.format": False}
    orders = [proto_order(i) for i in range(1, 6)]
    good = [
        Record(
            str(o["id"]).encode(),
            ProtobufSerializer(order_cls, client, conf)(as_message(order_cls, o), context),
        )
        for o in orders
    ]
    shipment = ProtobufSerializer(shipment_cls, client, conf)(shipment_cls(id=77, carrier="post"), context)
    frame = good[0].value[:5]
    assert good[0].value[5] == 0 and shipment[5:7] == b"\x02\x02"  # message indexes [0] and [1]
    bad = {
        b"bad-index": (frame + b"\x02\x0a" + good[0].value[6:], "unknown_message_index"),
        b"garbage": (frame + b"\x00\xff\xff\xff", "undecodable"),
        b"unknown-id": (b"\x00" + struct.pack(">I", 987655) + good[1].value[5:], "unknown_schema_id"),
        b"json": (b'{"id": 1}', "bad_magic_byte"),
    }
    # The id in the __value_schema_id header, the message indexes after it there, the value bare.
    headers: list[tuple[str, bytes | None]] = []
    bare = ProtobufSerializer(shipment_cls, client, {**conf, "schema.id.serializer": in_header})(
        shipment_cls(id=78, carrier="header"), SerializationContext(name, MessageField.VALUE, headers)
    )
    assert headers[0][1] == frame + b"\x02\x02"
    records = [
        *good[:2],
        Record(b"shipment", shipment),
        *(Record(k, v) for k, (v, _) in bad.items()),
        *good[2:],
        Record(b"shipment-header", bare, headers=headers),
    ]
    producer.produce(kafka.bootstrap_servers, name, records)

    stats = run(spark, topic, kafka.bootstrap_servers).stats

    rows = read_rows(Path(topic.parsed_path))
    assert sorted(r["_kafka"]["offset"] for r in rows) == [0, 1, 2, 7, 8, 9, 10]  # the good ones, once
    by_key = {r["_kafka"]["key"]: proto_row(r) for r in rows}
    # The Shipment (message index [1]) in the same table: the Order's fields null.
    assert by_key.pop(b"shipment") == {**{k: None for k in orders[0]}, "id": 77, "carrier": "post"}
    assert by_key.pop(b"shipment-header") == {**{k: None for k in orders[0]}, "id": 78, "carrier": "header"}
    assert [by_key[str(o["id"]).encode()] for o in orders] == orders
    dead = {r["key"]: r for r in read_rows(Path(topic.dead_letter_path))}
    assert {k: r["reason"] for k, r in dead.items()} == {k: reason for k, (_, reason) in bad.items()}
    assert "names no message" in dead[b"bad-index"]["detail"]
    assert stats.parsed_rows == len(orders) + 2

    # The file evolved between runs (a field added to Order): a new schema id, a new column.
    evolved = order_file()
    evolved.message_type[0].field.add(
        name="channel", number=9, type=evolved.message_type[0].field[0].TYPE_STRING, label=1
    )
    order_v2, _ = order_classes(evolved)
    later = {**proto_order(6), "channel": "app"}
    message = as_message(order_v2, later)
    message.channel = "app"
    framed = ProtobufSerializer(order_v2, client, conf)(message, context)
    assert framed[1:5] != frame[1:5]
    producer.produce(kafka.bootstrap_servers, name, [Record(b"later", framed)])
    run(spark, topic, kafka.bootstrap_servers)

    rows = {r["_kafka"]["key"]: proto_row(r) for r in read_rows(Path(topic.parsed_path))}
    assert rows[b"later"] == later
    assert rows[b"1099511627777"]["channel"] is None  # written before the field: null
    history = SchemaHistory(topic.schema_dir)
    assert history.read(history.versions()[-1]).changes == ("+ channel: string",)
    assert "message shop.Order" in history.read(history.versions()[-1]).source


def test_protobuf_first_batch_of_dead_letters_starts_from_the_subject(spark, kafka, registry, tmp_path):
    """No record of the first run names a message type: the table starts from the subject's
    latest version's first message."""
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

    name = "it-protobuf-all-bad"
    producer.create_topic(kafka.bootstrap_servers, name, partitions=1)
    topic = replace(
        make_topic(tmp_path, name, ParsedConfig()), format="protobuf", registry_conn_id="it_registry"
    )
    order_cls, _ = order_classes()
    serialize = ProtobufSerializer(order_cls, SchemaRegistryClient({"url": registry.url}), {})
    framed = serialize(as_message(order_cls, proto_order(1)), SerializationContext(name, MessageField.VALUE))
    producer.produce(kafka.bootstrap_servers, name, [Record(b"bad", framed[:5] + b"\x02\x08")])  # [4]

    run(spark, topic, kafka.bootstrap_servers)

    dead = read_rows(Path(topic.dead_letter_path))
    assert [(r["key"], r["reason"]) for r in dead] == [(b"bad", "unknown_message_index")]
    history = SchemaHistory(topic.schema_dir)
    first = history.read(history.versions()[0])
    assert "message shop.Order" in first.source
    assert [f["name"] for f in first.schema["fields"]] == list(proto_order(1))[:-1]  # no carrier


def test_protobuf_keys_key_the_latest_table_by_their_payload(spark, kafka, registry, tmp_path):
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

    name = "it-protobuf-keys"
    producer.create_topic(kafka.bootstrap_servers, name, partitions=1)
    entry = make_topic(tmp_path, name, ParsedConfig(latest_by_key=True))
    topic = replace(entry, format="protobuf", registry_conn_id="it_registry", key_format="protobuf")
    order_cls, shipment_cls = order_classes()
    client = SchemaRegistryClient({"url": registry.url})
    value = ProtobufSerializer(order_cls, client, {})
    key = ProtobufSerializer(shipment_cls, client, {})
    values, keys = (SerializationContext(name, field) for field in (MessageField.VALUE, MessageField.KEY))
    orders = [proto_order(i) for i in range(1, 5)]
    framed = [value(as_message(order_cls, o), values) for o in orders]
    one, two = (key(shipment_cls(id=i), keys) for i in (1, 2))
    # Key 2 again, its id and message indexes in the __key_schema_id header, the key bare.
    headers: list[tuple[str, bytes | None]] = []
    bare_two = ProtobufSerializer(shipment_cls, client, {"schema.id.serializer": in_header})(
        shipment_cls(id=2), SerializationContext(name, MessageField.KEY, headers)
    )
    assert headers == [(KEY_SCHEMA_ID, two[:7])] and bare_two == two[7:]  # indexes [1]: 02 02
    key_id = struct.unpack(">I", one[1:5])[0]
    bad = {
        b"plain": ("bad_magic_byte", "key: first byte 0x70 is not the magic byte"),
        b"\x00" + struct.pack(">I", 987656) + one[5:]: (
            "unknown_schema_id",
            "key: schema id 987656 is not in the registry",
        ),
        one[:5] + b"\x02\x0a" + one[6:]: (
            "unknown_message_index",
            f"key: schema id {key_id}: message index [5]",
        ),
        one[:5] + b"\x00\xff\xff\xff": (
            "undecodable",
            f"key: the payload does not decode with writer schema id {key_id}",
        ),
    }
    records = [
        Record(one, framed[0]),
        Record(two, framed[1]),
        Record(one, framed[2]),
        *(Record(k, framed[0]) for k in bad),
        Record(bare_two, framed[3], headers=headers),
    ]
    producer.produce(kafka.bootstrap_servers, name, records)

    run(spark, topic, kafka.bootstrap_servers)

    latest = {r["_kafka"]["key"]: proto_row(r) for r in read_rows(Path(topic.latest_path))}
    as_order = [{k: v for k, v in o.items() if k != "carrier"} for o in orders]  # no Shipment values
    # Keyed by the payload (message indexes and message), frame or header left out: key 2's
    # header-carried record is the same key as its framed one.
    assert latest == {one[5:]: as_order[2], two[5:]: as_order[3]}
    dead = {r["key"]: r for r in read_rows(Path(topic.dead_letter_path))}
    assert {k: r["reason"] for k, r in dead.items()} == {k: reason for k, (reason, _) in bad.items()}
    for k, (_, detail) in bad.items():
        assert dead[k]["detail"].startswith(detail), dead[k]["detail"]


#: order_file() as .proto text: what a Java serializer or a hand registers, and what Apicurio keeps.
ORDER_PROTO = """syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
message Order {
  message Customer { string name = 1; Tier tier = 2; }
  enum Tier { TIER_UNSPECIFIED = 0; GOLD = 1; SILVER = 2; }
  int64 id = 1;
  Customer customer = 2;
  repeated string skus = 3;
  map<string, string> attrs = 4;
  oneof payment { string card = 5; int64 voucher = 6; }
  google.protobuf.Timestamp created = 7;
  bytes blob = 8;
}
message Shipment { int64 id = 1; string carrier = 2; }
"""


def with_id(framed: bytes, schema_id: int) -> bytes:
    """A framed record with another schema id in its frame: the serializer's message indexes and
    message, the id of the same file registered as text."""
    return framed[:1] + struct.pack(">I", schema_id) + framed[5:]


def test_protobuf_schemas_registered_as_proto_text_are_compiled(spark, kafka, registry, tmp_path):
    """A schema registered as .proto text (Apicurio answers it so, even to ?format=serialized):
    compiled with protoc, its records land with the values produced; text that does not compile
    is a dead letter naming the schema id and the subject, the good records land beside it."""
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

    name = "it-protobuf-text"
    producer.create_topic(kafka.bootstrap_servers, name, partitions=1)
    topic = replace(
        make_topic(tmp_path, name, ParsedConfig()), format="protobuf", registry_conn_id="it_registry"
    )
    client = SchemaRegistryClient({"url": registry.url})
    text_id = client.register_schema(f"{name}-value", Schema(ORDER_PROTO, "PROTOBUF"))
    # Apicurio refuses text it cannot parse (HTTP 422: it finds no type in it; a one-line file too);
    # it keeps text that parses but protoc refuses: a field number used twice.
    broken = 'syntax = "proto3";\npackage shop;\nmessage Order {\n  int64 id = 1;\n  string note = 1;\n}\n'
    bad_id = client.register_schema(f"{name}-broken-value", Schema(broken, "PROTOBUF"))
    assert "message Order" in client.get_schema(text_id).schema_str  # kept as text
    order_cls, shipment_cls = order_classes()
    # The serializer registers its base64 file under a subject of its own; the records name the
    # text's id instead.
    context = SerializationContext(f"{name}-serialized", MessageField.VALUE)
    serialize = ProtobufSerializer(order_cls, client, {})
    orders = [proto_order(i) for i in range(1, 4)]
    framed = [serialize(as_message(order_cls, o), context) for o in orders]
    shipment = ProtobufSerializer(shipment_cls, client, {})(shipment_cls(id=9, carrier="ship"), context)
    records = [
        *(Record(str(o["id"]).encode(), with_id(f, text_id)) for o, f in zip(orders, framed, strict=True)),
        Record(b"shipment", with_id(shipment, text_id)),
        Record(b"broken", with_id(framed[0], bad_id)),
    ]
    producer.produce(kafka.bootstrap_servers, name, records)

    run(spark, topic, kafka.bootstrap_servers)

    rows = {r["_kafka"]["key"]: proto_row(r) for r in read_rows(Path(topic.parsed_path))}
    assert rows.pop(b"shipment") == {**{k: None for k in orders[0]}, "id": 9, "carrier": "ship"}
    assert rows == {str(o["id"]).encode(): o for o in orders}
    dead = read_rows(Path(topic.dead_letter_path))
    assert [(r["key"], r["reason"]) for r in dead] == [(b"broken", "undecodable")]
    assert f"schema id {bad_id} (subject '{name}-value')" in dead[0]["detail"]
    assert "does not compile: registry-schema-" in dead[0]["detail"]
    assert 'Field number 1 has already been used in "shop.Order" by field "id"' in dead[0]["detail"]
    # Kept with its descriptors: a replay compiles nothing and asks no registry.
    kept = json.loads(Path(topic.registry_schema_dir, f"{text_id}.json").read_text())
    assert kept["schema"] == ORDER_PROTO and kept["descriptors"]


def customer_files() -> tuple[Any, Any]:
    """``shop/customer.proto`` (a Customer) and ``shop/ordered.proto``, whose Ordered imports it."""
    from google.protobuf import descriptor_pb2

    F = descriptor_pb2.FieldDescriptorProto
    customer = descriptor_pb2.FileDescriptorProto(name="shop/customer.proto", package="shop", syntax="proto3")
    person = customer.message_type.add(name="Customer")
    person.field.add(name="name", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    person.field.add(name="vip", number=2, type=F.TYPE_BOOL, label=F.LABEL_OPTIONAL)
    ordered = descriptor_pb2.FileDescriptorProto(
        name="shop/ordered.proto", package="shop", syntax="proto3", dependency=["shop/customer.proto"]
    )
    message = ordered.message_type.add(name="Ordered")
    message.field.add(name="id", number=1, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    message.field.add(
        name="buyer", number=2, type=F.TYPE_MESSAGE, type_name=".shop.Customer", label=F.LABEL_OPTIONAL
    )
    return customer, ordered


def test_protobuf_schema_references_are_resolved(spark, kafka, registry, tmp_path):
    """A message importing another user .proto: confluent-kafka's serializer registers the imported
    file under its own subject and the message's schema with a reference to it; the job resolves
    it (kept beside the writer schemas). A text schema referencing that subject resolves too."""
    from confluent_kafka.schema_registry import SchemaReference
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from google.protobuf import descriptor_pool, message_factory

    name = "it-protobuf-references"
    producer.create_topic(kafka.bootstrap_servers, name, partitions=1)
    topic = replace(
        make_topic(tmp_path, name, ParsedConfig()), format="protobuf", registry_conn_id="it_registry"
    )
    client = SchemaRegistryClient({"url": registry.url})
    pool = descriptor_pool.DescriptorPool()
    for file in customer_files():
        pool.Add(file)
    ordered_cls = message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Ordered"))
    context = SerializationContext(name, MessageField.VALUE)
    framed = ProtobufSerializer(ordered_cls, client, {})
    values = [(i, f"buyer{i}", i % 2 == 1) for i in range(1, 4)]
    records = []
    for i, who, vip in values:
        message = ordered_cls(id=i)
        message.buyer.name, message.buyer.vip = who, vip
        records.append(Record(f"o{i}".encode(), framed(message, context)))
    writer_id = struct.unpack(">I", records[0].value[1:5])[0]
    registered = client.get_schema(writer_id)
    assert [(r.name, r.subject) for r in registered.references] == [
        ("shop/customer.proto", "shop/customer.proto")
    ]
    # The same file as text, referencing the subject the serializer registered (a hand's way).
    text = (
        'syntax = "proto3"; package shop; import "shop/customer.proto";'
        " message Ordered { int64 id = 1; Customer buyer = 2; string channel = 3; }"
    )
    reference = SchemaReference(
        "shop/customer.proto", "shop/customer.proto", registered.references[0].version
    )
    text_id = client.register_schema(f"{name}-text-value", Schema(text, "PROTOBUF", [reference]))
    records.append(Record(b"text", with_id(records[1].value, text_id)))
    producer.produce(kafka.bootstrap_servers, name, records)

    run(spark, topic, kafka.bootstrap_servers)

    rows = {
        r["_kafka"]["key"]: {k: v for k, v in r.items() if not k.startswith("_")}
        for r in read_rows(Path(topic.parsed_path))
    }
    expected = {
        f"o{i}".encode(): {"id": i, "buyer": {"name": who, "vip": vip}, "channel": None}
        for i, who, vip in values
    }
    assert rows == {**expected, b"text": {"id": 2, "buyer": {"name": "buyer2", "vip": False}, "channel": ""}}
    assert not Path(topic.dead_letter_path).exists() or read_rows(Path(topic.dead_letter_path)) == []
    kept = Path(topic.registry_schema_dir, "references", "shop%2Fcustomer.proto")
    assert [p.name for p in kept.iterdir()] == [f"{reference.version}.json"]
