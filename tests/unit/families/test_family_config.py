"""A family entry in the catalog (`topics:` or `topic_pattern:` with a `table`): what loads, what is
refused (naming file, entry and field), and which topics are its members."""

from __future__ import annotations

import pytest

from kafkalake.config.catalog import load_catalog
from kafkalake.config.family import matches, pattern_problem, resolve_members
from kafkalake.core.errors import CatalogError

from ..config.catalog_helpers import assert_names_where, write_catalog

pytestmark = pytest.mark.families

GOOD = """
defaults:
  parsed: {type_hints: {amount: "decimal(10,2)"}}
topics:
  - topics: [orders.eu, orders.us]
    table: orders_all
    freshness_sla: 1h
    parsed: false
  - topic_pattern: "clicks-[0-9]{4}-.*"
    table: clicks
    freshness_sla: 15m
    starting_offsets: latest
    parsed: false
  - name: payments
    freshness_sla: 6h
"""


def test_a_list_and_a_pattern_load_named_after_their_table(tmp_path):
    catalog = load_catalog(write_catalog(tmp_path, GOOD), tmp_path / "lake")
    orders, clicks = catalog.topic("orders_all"), catalog.topic("clicks")
    assert orders.members == ("orders.eu", "orders.us") and orders.topic_pattern is None
    assert clicks.members == () and clicks.topic_pattern == "clicks-[0-9]{4}-.*"
    assert (orders.dag_id, clicks.dag_id) == ("ingest_orders_all", "ingest_clicks")
    assert orders.path == str(tmp_path / "lake" / "bronze" / "orders_all")
    assert orders.is_family and clicks.is_family and not catalog.topic("payments").is_family
    assert not orders.parsed.enabled and clicks.starting_offsets == "latest"


FAMILY = "  - {entry}\n    freshness_sla: 1h\n"


@pytest.mark.parametrize(
    ("entry", "label", "field", "words"),
    [
        ("name: a\n    topics: [a, b]\n    table: ab\n    parsed: false", "ab", "name", "not both"),
        (
            "topics: [a]\n    topic_pattern: a.*\n    table: ab\n    parsed: false",
            "ab",
            "topic_pattern",
            "not both",
        ),
        ("topics: []\n    table: ab\n    parsed: false", "ab", "topics", "non-empty list"),
        ("topics: a\n    table: ab\n    parsed: false", "ab", "topics", "non-empty list"),
        ("topics: [a, b, a]\n    table: ab\n    parsed: false", "ab", "topics", "'a' is listed twice"),
        ("topics: [a, 'b c']\n    table: ab\n    parsed: false", "ab", "topics", "not a Kafka topic name"),
        (
            "topic_pattern: 'clicks-(.*'\n    table: ab\n    parsed: false",
            "ab",
            "topic_pattern",
            "not a valid",
        ),
        ("topic_pattern: ''\n    table: ab\n    parsed: false", "ab", "topic_pattern", "non-empty"),
        (
            "topic_pattern: '\\\\p{Alpha}+'\n    table: ab\n    parsed: false",
            "ab",
            "topic_pattern",
            "differently",
        ),
        ("topics: [a, b]\n    parsed: false", "#1", "table", "required with topics"),
        ("topics: [a, b]\n    table: AB\n    parsed: false", "AB", "table", "lower-case"),
        (
            "topics: [a, b]\n    table: ab\n    format: debezium\n    parsed: false",
            "ab",
            "format",
            "debezium needs the parsed tables",
        ),
    ],
)
def test_a_bad_family_entry_names_file_entry_and_field(tmp_path, entry, label, field, words):
    file = write_catalog(tmp_path, "topics:\n" + FAMILY.format(entry=entry))
    with pytest.raises(CatalogError) as raised:
        load_catalog(file, tmp_path)
    assert_names_where(raised.value, file, label, field)
    assert words in str(raised.value)


def test_a_debezium_family_loads_with_one_history_and_one_current_state_table(tmp_path):
    # Shards of one source table (docs/cdc.md): the current state is keyed by (member, key).
    entry = "topic_pattern: 'db_[a-z]+\\.public\\.orders'\n    table: orders"
    text = "topics:\n" + FAMILY.format(entry=entry)
    catalog = load_catalog(write_catalog(tmp_path, text + "    format: debezium\n"), tmp_path / "lake")
    orders = catalog.topic("orders")
    assert orders.is_family and orders.parsed.debezium and not orders.parsed.latest_by_key
    assert orders.current_path == str(tmp_path / "lake" / "silver" / "orders_current")


