"""Clashes between topics (kafkalake.config.location_clashes): a name, DAG id, table name or
location taken twice, counting every table of a topic, and a table inside another's location."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from kafkalake.config.catalog import load_catalog
from kafkalake.core.errors import CatalogError

from .catalog_helpers import CATALOGS, assert_names_where, write_catalog


def test_clash_keeps_the_first_topic_listed(lake_root):
    catalog = load_catalog(CATALOGS / "duplicate_topic.yaml", lake_root, strict=False)
    # The surviving `orders` is the first entry (6h), not the duplicate (1h).
    assert catalog.topic("orders").freshness_sla == timedelta(hours=6)


def test_clash_message_names_the_other_topic(lake_root):
    with pytest.raises(CatalogError) as excinfo:
        load_catalog(CATALOGS / "table_clash.yaml", lake_root)
    assert "'orders-v2'" in str(excinfo.value)


def test_same_location_spelled_with_a_trailing_slash_is_a_clash(tmp_path, lake_root):
    file = write_catalog(
        tmp_path,
        "topics:\n"
        "  - {name: orders, freshness_sla: 1h, path: /data/t}\n"
        "  - {name: events, freshness_sla: 1h, path: /data/t/}\n",
    )
    with pytest.raises(CatalogError) as excinfo:
        load_catalog(file, lake_root)
    assert excinfo.value.field == "path"


def test_topic_named_like_another_topics_dag_id_is_not_a_clash(tmp_path, lake_root):
    file = write_catalog(
        tmp_path,
        "topics:\n  - {name: orders, freshness_sla: 1h}\n  - {name: ingest_orders, freshness_sla: 1h}\n",
    )
    catalog = load_catalog(file, lake_root)
    assert {t.dag_id for t in catalog.topics} == {"ingest_orders", "ingest_ingest_orders"}


CLASHES = [
    # topics, the topic refused, its field, part of the message
    # A topic's own tables: bronze and parsed in one database under one name.
    (
        "{name: orders, freshness_sla: 1h, parsed: {database: bronze}}",
        "orders",
        "parsed.table",
        "'bronze.orders'",
    ),
    ("{name: orders, freshness_sla: 1h, database: silver}", "orders", "parsed.table", "set parsed.database"),
    # ... or a parsed table named like the topic's own dead-letter table.
    (
        "{name: orders, freshness_sla: 1h, table: x_dead_letter, parsed: {database: bronze, table: x}}",
        "orders",
        "parsed.table",
        "'bronze.x_dead_letter'",
    ),
    # An explicit path at a bucket's root would hold its own parsed tables and run history.
    ("{name: orders, freshness_sla: 1h, path: 's3a://bucket'}", "orders", "path", "bucket's root"),
    # Across topics: a bronze table named like another topic's parsed or latest table.
    (
        "{name: orders, freshness_sla: 1h}\n"
        "  - {name: events, freshness_sla: 1h, database: silver, table: orders, parsed: false}",
        "events",
        "table",
        "'silver.orders'",
    ),
    (
        "{name: orders, freshness_sla: 1h, parsed: {latest_by_key: true}}\n"
        "  - {name: events, freshness_sla: 1h, database: silver, table: orders_latest, parsed: false}",
        "events",
        "table",
        "'silver.orders_latest'",
    ),
    # Two topics' parsed tables.
    (
        "{name: orders, freshness_sla: 1h}\n  - {name: events, freshness_sla: 1h, parsed: {table: orders}}",
        "events",
        "parsed.table",
        "clashes with topic 'orders'",
    ),
    # A table inside another's location.
    (
        "{name: orders, freshness_sla: 1h, path: /data/t}\n"
        "  - {name: events, freshness_sla: 1h, path: /data/t/x}",
        "events",
        "path",
        "inside the table at '/data/t'",
    ),
    (
        "{name: orders, freshness_sla: 1h, path: /data/t/x}\n"
        "  - {name: events, freshness_sla: 1h, path: /data/t}",
        "events",
        "path",
        "would hold the table at '/data/t/x'",
    ),
]


@pytest.mark.parametrize(("topics", "topic", "field", "says"), CLASHES)
def test_clashes_among_all_tables(tmp_path, lake_root, topics, topic, field, says):
    file = write_catalog(tmp_path, f"topics:\n  - {topics}\n")
    with pytest.raises(CatalogError) as excinfo:
        load_catalog(file, lake_root)
    assert_names_where(excinfo.value, file, topic, field)
    assert says in str(excinfo.value)


def test_tables_that_are_off_do_not_clash(tmp_path, lake_root):
    file = write_catalog(
        tmp_path,
        """topics:
  - {name: orders, freshness_sla: 1h, database: silver, parsed: false}
  - {name: events, freshness_sla: 1h, database: silver, table: other_latest, parsed: {table: other}}
""",
    )
    assert [t.name for t in load_catalog(file, lake_root).topics] == ["events", "orders"]


@pytest.mark.parametrize(
    ("first", "second", "says"),
    [
        ("file:///data/t", "/data/t", "both give '/data/t'"),
        ("file://localhost/data/x/../t/", "/data/t", "both give '/data/t'"),
        ("file:///data", "/data/t", "would lie inside the table at '/data'"),
        ("S3A://b/t", "s3a://b/t", "both give 's3a://b/t'"),
    ],
)
def test_one_location_spelled_as_a_uri_and_as_a_path_is_a_clash(tmp_path, lake_root, first, second, says):
    # Both topics would write one table and one checkpoint: file:// is the local file system.
    file = write_catalog(
        tmp_path,
        f"topics:\n  - {{name: a, freshness_sla: 1h, path: '{first}'}}\n"
        f"  - {{name: b, freshness_sla: 1h, path: '{second}'}}\n",
    )
    with pytest.raises(CatalogError, match=re.escape(says)) as caught:
        load_catalog(file, lake_root)
    assert_names_where(caught.value, file, "b", "path")


def test_a_table_at_the_root_holds_every_other_local_table(tmp_path, lake_root):
    # VACUUM of a table at / would delete the files of every table under it.
    first = "  - {name: a, freshness_sla: 1h, path: /, parsed: false}\n"
    second = "  - {name: b, freshness_sla: 1h}\n"
    for text, topic, says in [
        (first + second, "b", f"'{lake_root}/bronze/b' would lie inside the table at '/'"),
        (second + first, "a", f"'/' would hold the table at '{lake_root}/bronze/b'"),
    ]:
        file = write_catalog(tmp_path, "topics:\n" + text)
        with pytest.raises(CatalogError, match=re.escape(says)) as caught:
            load_catalog(file, lake_root)
        assert_names_where(caught.value, file, topic, "path")
    file = write_catalog(tmp_path, "topics:\n  - {name: a, freshness_sla: 1h, path: /}\n")
    with pytest.raises(CatalogError, match="would lie inside the table at '/'"):
        load_catalog(file, lake_root)
