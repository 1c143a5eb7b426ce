"""The topic catalog: YAML in, validated TopicConfig objects out; every error names file, topic,
field. Loading a catalog: defaults, strict and lenient modes, files that cannot be used, one topic
for a job."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from kafkalake.config.catalog import load_catalog, load_topic
from kafkalake.config.parsed import ParsedConfig
from kafkalake.core.errors import CatalogError
from kafkalake.core.paths import REPO_ROOT

from .catalog_helpers import CATALOGS, assert_names_where, write_catalog


def test_good_catalog_loads_every_topic_sorted_by_name(good):
    assert [t.name for t in good.topics] == ["clickstream", "orders-v2", "payments"]
    assert good.errors == ()
    assert good.file == CATALOGS / "good.yaml"


def test_defaults_apply_to_every_topic_and_topic_fields_override_them(good):
    clicks, orders, payments = (good.topic(n) for n in ("clickstream", "orders-v2", "payments"))
    # From defaults, on every topic.
    assert {t.kafka_conn_id for t in good.topics} == {"kafka_prod"}
    assert payments.owner == orders.owner == "team-data"
    assert payments.database == clicks.database == "raw"
    assert payments.max_offsets_per_trigger == orders.max_offsets_per_trigger == 5000
    assert payments.tags == clicks.tags == ("from-defaults",)
    # Overridden by the topic, including an override to null.
    assert clicks.owner == "web-team"
    assert orders.database == "bronze"
    assert clicks.max_offsets_per_trigger is None
    assert orders.tags == ("orders", "pii")


def test_fields_not_given_take_the_documented_defaults(good):
    payments = good.topic("payments")
    assert payments.starting_offsets == "earliest"
    assert payments.fail_on_data_loss is True
    assert payments.spark_conf == ()
    assert good.topic("clickstream").starting_offsets == "latest"
    assert good.topic("orders-v2").fail_on_data_loss is False


def test_unknown_topic_raises_naming_the_known_ones(good):
    with pytest.raises(CatalogError) as excinfo:
        good.topic("missing")
    message = str(excinfo.value)
    assert "'missing'" in message
    assert "clickstream, orders-v2, payments" in message
    assert str(CATALOGS / "good.yaml") in message


def test_unknown_topic_in_an_empty_catalog(tmp_path, lake_root):
    catalog = load_catalog(write_catalog(tmp_path, "topics: []\n"), lake_root)
    assert catalog.topics == ()
    with pytest.raises(CatalogError, match="known: none"):
        catalog.topic("orders")


def test_shipped_catalog_is_valid(lake_root):
    catalog = load_catalog(REPO_ROOT / "include" / "topics.yaml", lake_root)
    assert catalog.topics
    assert len({t.dag_id for t in catalog.topics}) == len(catalog.topics)


TOPIC_ERRORS = [
    # file, topic, field, part of the message, topics kept in lenient mode
    ("bad_sla.yaml", "events", "freshness_sla", "units: s, m, h, d, w", ["orders"]),
    ("short_sla.yaml", "events", "freshness_sla", "at least 3m", ["orders"]),
    ("missing_sla.yaml", "events", "freshness_sla", "required", ["orders"]),
    ("missing_name.yaml", "#2", "name", "required", ["orders"]),
    ("bad_topic_name.yaml", "orders/v2", "name", "Kafka topic name", ["orders"]),
    ("unknown_field.yaml", "events", "max_offset_per_trigger", "unknown field", ["orders"]),
    ("bad_starting_offsets.yaml", "events", "starting_offsets", "'beginning'", ["orders"]),
    ("bad_spark_conf.yaml", "events", "spark_conf", "'spark.'", ["orders"]),
    ("credential_in_spark_conf.yaml", "events", "spark_conf", "credential provider", ["orders"]),
    ("bad_fail_on_data_loss.yaml", "events", "fail_on_data_loss", "true or false", ["orders"]),
    ("bad_database.yaml", "events", "database", "'Bronze-Raw'", ["orders"]),
    ("bad_path.yaml", "events", "path", "non-empty", ["orders"]),
    ("bad_tags.yaml", "events", "tags", "list of strings", ["orders"]),
    ("bad_sla_webhook.yaml", "events", "sla_webhook_conn_id", "HTTP connection", ["orders"]),
    ("duplicate_topic.yaml", "orders", "name", "listed twice", ["events", "orders"]),
    ("table_clash.yaml", "orders_v2", "name", "'ingest_orders_v2'", ["events", "orders-v2"]),
    ("table_name_clash.yaml", "orders-archive", "table", "'bronze.orders'", ["events", "orders"]),
    ("path_clash.yaml", "events", "path", "'/data/shared'", ["clicks", "orders"]),
]


@pytest.mark.parametrize(("file", "topic", "field", "says", "kept"), TOPIC_ERRORS)
def test_strict_mode_raises_naming_file_topic_and_field(lake_root, file, topic, field, says, kept):
    path = CATALOGS / file
    with pytest.raises(CatalogError) as excinfo:
        load_catalog(path, lake_root)
    assert_names_where(excinfo.value, path, topic, field)
    assert says in str(excinfo.value)


@pytest.mark.parametrize(("file", "topic", "field", "says", "kept"), TOPIC_ERRORS)
def test_lenient_mode_keeps_good_topics_and_collects_the_error(lake_root, file, topic, field, says, kept):
    path = CATALOGS / file
    catalog = load_catalog(path, lake_root, strict=False)
    assert [t.name for t in catalog.topics] == kept
    assert len(catalog.errors) == 1
    assert_names_where(catalog.errors[0], path, topic, field)
    assert says in str(catalog.errors[0])


def test_bad_max_offsets_strict_raises_on_the_first(lake_root):
    path = CATALOGS / "bad_max_offsets.yaml"
    with pytest.raises(CatalogError) as excinfo:
        load_catalog(path, lake_root)
    assert_names_where(excinfo.value, path, "zero", "max_offsets_per_trigger")


def test_bad_max_offsets_lenient_collects_each(lake_root):
    path = CATALOGS / "bad_max_offsets.yaml"
    catalog = load_catalog(path, lake_root, strict=False)
    assert [t.name for t in catalog.topics] == ["orders"]
    assert catalog.topic("orders").max_offsets_per_trigger == 1
    assert [(e.topic, e.field) for e in catalog.errors] == [
        ("zero", "max_offsets_per_trigger"),
        ("negative", "max_offsets_per_trigger"),
        ("boolean", "max_offsets_per_trigger"),
        ("text", "max_offsets_per_trigger"),
    ]
    for err, shown in zip(catalog.errors, ["0", "-1", "True", "'abc'"], strict=True):
        assert_names_where(err, path, err.topic, "max_offsets_per_trigger")
        assert str(err).endswith(f"not {shown}")


FILE_ERRORS = [
    ("not_yaml.yaml", None, "not valid YAML"),
    ("no_topics.yaml", None, "'topics' list"),
    ("unknown_top_level.yaml", None, "['topic']"),
    ("bad_defaults.yaml", "defaults", "['path']"),
    ("does_not_exist.yaml", None, "file not found"),
]


@pytest.mark.parametrize("strict", [True, False])
@pytest.mark.parametrize(("file", "field", "says"), FILE_ERRORS)
def test_unusable_file_raises_in_both_modes(lake_root, file, field, says, strict):
    path = CATALOGS / file
    with pytest.raises(CatalogError) as excinfo:
        load_catalog(path, lake_root, strict=strict)
    assert_names_where(excinfo.value, path, None, field)
    assert says in str(excinfo.value)


def test_top_level_list_is_rejected(tmp_path, lake_root):
    file = write_catalog(tmp_path, "- name: orders\n  freshness_sla: 1h\n")
    with pytest.raises(CatalogError, match="'topics' list"):
        load_catalog(file, lake_root)


def test_catalog_error_is_a_value_error():
    assert issubclass(CatalogError, ValueError)


def test_topic_entry_that_is_not_a_mapping_is_a_catalog_error(tmp_path, lake_root):
    file = write_catalog(tmp_path, "topics:\n  - name: events\n    freshness_sla: 1h\n  - orders\n")
    catalog = load_catalog(file, lake_root, strict=False)
    assert [t.name for t in catalog.topics] == ["events"]
    assert len(catalog.errors) == 1


def test_absurd_sla_is_a_catalog_error_in_lenient_mode(tmp_path, lake_root):
    file = write_catalog(
        tmp_path,
        "topics:\n  - {name: orders, freshness_sla: 1h}\n  - {name: events, freshness_sla: 99999999999d}\n",
    )
    catalog = load_catalog(file, lake_root, strict=False)
    assert [t.name for t in catalog.topics] == ["orders"]
    assert [(e.topic, e.field) for e in catalog.errors] == [("events", "freshness_sla")]


def test_parsed_in_defaults_merges_key_by_key(tmp_path, lake_root):
    file = write_catalog(
        tmp_path,
        """defaults:
  parsed: {database: typed, sample_rows: 500}
