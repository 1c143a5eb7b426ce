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
from pathlib import Path
from typing import Any

import fastavro
import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
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
from kafkalake.launch.job_host import ENV_JOB_HOST

from .helpers import PsWatcher, assert_exactly_once, files_containing, make_topic, read_rows
from .helpers import run_ingest as run
from .registry_helpers import (
    ORDER_V1,
    ORDER_V2,
    as_message,
    as_produced,
    avro_topic,
    order,
    order_classes,
    proto_order,
    proto_row,
    serialized,
)

pytestmark = [pytest.mark.integration, pytest.mark.registry]


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


def test_avro_schema_references_are_inlined_into_one_schema(spark, kafka, registry, tmp_path):
    """A schema that uses named types another subject defines (Confluent's schema references),
    registered by confluent-kafka's AvroSerializer: each record lands decoded, the referenced
    types' fields as nested columns; the writer schema kept for replays is self-contained."""
    from confluent_kafka.schema_registry import SchemaReference

    name = "it-avro-references"
    topic = avro_topic(kafka, tmp_path, name, partitions=1)
    customer = {
        "type": "record",
        "name": "Customer",
        "namespace": "com.acme.people",
        "fields": [
            {"name": "name", "type": "string"},
            {"name": "tier", "type": {"type": "enum", "name": "Tier", "symbols": ["GOLD", "SILVER"]}},
        ],
    }
    order_schema = {
        "type": "record",
        "name": "Order",
        "namespace": "com.acme.shop",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "buyer", "type": "com.acme.people.Customer"},
            {"name": "payer", "type": ["null", "com.acme.people.Customer"], "default": None},
            {"name": "tiers", "type": {"type": "array", "items": "com.acme.people.Tier"}},
        ],
    }
    client = SchemaRegistryClient({"url": registry.url})
    version = client.register_schema("com.acme.people.Customer", Schema(json.dumps(customer), "AVRO"))
    assert version > 0
    reference = SchemaReference("com.acme.people.Customer", "com.acme.people.Customer", 1)
    serialize = AvroSerializer(client, Schema(json.dumps(order_schema), "AVRO", [reference]))
    context = SerializationContext(name, MessageField.VALUE)
    orders = [
        {
            "id": i,
            "buyer": {"name": f"b{i}", "tier": "GOLD"},
            "payer": None if i % 2 else {"name": f"p{i}", "tier": "SILVER"},
            "tiers": ["GOLD", "SILVER"][: i % 3],
        }
        for i in range(1, 5)
    ]
    producer.produce(
        kafka.bootstrap_servers, name, [Record(str(o["id"]).encode(), serialize(o, context)) for o in orders]
    )
    # Registered with its reference: alone, the writer schema names a type it does not define.
    schema_id = client.get_latest_version(f"{name}-value").schema_id
    assert client.get_schema(schema_id).references[0].subject == "com.acme.people.Customer"

    run(spark, topic, kafka.bootstrap_servers)

    rows = read_rows(Path(topic.parsed_path))
    assert (
        sorted(({k: v for k, v in r.items() if not k.startswith("_")} for r in rows), key=lambda r: r["id"])
        == orders
    )
    assert not Path(topic.dead_letter_path).exists() or read_rows(Path(topic.dead_letter_path)) == []
    kept = json.loads((Path(topic.registry_schema_dir) / f"{schema_id}.json").read_text())
    fastavro.parse_schema(json.loads(kept["schema"]))  # self-contained: parses with no named types given


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


