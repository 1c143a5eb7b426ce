"""The Python decoder of ``format: protobuf`` on the shared vectors (protobuf_vectors.py): the JSON
byte for byte, the dead letters' reasons and details. The JVM decoder runs the same vectors in
tests/integration/test_protobuf_decode.py."""

from __future__ import annotations

import json

import pytest

from kafkalake.kafka import protobuf_schema
from kafkalake.kafka.schema_registry import RegisteredSchema
from kafkalake.spark.protobuf_parser import _decode_one

from .protobuf_vectors import ALL, Vector, doubles_payload, random_doubles, schemas, vectors


def _writer(sid: int) -> RegisteredSchema:
    return RegisteredSchema(sid, "", "PROTOBUF", descriptors=schemas()[sid])


@pytest.mark.parametrize("vector", vectors(), ids=lambda v: v.case)
def test_the_python_decoder_gives_each_vector_s_result(vector: Vector) -> None:
    got = _decode_one(_writer(vector.schema_id), vector.schema_id, vector.payload)
    assert got == (vector.name, vector.json, vector.reason, vector.detail)


def test_the_json_reads_back_as_the_values() -> None:
    # The text is JSON (NaN quoted), and a few values read back as written.
    every = json.loads(vectors()[0].json or "")
    assert every["f_uint64"] == 2**64 - 1 and every["by_flag"] == {"False": "no", "True": "yes"}
    assert every["doubles"][5] == 5e-324


def test_random_doubles_print_as_python_s_repr() -> None:
    values = random_doubles(11, 300)
    _, text = protobuf_schema.decode(schemas()[ALL], doubles_payload(values))
    assert text.endswith(f'"doubles": [{", ".join(repr(v) for v in values)}]}}')


def test_an_error_the_decoder_was_not_expected_to_raise_is_the_record_s_dead_letter(monkeypatch) -> None:
    def broken(schema: str, payload: bytes) -> tuple[str, str]:
        raise RecursionError("too deep")

    monkeypatch.setattr(protobuf_schema, "decode", broken)
    assert _decode_one(_writer(ALL), ALL, b"\x00") == (
        None,
        None,
        "undecodable",
        f"the payload does not decode with writer schema id {ALL}: RecursionError: too deep",
    )
