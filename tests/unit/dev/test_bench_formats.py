"""bench --format avro: the Avro events are the JSON events, field for field, type for type."""

from __future__ import annotations

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


def test_the_registry_settings_file_is_private_and_read_once(tmp_path: Path) -> None:
    env = bench_formats.registry_handover(tmp_path, "http://127.0.0.1:1/apis/ccompat/v7")
    path = Path(env[ENV_REGISTRY_CONFIG_FILE])
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_file(path).url == "http://127.0.0.1:1/apis/ccompat/v7"
    assert not path.exists()