def test_dag_runs_of_each_format_land_their_values_and_leave_the_secrets_nowhere(
    kafka: Any, registry: LocalRegistry, pki: Pki, mtls_registry: str, tmp_path: Path
) -> None:
    """A whole DAG run (``airflow dags test``: the ingest task hands the registry connection to its
    spark-submit job, then the follow-ups) of an Avro, a Protobuf and a JSON Schema topic, each
    produced by confluent-kafka's own serializer: every record in its parsed table once, with the
    values produced. Over mutual TLS, the connection's password a canary and its client key a
    secret: neither in a command line (``ps``), the runs' output, anything under AIRFLOW_HOME (task
    logs, the metadata DB: XCom, rendered fields, serialized DAGs), the lake or the runs' temp
    folder, where the job's key file and protoc's folder are gone too."""
    from confluent_kafka.schema_registry.json_schema import JSONSerializer
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

    canary = f"canary{uuid.uuid4().hex}"
    certificate, key = pki.client(PIPELINE_USER).pem()
    key_line = key.splitlines()[1]  # 64 characters of the key itself
    names = {"avro": "it-avro-handover", "protobuf": "it-protobuf-dag", "json_schema": "it-json-schema-dag"}
    for name in names.values():
        producer.create_topic(kafka.bootstrap_servers, name, partitions=1)
    orders = [order(i) for i in range(1, 4)]
    producer.produce(
        kafka.bootstrap_servers, names["avro"], serialized(registry.url, names["avro"], ORDER_V1, orders)
    )
    client = SchemaRegistryClient({"url": registry.url})
    order_cls, _ = order_classes()
    # Orders only: no Shipment shares this table, so it has no Shipment's carrier column.
    proto_orders = [{k: v for k, v in proto_order(i).items() if k != "carrier"} for i in range(1, 4)]
    to_protobuf = ProtobufSerializer(order_cls, client, {"use.deprecated.format": False})
    context = SerializationContext(names["protobuf"], MessageField.VALUE)
    producer.produce(
        kafka.bootstrap_servers,
        names["protobuf"],
        [Record(str(o["id"]).encode(), to_protobuf(as_message(order_cls, o), context)) for o in proto_orders],
    )
    events = [{"id": i, "tags": [f"t{i}"] * i} for i in range(1, 4)]
    event_schema = {"type": "object", "properties": {"id": {"type": "integer"}, "tags": {"type": "array"}}}
    to_json = JSONSerializer(json.dumps(event_schema), client)
    context = SerializationContext(names["json_schema"], MessageField.VALUE)
    producer.produce(
        kafka.bootstrap_servers,
        names["json_schema"],
        [Record(str(e["id"]).encode(), to_json(e, context)) for e in events],
    )
    paths = {part: tmp_path / part for part in ("lake", "airflow", "tmp")}
    for path in paths.values():
        path.mkdir()
    catalog = tmp_path / "topics.yaml"
    # JSON Schema's values are read after their frame, without the registry (the catalog refuses a
    # registry_conn_id there).
    entries = "".join(
        f"  - name: {name}\n    freshness_sla: 1h\n    format: {fmt}\n"
        + ("" if fmt == "json_schema" else "    registry_conn_id: it_schemas\n")
        for fmt, name in names.items()
    )
    catalog.write_text(f"topics:\n{entries}")
    env = local_airflow.environment(
        paths["airflow"], kafka_bootstrap=kafka.bootstrap_servers, catalog=catalog, lake_root=paths["lake"]
    )
    # spark-submit, not the worker's job host: what ps shows and what the runs leave behind is checked.
    env.pop(ENV_JOB_HOST, None)
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
    topics = {fmt: load_catalog(catalog, paths["lake"]).topic(name) for fmt, name in names.items()}
    with local_airflow.served_home(env) as served, PsWatcher() as ps:
        # The Avro topic's run does its follow-ups too (a first run's registration: one more JVM);
        # the others' are marked done, the registry is the ingest's alone.
        runs = {
            fmt: local_airflow.test_dag(
                served,
                topic.dag_id,
                sync=False,
                mark_success=None if fmt == "avro" else "register_table|maintain_table",
            )
            for fmt, topic in topics.items()
        }

    home = paths["airflow"]
    for fmt, dag_run in runs.items():
        assert dag_run.task_states["ingest"] == "success", (fmt, dag_run.task_states)
        assert local_airflow.xcom_value(home, dag_run, "ingest", "run_metrics")["parsed_rows"] == 3, fmt
    rows = {fmt: read_rows(Path(topic.parsed_path)) for fmt, topic in topics.items()}
    assert sorted((as_produced(r) for r in rows["avro"]), key=lambda r: r["id"]) == orders
    assert sorted((proto_row(r) for r in rows["protobuf"]), key=lambda r: r["id"]) == proto_orders
    plain = [{k: v for k, v in r.items() if not k.startswith("_")} for r in rows["json_schema"]]
    assert sorted(plain, key=lambda r: r["id"]) == events
    assert any("ingest_topic.py" in line for line in ps.lines), "ps never saw the job"
    output = "".join(dag_run.output for dag_run in runs.values())
    for secret in (canary, key_line):
        assert ps.samples > 5 and not [line for line in ps.lines if secret in line]
        assert secret not in output
        for where in paths.values():
            assert files_containing(where, secret) == [], where
    assert list(paths["tmp"].glob("kafkalake-secrets-*/*")) == []  # the settings file read and deleted
    assert list(paths["tmp"].glob("kafkalake-registry-tls-*")) == []  # the key file loaded and deleted
    assert list(paths["tmp"].glob("kafkalake-protoc-*")) == []


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