topics:
  - {name: orders, freshness_sla: 1h, parsed: {sample_rows: 200, latest_by_key: true}}
  - {name: events, freshness_sla: 1h}
  - {name: raw, freshness_sla: 1h, parsed: false}
""",
    )
    catalog = load_catalog(file, lake_root)
    orders, events, raw = (catalog.topic(n) for n in ("orders", "events", "raw"))
    assert (orders.parsed.database, orders.parsed.sample_rows, orders.parsed.latest_by_key) == (
        "typed",
        200,
        True,
    )
    assert (events.parsed.database, events.parsed.sample_rows) == ("typed", 500)
    assert raw.parsed.enabled is False


def test_parsed_off_in_defaults_and_on_in_a_topic(tmp_path, lake_root):
    file = write_catalog(
        tmp_path,
        """defaults: {parsed: false}
topics:
  - {name: orders, freshness_sla: 1h, parsed: {latest_by_key: true}}
  - {name: events, freshness_sla: 1h}
""",
    )
    catalog = load_catalog(file, lake_root)
    assert catalog.topic("orders").parsed.enabled is True
    assert catalog.topic("events").parsed.enabled is False


def test_a_parsed_table_name_in_defaults_is_refused(tmp_path, lake_root):
    file = write_catalog(tmp_path, "defaults: {parsed: {table: t}}\ntopics: []\n")
    with pytest.raises(CatalogError) as excinfo:
        load_catalog(file, lake_root, strict=False)
    assert_names_where(excinfo.value, file, None, "defaults.parsed.table")


def test_shipped_catalog_parsed_settings(lake_root):
    catalog = load_catalog(REPO_ROOT / "include" / "topics.yaml", lake_root)
    orders, clicks = catalog.topic("orders"), catalog.topic("clickstream")
    assert orders.parsed.latest_by_key
    assert [(e.name, e.action) for e in orders.parsed.expectations] == [("positive_amount", "drop")]
    assert orders.latest_table == "silver.orders_latest"
    assert clicks.parsed == ParsedConfig(table="clickstream")


def test_bad_priority_in_defaults_names_every_topic(tmp_path, lake_root):
    file = write_catalog(tmp_path, "defaults: {priority: 1.5}\ntopics: [{name: a, freshness_sla: 1h}]")
    with pytest.raises(CatalogError) as excinfo:
        load_catalog(file, lake_root)
    assert_names_where(excinfo.value, file, "a", "priority")


def test_a_topic_loads_for_its_jobs_beside_another_topics_broken_entry(tmp_path, lake_root):
    """What a job or a task loads when it runs is what the lenient DAG processor built a DAG from."""
    file = write_catalog(
        tmp_path,
        "topics:\n"
        "  - {name: orders, freshness_sla: 15m}\n"
        "  - {name: payments, freshness_sla: 15m, priority: 0}\n"
        "  - {name: orders, freshness_sla: 1h}\n",
    )
    assert load_topic(file, lake_root, "orders").freshness_sla == timedelta(minutes=15)  # as its DAG
    with pytest.raises(CatalogError) as caught:
        load_topic(file, lake_root, "payments")
    assert_names_where(caught.value, file, "payments", "priority")
    with pytest.raises(CatalogError, match="no topic named 'audit'"):
        load_topic(file, lake_root, "audit")


def test_a_max_offsets_in_the_defaults_applies_to_both_kinds(tmp_path, lake_root):
    path = write_catalog(
        tmp_path,
        """
