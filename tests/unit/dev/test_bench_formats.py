"""bench --format avro | protobuf: the Avro and Protobuf events are the JSON events, field for field,
type for type."""

from __future__ import annotations

import base64
import io
import json
import random
import stat
from pathlib import Path

import fastavro

from kafkalake.dev import bench_backlog, bench_formats
from kafkalake.kafka.schema_registry import ENV_REGISTRY_CONFIG_FILE, load_file


def test_the_avro_schema_carries_every_field_of_the_json_event_with_its_value() -> None:
    schema = fastavro.parse_schema(bench_formats.EVENT_SCHEMA)
    for i in (0, 7, 123_456):
        event = bench_backlog.event(i, random.Random(i))
        out = io.BytesIO()
        fastavro.schemaless_writer(out, schema, event)
        out.seek(0)
        assert fastavro.schemaless_reader(out, schema) == event
        assert json.loads(bench_backlog.event_value(i, random.Random(i))) == event


def test_the_protobuf_message_carries_every_field_of_the_json_event_with_its_value() -> None:
    from google.protobuf import descriptor_pool, json_format, message_factory

    from kafkalake.kafka import protobuf_schema
    from kafkalake.kafka.schema_registry import RegisteredSchema

    pool = descriptor_pool.DescriptorPool()
    pool.Add(bench_formats.event_file())
    cls = message_factory.GetMessageClass(pool.FindMessageTypeByName("kafkalake.bench.BenchEvent"))
    as_registered = base64.b64encode(bench_formats.event_file().SerializeToString()).decode()
    descriptors = protobuf_schema.resolve(RegisteredSchema(1, as_registered, "PROTOBUF"), lambda ref: None)
    for i in (0, 7, 123_456):
        event = bench_backlog.event(i, random.Random(i))
        message = cls(**event)
        assert json_format.MessageToDict(message, preserving_proto_field_name=True) == {
            **event,
            "ts": str(event["ts"]),  # json_format quotes int64
        }
        # What the job decodes (message index [0], the message): the event, ts a number.
        name, text = protobuf_schema.decode(descriptors, b"\x00" + message.SerializeToString())
        assert (name, json.loads(text)) == ("kafkalake.bench.BenchEvent", event)


def test_the_avro_entry_is_the_json_one_in_the_registry_format() -> None:
    entry = {"name": "bench-10-p1", "freshness_sla": "1h", "spark_conf": {"a": "b"}, "parsed": False}
    avro = bench_formats.registry_entry(entry, "bench-avro-10-p1")
    assert avro == {
        **entry,
        "name": "bench-avro-10-p1",
        "format": "avro",
        "registry_conn_id": bench_formats.REGISTRY_CONN_ID,
        "parsed": True,
    }
    protobuf = bench_formats.registry_entry(entry, "bench-protobuf-10-p1", "protobuf")
    assert protobuf == {**avro, "name": "bench-protobuf-10-p1", "format": "protobuf"}


def test_the_registry_settings_file_is_private_and_read_once(tmp_path: Path) -> None:
    env = bench_formats.registry_handover(tmp_path, "http://127.0.0.1:1/apis/ccompat/v7")
    path = Path(env[ENV_REGISTRY_CONFIG_FILE])
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_file(path).url == "http://127.0.0.1:1/apis/ccompat/v7"
    assert not path.exists()