def test_a_family_whose_table_another_entry_takes_is_refused_naming_its_table(tmp_path):
    text = "topics:\n  - name: ab\n    freshness_sla: 1h\n" + FAMILY.format(
        entry="topics: [a, b]\n    table: ab\n    parsed: false"
    )
    file = write_catalog(tmp_path, text)
    with pytest.raises(CatalogError) as raised:
        load_catalog(file, tmp_path)
    assert raised.value.field == "table"
    assert "'ab'" in str(raised.value)


def test_defaults_cannot_name_members(tmp_path):
    file = write_catalog(tmp_path, "defaults:\n  topic_pattern: a.*\ntopics: []\n")
    with pytest.raises(CatalogError) as raised:
        load_catalog(file, tmp_path)
    assert raised.value.field == "defaults" and "topic_pattern" in str(raised.value)


def test_a_list_reads_the_members_kafka_has_and_reports_the_others():
    members = resolve_members(["b", "a", "gone"], None, {"a", "b", "c", "__consumer_offsets"})
    assert members.present == ("b", "a")
    assert members.missing == ("gone",)


def test_a_pattern_matches_whole_names_like_subscribe_pattern_and_skips_kafkas_own_topics():
    existing = {"clicks-2026-01", "clicks-2026-02", "my-clicks-2026-01", "clicks-2026", "__clicks-2026-x"}
    members = resolve_members((), "clicks-[0-9]{4}-.*", existing, known={"clicks-2025-12", "other"})
    assert members.present == ("clicks-2026-01", "clicks-2026-02")
    # A member the table holds that Kafka lost is missing; a known topic the pattern no longer takes is not.
    assert members.missing == ("clicks-2025-12",)
    assert not matches("a", "ab") and matches("a.*", "ab") and not matches(".*", "__consumer_offsets")


@pytest.mark.parametrize("pattern", ["(?<name>x)", "(?P<name>x)", "\\Qa.b\\E", "[a-z&&[^b]]", "\\p{Lower}"])
def test_java_syntax_python_reads_otherwise_is_refused(pattern):
    assert pattern_problem(pattern) is not None


@pytest.mark.parametrize("pattern", ["orders\\..*", "(eu|us)-orders", "clicks-(?!test).*", "a{2,3}"])
def test_plain_patterns_both_languages_read_are_accepted(pattern):
    assert pattern_problem(pattern) is None


def test_a_familys_full_refresh_needs_every_member_whole_in_kafka_and_none_gone(tmp_path):
    from kafkalake.cli.full_refresh import family_plan

    catalog = load_catalog(write_catalog(tmp_path, GOOD), tmp_path / "lake")
    orders = catalog.topic("orders_all")
    whole = {"orders.eu": {0: (0, 5)}, "orders.us": {0: (0, 2), 1: (0, 1)}}
    allowed = family_plan(orders, whole, held={"orders.eu", "orders.us"})
    assert allowed.allowed and "(8 records)" in allowed.reason
    gone = family_plan(orders, whole, held={"orders.eu", "orders.us", "orders.asia"})
    assert not gone.allowed and "'orders.asia'" in gone.reason and "lose them for good" in gone.reason
    expired = family_plan(orders, {**whole, "orders.us": {0: (3, 4)}}, held=())
    assert not expired.allowed and expired.lost == {0: 3} and "'orders.us'" in expired.reason
    squashed = family_plan(orders, whole, held=(), compacted={"orders.eu"})
    assert not squashed.allowed and "'orders.eu' is compacted" in squashed.reason
    assert family_plan(orders, whole, held=(), compacted={"orders.eu"}, allow_compacted=True).allowed
    latest = catalog.topic("clicks")
    assert not family_plan(latest, {"clicks-2026-01": {0: (0, 1)}}, held=()).allowed


def test_a_family_may_accept_data_loss(tmp_path):
    entry = FAMILY.format(
        entry="topics: [a, b]\n    table: ab\n    parsed: false\n    fail_on_data_loss: false"
    )
    catalog = load_catalog(write_catalog(tmp_path, "topics:\n" + entry), tmp_path)
    assert catalog.topic("ab").fail_on_data_loss is False


def test_a_family_may_have_parsed_tables_keyed_by_topic_and_key(tmp_path):
    catalog = load_catalog(
        write_catalog(
            tmp_path,
            "topics:\n"
            + FAMILY.format(entry="topics: [a, b]\n    table: ab\n    parsed: {latest_by_key: true}"),
        ),
        tmp_path / "lake",
    )
    family = catalog.topic("ab")
    assert family.parsed.enabled and family.parsed.latest_by_key and family.format == "json"
    assert family.parsed_path == str(tmp_path / "lake" / "silver" / "ab")
    assert family.latest_path.endswith("/silver/ab_latest")
