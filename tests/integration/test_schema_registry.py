"""Topics written in a schema registry's wire format, against a real registry (Apicurio, started by
the project: kafkalake.dev.schema_registry) spoken to through its Confluent-compatible API.

The records are produced with confluent-kafka's own serializers.
"""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Iterator

import fastavro
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from kafkalake.dev.schema_registry import LocalRegistry

pytestmark = [pytest.mark.integration, pytest.mark.registry]


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRegistry]:
    """One registry for the module, in memory: each test registers under subjects of its own."""
    server = LocalRegistry(tmp_path_factory.mktemp("registry")).start()
    yield server
    server.stop()


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
