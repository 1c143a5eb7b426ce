"""Avro references inlined into one schema: checked with fastavro's own parser (the one
confluent-kafka's serializer uses) and by writing a record with the referencing schema's named
types and reading it back."""

from __future__ import annotations

import io
import json

import fastavro
import pytest

from kafkalake.core.errors import UnusableSchemaError
from kafkalake.kafka.avro_references import inline

CUSTOMER = {
    "type": "record",
    "name": "Customer",
    "namespace": "com.acme",
    "fields": [
        {"name": "name", "type": "string"},
        {"name": "tier", "type": {"type": "enum", "name": "Tier", "symbols": ["GOLD", "SILVER"]}},
    ],
}
ORDER = {
    "type": "record",
    "name": "Order",
    "namespace": "com.acme",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "buyer", "type": "com.acme.Customer"},
        # A later use of the same type, by its short name in the enclosing namespace.
        {"name": "payer", "type": ["null", "Customer"], "default": None},
        {"name": "tiers", "type": {"type": "array", "items": "com.acme.Tier"}},
    ],
}


def parses(text: str) -> dict:
    return fastavro.parse_schema(json.loads(text))


def roundtrip(schema_text: str, record: dict) -> dict:
    schema = parses(schema_text)
    out = io.BytesIO()
    fastavro.schemaless_writer(out, schema, record)
    out.seek(0)
    return fastavro.schemaless_reader(out, schema)


def test_a_referenced_record_is_defined_at_its_first_use_and_named_after():
    with pytest.raises(fastavro.schema.UnknownType):
        parses(json.dumps(ORDER))  # alone it does not parse: Customer is another subject's
    text = inline(json.dumps(ORDER), {"com.acme.Customer": json.dumps(CUSTOMER)})
    fields = {f["name"]: f["type"] for f in json.loads(text)["fields"]}
    assert fields["buyer"]["name"] == "Customer" and fields["buyer"]["namespace"] == "com.acme"
    assert fields["payer"] == ["null", "Customer"]  # defined once, then named
    assert fields["tiers"]["items"] == "com.acme.Tier"  # the reference's nested enum, defined inside it
    record = {
        "id": 7,
        "buyer": {"name": "ada", "tier": "GOLD"},
        "payer": {"name": "bob", "tier": "SILVER"},
        "tiers": ["GOLD"],
    }
    assert roundtrip(text, record) == record


def test_a_diamond_of_references_defines_the_shared_type_once():
    money = {"type": "fixed", "name": "Money", "size": 8}  # the null namespace
    line = {
        "type": "record",
        "name": "Line",
        "namespace": "shop",
        "fields": [{"name": "price", "type": money}],
    }
    tax = {"type": "record", "name": "shop.Tax", "fields": [{"name": "amount", "type": money}]}
    invoice = {
        "type": "record",
        "name": "Invoice",
        "namespace": "billing",
        "fields": [{"name": "line", "type": "shop.Line"}, {"name": "tax", "type": "shop.Tax"}],
    }
    text = inline(json.dumps(invoice), {"shop.Line": json.dumps(line), "shop.Tax": json.dumps(tax)})
    assert text.count('"name":"Money"') == 1
    record = {"line": {"price": b"12345678"}, "tax": {"amount": b"87654321"}}
    assert roundtrip(text, record) == record


def test_a_reference_without_a_namespace_keeps_its_full_name_inside_another_namespace():
    point = {"type": "record", "name": "Point", "fields": [{"name": "x", "type": "int"}]}
    shape = {
        "type": "record",
        "name": "Shape",
        "namespace": "geo",
        "fields": [{"name": "at", "type": ["null", "Point"]}],
    }
    text = inline(json.dumps(shape), {"Point": json.dumps(point)})
    at = json.loads(text)["fields"][0]["type"][1]
    assert at["name"] == "Point" and at["namespace"] == ""  # not geo.Point
    assert roundtrip(text, {"at": {"x": 3}}) == {"at": {"x": 3}}


def test_no_references_leaves_the_schema_as_it_is_and_inlining_twice_changes_nothing():
    text = json.dumps(ORDER)
    assert inline(text, {}) == text
    once = inline(text, {"com.acme.Customer": json.dumps(CUSTOMER)})
    assert inline(once, {"com.acme.Customer": json.dumps(CUSTOMER)}) == once


@pytest.mark.parametrize(
    ("referenced", "words"),
    [
        ('"string"', "is not a named Avro type"),
        ('{"type": "array", "items": "int"}', "is not a named Avro type"),
        ("{not json", "is not an Avro schema"),
    ],
)
def test_a_reference_that_defines_no_named_type_is_refused_naming_it(referenced, words):
    with pytest.raises(UnusableSchemaError, match=f"reference 'com.acme.Customer' {words}"):
        inline(json.dumps(ORDER), {"com.acme.Customer": referenced})
