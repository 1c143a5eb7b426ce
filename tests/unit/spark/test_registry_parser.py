"""The pure parts of the registry formats' decoding (kafkalake.spark.registry_parser): the reader
schema it decodes with, and the table type it derives."""

from __future__ import annotations

import json

from kafkalake.spark.registry_parser import DECODED_MARK, nullable_everywhere, widened, with_decoded_mark

V1 = {
    "type": "record",
    "name": "Order",
    "fields": [{"name": "id", "type": "long"}, {"name": "note", "type": ["string", "null"]}],
}
V2 = {
    "type": "record",
    "name": "Order",
    "fields": [{"name": "id", "type": "long"}, {"name": "sku", "type": "string"}],
}


def test_the_reader_keeps_the_fields_writers_have_and_it_dropped_as_optional():
    reader = json.loads(widened(json.dumps(V2), [json.dumps(V1), json.dumps(V2)]))
    assert reader["fields"] == [
        *V2["fields"],
        {"name": "note", "type": ["null", "string"], "default": None},
    ]
    assert widened(json.dumps(V1), [json.dumps(V1)]) == json.dumps(V1)  # nothing to add: as registered
    assert widened('"string"', [json.dumps(V1)]) == '"string"'


def test_the_decoded_mark_is_a_field_every_resolution_fills_in():
    marked = json.loads(with_decoded_mark(json.dumps(V1)))
    assert marked["fields"][-1] == {"name": DECODED_MARK, "type": "boolean", "default": True}
    assert marked["fields"][:-1] == V1["fields"]


def test_the_table_type_is_nullable_at_every_depth():
    spark_type = {
        "type": "struct",
        "fields": [
            {
                "name": "items",
                "type": {
                    "type": "array",
                    "elementType": {
                        "type": "struct",
                        "fields": [{"name": "qty", "type": "integer", "nullable": False, "metadata": {}}],
                    },
                    "containsNull": False,
                },
                "nullable": False,
                "metadata": {},
            },
            {
                "name": "attrs",
                "type": {"type": "map", "keyType": "string", "valueType": "long", "valueContainsNull": False},
                "nullable": False,
                "metadata": {},
            },
        ],
    }
    table = nullable_everywhere(spark_type)
    items, attrs = table["fields"]
    assert items["nullable"] and items["type"]["containsNull"]
    assert items["type"]["elementType"]["fields"][0]["nullable"]
    assert attrs["nullable"] and attrs["type"]["valueContainsNull"]
