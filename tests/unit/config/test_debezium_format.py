"""`format: debezium` on a catalog entry: its tables, and what it refuses, named by file, topic, field."""

from __future__ import annotations

import pytest

from kafkalake.config.catalog import load_catalog
from kafkalake.config.tables import topic_tables
from kafkalake.core.errors import CatalogError

from .catalog_helpers import assert_names_where, write_catalog


def _entry(extra: str = "") -> str:
    return f"topics:\n  - name: shop.public.customers\n    freshness_sla: 1h\n    format: debezium\n{extra}"


def test_a_debezium_topic_has_a_current_state_table_beside_its_change_history(tmp_path):
    topic = load_catalog(write_catalog(tmp_path, _entry()), tmp_path / "lake").topic("shop.public.customers")
    assert topic.parsed.debezium and topic.parsed.format == "debezium"
    # Its tombstones (after each delete) are tombstones, not dead letters; no latest-row table.
    assert topic.parsed.changelog and not topic.parsed.latest_by_key
    kinds = {t.kind: t for t in topic_tables(topic)}
    assert set(kinds) == {"bronze", "parsed", "dead_letter", "current"}
    assert kinds["current"].location == f"{topic.parsed_path}_current"
    assert kinds["current"].name == "silver.shop_public_customers_current"


def test_a_json_topic_has_no_current_state_table(tmp_path):
    text = "topics:\n  - {name: orders, freshness_sla: 1h, format: json}\n"
    topic = load_catalog(write_catalog(tmp_path, text), tmp_path / "lake").topic("orders")
    assert not topic.parsed.debezium
    assert "current" not in {t.kind for t in topic_tables(topic)}


@pytest.mark.parametrize(
    ("extra", "field", "words"),
    [
        ("    parsed: false\n", "format", "needs the parsed tables"),
        ("    parsed: {latest_by_key: true}\n", "parsed.latest_by_key", "current state"),
    ],
)
def test_what_a_debezium_topic_refuses(tmp_path, extra, field, words):
    file = write_catalog(tmp_path, _entry(extra))
    with pytest.raises(CatalogError, match=words) as err:
        load_catalog(file, tmp_path / "lake")
    assert_names_where(err.value, file, "shop.public.customers", field)


def test_an_unknown_format_is_refused_naming_the_formats(tmp_path):
    file = write_catalog(tmp_path, "topics:\n  - {name: orders, freshness_sla: 1h, format: xml}\n")
    with pytest.raises(CatalogError, match=r"json, debezium, avro, protobuf, json_schema, not .xml.") as err:
        load_catalog(file, tmp_path / "lake")
    assert_names_where(err.value, file, "orders", "format")
