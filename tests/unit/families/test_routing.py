"""A pattern routed to a table per topic (`topic_pattern` + `table_per_topic`): the name mapping, two
topics mapping to one table, the discovery file (written whole, a broken one named), and the catalog
expanding the entry into one single-topic entry per discovered topic."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from kafkalake.config.catalog import load_catalog
from kafkalake.config.routing import (
    Discovered,
    discovery_file,
    discovery_text,
    read_discovered,
    route_name,
    route_tables,
    table_for,
    template_problem,
    write_discovered,
)
from kafkalake.core.errors import CatalogError

from ..config.catalog_helpers import assert_names_where, write_catalog

pytestmark = pytest.mark.families

PATTERN = r"shop\.public\.(.*)"
ROUTED = r"""
topics:
  - topic_pattern: 'shop\.public\.(.*)'
    table_per_topic: 'shop_\1'
    freshness_sla: 15m
    parsed: {latest_by_key: true}
  - name: payments
    freshness_sla: 6h
"""
NOW = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)


def test_a_topic_maps_to_the_template_with_its_groups_made_a_table_name():
    assert table_for(PATTERN, r"shop_\1", "shop.public.customers") == "shop_customers"
    assert table_for(PATTERN, r"shop_\1", "shop.public.Order-Lines") == "shop_order_lines"
    assert table_for(r"(\d+)-events", r"\1", "2026-events") == "t_2026"
    # The whole name must match, as with Spark's subscribePattern; Kafka's own topics never do.
    assert table_for(PATTERN, r"shop_\1", "shop.public.customers.dlq.x") == "shop_customers_dlq_x"
    assert table_for(PATTERN, r"shop_\1", "old.shop.public.customers") is None
    assert table_for(r"(.*)", r"t_\1", "__consumer_offsets") is None


def test_the_routes_name_is_the_templates_literal_part():
    assert route_name(r"shop_\1") == "shop"
    assert route_name(r"cdc_\1_\2_v2") == "cdc_v2"
    assert route_name(r"\1") == "routed"


@pytest.mark.parametrize(
    ("template", "words"),
    [
        ("shop_all", "uses no group"),
        (r"shop_\2", "refers to group 2, and topic_pattern has 1"),
        (r"shop \1", "only letters"),
        ("", "must be a table name"),
        (7, "must be a table name"),
    ],
)
def test_a_template_that_cannot_name_a_table_per_topic_is_refused(template, words):
    problem = template_problem(template, PATTERN)
    assert problem is not None and words in problem


def test_two_topics_mapping_to_one_table_are_refused_naming_both():
    with pytest.raises(ValueError) as raised:
        route_tables(PATTERN, r"shop_\1", ["shop.public.a-b", "shop.public.a_b", "other"])
    message = str(raised.value)
    assert "'shop.public.a-b'" in message and "'shop.public.a_b'" in message and "'shop_a_b'" in message


def test_route_tables_keeps_only_matching_topics_in_order():
    topics = ["shop.public.b", "x", "shop.public.a"]
    assert route_tables(PATTERN, r"shop_\1", topics) == {"shop.public.a": "shop_a", "shop.public.b": "shop_b"}


def test_the_discovery_record_keeps_topics_kafka_lost_and_lists_them_missing(tmp_path):
    before = Discovered(("shop.public.a", "shop.public.gone"))
    text, record = discovery_text(["shop.public.a", "shop.public.new"], before, NOW)
    assert record.topics == ("shop.public.a", "shop.public.gone", "shop.public.new")
    assert record.missing == ("shop.public.gone",)
    file = tmp_path / "d" / "shop.json"
    write_discovered(file, text)
    assert read_discovered(file, tmp_path / "c.yaml", "shop") == record
    assert [p.name for p in file.parent.iterdir()] == ["shop.json"]  # no temporary file left
    assert json.loads(file.read_text())["version"] == 1


def test_no_discovery_file_yet_is_no_topic(tmp_path):
    assert read_discovered(tmp_path / "none.json", tmp_path / "c.yaml", "shop") == Discovered(())


@pytest.mark.parametrize(
    "text",
    ["{not json", "[]", '{"version": 1}', '{"version": 2, "topics": []}', '{"version": 1, "topics": [3]}'],
)
def test_a_broken_discovery_file_is_a_clear_error_naming_it_and_the_entry(tmp_path, text):
    file = tmp_path / "shop.json"
    file.write_text(text)
    with pytest.raises(CatalogError) as raised:
        read_discovered(file, tmp_path / "c.yaml", "shop")
    assert_names_where(raised.value, tmp_path / "c.yaml", "shop", "table_per_topic")
    assert str(file) in str(raised.value) and "discover_shop" in str(raised.value)


def record(catalog, topics):
    text, _ = discovery_text(topics, Discovered(()), NOW)
    write_discovered(discovery_file(catalog.parent / "lake", catalog, "shop"), text)


def test_a_routed_entry_has_a_route_and_no_topic_until_discovered(tmp_path):
    file = write_catalog(tmp_path, ROUTED)
    catalog = load_catalog(file, tmp_path / "lake")
    assert [t.name for t in catalog.topics] == ["payments"]
    (route,) = catalog.routes
    assert (route.name, route.dag_id, route.topic_pattern) == ("shop", "discover_shop", PATTERN)
    assert route.discovery_file == tmp_path / "lake" / "_discovered" / "catalog" / "shop.json"


def test_each_discovered_topic_is_an_ordinary_single_topic_entry_with_its_table(tmp_path):
    file = write_catalog(tmp_path, ROUTED)
    record(file, ["shop.public.customers", "shop.public.orders"])
    catalog = load_catalog(file, tmp_path / "lake")
    customers = catalog.topic("shop.public.customers")
    assert not customers.is_family and customers.table == "shop_customers"
    assert customers.dag_id == "ingest_shop_public_customers"
    assert customers.path == str(tmp_path / "lake" / "bronze" / "shop_customers")
    assert customers.latest_path.endswith("/silver/shop_customers_latest")
    assert catalog.topic("shop.public.orders").table == "shop_orders"


def test_a_broken_discovery_file_leaves_the_route_and_the_other_topics(tmp_path):
    file = write_catalog(tmp_path, ROUTED)
    discovery_file(tmp_path / "lake", file, "shop").parent.mkdir(parents=True)
    discovery_file(tmp_path / "lake", file, "shop").write_text("{oops")
    catalog = load_catalog(file, tmp_path / "lake", strict=False)
    assert [t.name for t in catalog.topics] == ["payments"] and [r.name for r in catalog.routes] == ["shop"]
    (error,) = catalog.errors
    assert error.field == "table_per_topic" and "is broken" in str(error)
    with pytest.raises(CatalogError):
        load_catalog(file, tmp_path / "lake")


@pytest.mark.parametrize(
    ("extra", "field", "words"),
    [
        ("    table: shop\n", "table", "leave table out"),
        ("    path: /data/x\n", "path", "leave path out"),
        ("    parsed: {table: x}\n", "parsed.table", "leave it out"),
        ("    freshness_sla: soon\n", "freshness_sla", "not a duration"),
    ],
)
def test_a_bad_routed_entry_names_file_entry_and_field(tmp_path, extra, field, words):
    text = "topics:\n  - topic_pattern: 'shop\\.public\\.(.*)'\n    table_per_topic: 'shop_\\1'\n" + extra
    if "freshness_sla" not in extra:
        text += "    freshness_sla: 1h\n"
    file = write_catalog(tmp_path, text)
    with pytest.raises(CatalogError) as raised:
        load_catalog(file, tmp_path)
    assert raised.value.field == field and words in str(raised.value)
    assert str(file) in str(raised.value)


def test_a_routed_topics_table_may_not_clash_with_another_entrys(tmp_path):
    file = write_catalog(tmp_path, ROUTED + "  - name: x\n    table: shop_customers\n    freshness_sla: 1h\n")
    record(file, ["shop.public.customers"])
    with pytest.raises(CatalogError) as raised:
        load_catalog(file, tmp_path / "lake")
    assert "shop_customers" in str(raised.value)