defaults:
  max_offsets_per_trigger: 7000
topics:
  - {name: raw, freshness_sla: 1h, parsed: false}
  - {name: typed, freshness_sla: 1h, parsed: true}
""",
    )
    assert {t.max_offsets_per_trigger for t in load_catalog(path, lake_root).topics} == {7000}


def test_unknown_keys_that_are_not_text_are_named_not_a_crash(tmp_path, lake_root):
    # YAML makes `1:` a number and `~:` a null: sorting them with text raised TypeError, which the
    # lenient mode does not catch, so one typo took every topic's DAG away.
    file = write_catalog(
        tmp_path,
        "topics:\n  - {name: orders, freshness_sla: 1h}\n"
        "  - {name: events, freshness_sla: 1h, 1: x, ownr: y}\n",
    )
    catalog = load_catalog(file, lake_root, strict=False)
    assert [t.name for t in catalog.topics] == ["orders"]
    assert [(e.topic, e.field) for e in catalog.errors] == [("events", "1")]
    for text, says in [
        ("1: x\nfoo: y\ntopics: []\n", "['1', 'foo']"),
        ("defaults: {1: x, foo: y}\ntopics: []\n", "['1', 'foo']"),
    ]:
        file.write_text(text)
        with pytest.raises(CatalogError, match=re.escape(says)):
            load_catalog(file, lake_root, strict=False)


@pytest.mark.parametrize("value", ["false", "0", "[]"])
def test_defaults_that_yaml_reads_as_false_or_zero_are_refused(tmp_path, lake_root, value):
    file = write_catalog(tmp_path, f"defaults: {value}\ntopics:\n  - {{name: orders, freshness_sla: 1h}}\n")
    with pytest.raises(CatalogError, match="must be a mapping") as caught:
        load_catalog(file, lake_root)
    assert caught.value.field == "defaults"
