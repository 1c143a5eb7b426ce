"""The topic catalog: YAML in, validated TopicConfig objects out; every error names file, topic, field."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path, PurePosixPath

import pytest

from kafkalake.config.catalog import Catalog, load_catalog, load_topic
from kafkalake.config.parsed import Expectation, ParsedConfig
from kafkalake.config.topic import TopicConfig, dag_id_for, sanitize_identifier
from kafkalake.core.errors import CatalogError
from kafkalake.core.paths import REPO_ROOT

CATALOGS = Path(__file__).resolve().parents[2] / "fixtures" / "catalogs"


@pytest.fixture
def lake_root(tmp_path) -> Path:
    return tmp_path / "lake"


def write_catalog(tmp_path: Path, text: str) -> Path:
    file = tmp_path / "catalog.yaml"
    file.write_text(text)
    return file


def assert_names_where(err: CatalogError, file: Path, topic: str | None, field: str | None) -> None:
    message = str(err)
    assert str(file) in message
    assert err.file == file
    assert err.topic == topic
    assert err.field == field
    if topic is not None:
        assert f"topic {topic!r}" in message
    if field is not None:
        assert f"field {field!r}" in message


# ---------------------------------------------------------------------------------------------
# A good catalog


@pytest.fixture
def good(lake_root) -> Catalog:
    return load_catalog(CATALOGS / "good.yaml", lake_root)


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


def test_freshness_sla_and_run_interval(good):
    assert good.topic("payments").freshness_sla == timedelta(minutes=15)
    assert good.topic("payments").run_interval == timedelta(minutes=5)
    assert good.topic("clickstream").run_interval == timedelta(minutes=20)
    assert good.topic("orders-v2").run_interval == timedelta(hours=2)


def test_spark_conf_values_become_sorted_strings(good):
    assert good.topic("orders-v2").spark_conf == (
        ("spark.executor.memory", "2g"),
        ("spark.sql.shuffle.partitions", "4"),
    )


def test_table_and_dag_id_are_sanitised_from_the_topic_name(good):
    orders = good.topic("orders-v2")
    assert orders.table == "orders_v2"
    assert orders.dag_id == "ingest_orders_v2"
    assert orders.qualified_table == "bronze.orders_v2"


def test_default_path_is_lake_root_database_table(good, lake_root):
    assert good.topic("orders-v2").path == str(lake_root / "bronze" / "orders_v2")


def test_relative_path_is_under_the_lake_root(good, lake_root):
    assert good.topic("clickstream").path == str(lake_root / "web" / "clicks")


def test_uri_path_passes_through(good):
    assert good.topic("payments").path == "s3a://lake-bucket/raw/payments"


def test_absolute_path_passes_through(tmp_path, lake_root):
    file = write_catalog(tmp_path, "topics:\n  - {name: orders, freshness_sla: 1h, path: /data/orders}\n")
    assert load_catalog(file, lake_root).topic("orders").path == "/data/orders"


@pytest.mark.parametrize("name", ["clickstream", "orders-v2", "payments"])
def test_checkpoint_is_inside_the_table_in_a_folder_vacuum_skips(good, name):
    topic = good.topic(name)
    assert topic.checkpoint_path.startswith(topic.path + "/")
    inside = PurePosixPath(topic.checkpoint_path[len(topic.path) + 1 :])
    assert inside.parts[0].startswith("_")


def test_checkpoint_path_has_no_double_slash_when_path_ends_with_one():
    topic = TopicConfig(name="orders", freshness_sla=timedelta(hours=1), path="s3a://bucket/orders/")
    assert topic.checkpoint_path.startswith("s3a://bucket/orders/_")
    assert "//" not in topic.checkpoint_path.removeprefix("s3a://")


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


@pytest.mark.parametrize(
    ("name", "identifier"),
    [
        ("orders-v2", "orders_v2"),
        ("orders_v2", "orders_v2"),
        ("Orders.V2", "orders_v2"),
        ("payments", "payments"),
        ("1orders", "t_1orders"),
        ("_internal", "_internal"),
        ("a.b-c_d", "a_b_c_d"),
    ],
)
def test_sanitize_identifier(name, identifier):
    assert sanitize_identifier(name) == identifier
    assert dag_id_for(name) == "ingest_" + identifier


# ---------------------------------------------------------------------------------------------
# Broken topics: strict mode raises on the first, lenient mode keeps the others

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


def test_clash_keeps_the_first_topic_listed(lake_root):
    catalog = load_catalog(CATALOGS / "duplicate_topic.yaml", lake_root, strict=False)
    # The surviving `orders` is the first entry (6h), not the duplicate (1h).
    assert catalog.topic("orders").freshness_sla == timedelta(hours=6)


def test_clash_message_names_the_other_topic(lake_root):
    with pytest.raises(CatalogError) as excinfo:
        load_catalog(CATALOGS / "table_clash.yaml", lake_root)
    assert "'orders-v2'" in str(excinfo.value)


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


# ---------------------------------------------------------------------------------------------
# Files that cannot be used at all: an error in both modes


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


# ---------------------------------------------------------------------------------------------
# Bugs: each test states the behaviour the catalog promises and does not yet have


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


def test_topic_named_like_another_topics_dag_id_is_not_a_clash(tmp_path, lake_root):
    file = write_catalog(
        tmp_path,
        "topics:\n  - {name: orders, freshness_sla: 1h}\n  - {name: ingest_orders, freshness_sla: 1h}\n",
    )
    catalog = load_catalog(file, lake_root)
    assert {t.dag_id for t in catalog.topics} == {"ingest_orders", "ingest_ingest_orders"}


@pytest.mark.parametrize("name", ["orders\\n", ".", ".."])
def test_names_kafka_rejects_are_refused(tmp_path, lake_root, name):
    file = write_catalog(tmp_path, f'topics:\n  - name: "{name}"\n    freshness_sla: 1h\n')
    with pytest.raises(CatalogError) as excinfo:
        load_catalog(file, lake_root)
    assert excinfo.value.field == "name"


def test_database_with_a_trailing_newline_is_refused(tmp_path, lake_root):
    file = write_catalog(tmp_path, 'topics:\n  - {name: orders, freshness_sla: 1h, database: "bronze\\n"}\n')
    with pytest.raises(CatalogError) as excinfo:
        load_catalog(file, lake_root)
    assert excinfo.value.field == "database"


# ---------------------------------------------------------------------------------------------
# Parsed tables: `parsed:` on a topic or in defaults, their names and locations, their clashes


def test_parsed_tables_are_on_by_default_and_named_after_the_bronze_table(good, lake_root):
    orders = good.topic("orders-v2")
    assert orders.parsed == ParsedConfig(table="orders_v2")
    assert orders.parsed_table == "silver.orders_v2"
    assert orders.dead_letter_table == "silver.orders_v2_dead_letter"
    assert orders.latest_table == "silver.orders_v2_latest"
    assert orders.parsed_path == str(lake_root / "silver" / "orders_v2")
    assert orders.dead_letter_path == str(lake_root / "silver" / "orders_v2_dead_letter")
    assert orders.latest_path == str(lake_root / "silver" / "orders_v2_latest")
    assert orders.schema_dir == orders.path + "/_kafkalake/schemas"


def test_parsed_tables_of_an_explicitly_placed_table_go_in_a_folder_beside_it(good, lake_root):
    assert good.topic("payments").parsed_path == "s3a://lake-bucket/raw/silver/payments"
    assert good.topic("payments").latest_path == "s3a://lake-bucket/raw/silver/payments_latest"
    assert good.topic("clickstream").parsed_path == str(lake_root / "web" / "silver" / "clickstream")


def test_a_topic_built_by_hand_still_has_parsed_names_and_paths():
    topic = TopicConfig(name="orders", freshness_sla=timedelta(hours=1), table="orders", path="/data/orders/")
    assert topic.parsed.table == "orders"
    assert topic.parsed_table == "silver.orders"
    assert topic.parsed_path == "/data/silver/orders"
    assert topic.schema_dir == "/data/orders/_kafkalake/schemas"


def test_full_parsed_entry(tmp_path, lake_root):
    file = write_catalog(
        tmp_path,
        """topics:
  - name: orders
    freshness_sla: 6h
    parsed:
      evolution: rescue
      schema: {order_id: bigint, amount: "decimal(10,2)", items: "array<struct<sku:string,qty:int>>"}
      type_hints: {amount: "decimal(10,2)", customer.id: string}
      max_value_bytes: 262144
      sample_rows: 5000
      database: curated
      table: orders_typed
      expectations:
        - {name: positive_amount, rule: "amount >= 0", action: drop}
      latest_by_key: {changelog: true}
""",
    )
    orders = load_catalog(file, lake_root).topic("orders")
    parsed = orders.parsed
    assert parsed.evolution == "rescue"
    assert parsed.schema is not None and [name for name, _ in parsed.schema] == [
        "order_id",
        "amount",
        "items",
    ]
    assert parsed.type_hints == (("amount", "decimal(10,2)"), ("customer.id", "string"))
    assert (parsed.max_value_bytes, parsed.sample_rows) == (262144, 5000)
    assert parsed.expectations == (Expectation("positive_amount", "amount >= 0", "drop"),)
    assert (parsed.latest_by_key, parsed.changelog) == (True, True)
    assert orders.parsed_table == "curated.orders_typed"
    assert orders.latest_table == "curated.orders_typed_latest"
    assert orders.parsed_path == str(lake_root / "curated" / "orders_typed")


@pytest.mark.parametrize("spelling", ["parsed: false", "parsed: {enabled: false}"])
def test_parsed_false_is_bronze_only(tmp_path, lake_root, spelling):
    file = write_catalog(tmp_path, f"topics:\n  - {{name: orders, freshness_sla: 1h, {spelling}}}\n")
    assert load_catalog(file, lake_root).topic("orders").parsed.enabled is False


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


PARSED_ERRORS = [
    # the topic's parsed: value, field, part of the message
    ("{evolutoin: rescue}", "parsed.evolutoin", "allowed: enabled, evolution"),
    ("{evolution: addnewcolumns}", "parsed.evolution", "did you mean 'addNewColumns'?"),
    ("{schema: {a: bigintt}}", "parsed.schema.a", "unknown type 'bigintt'"),
    ("{schema: {}}", "parsed.schema", "at least one field"),
    ("{schema: {_kafka_key: binary}}", "parsed.schema._kafka_key", "reserved"),
    ('{type_hints: {a.b: "array<int"}}', "parsed.type_hints.a.b", "unbalanced '<'"),
    ("{max_value_bytes: true}", "parsed.max_value_bytes", "whole number"),
    ("{sample_rows: 10}", "parsed.sample_rows", "from 100"),
    ("{database: Silver}", "parsed.database", "lower-case"),
    ("{table: orders-v2}", "parsed.table", "lower-case"),
    (
        "{expectations: [{name: a, rule: x, action: keep}]}",
        "parsed.expectations[0].action",
        "warn, drop, fail",
    ),
    ("{changelog: true, latest_by_key: false}", "parsed.changelog", "latest"),
    ("{enabled: false, sample_rows: 500}", "parsed.sample_rows", "does nothing"),
    ("yes please", "parsed", "true, false or a mapping"),
]


@pytest.mark.parametrize(("value", "field", "says"), PARSED_ERRORS)
def test_parsed_errors_name_file_topic_and_field(tmp_path, lake_root, value, field, says):
    file = write_catalog(
        tmp_path,
        f"topics:\n  - {{name: events, freshness_sla: 1h, parsed: {value}}}\n"
        "  - {name: orders, freshness_sla: 1h}\n",
    )
    with pytest.raises(CatalogError) as excinfo:
        load_catalog(file, lake_root)
    assert_names_where(excinfo.value, file, "events", field)
    assert says in str(excinfo.value)
    catalog = load_catalog(file, lake_root, strict=False)
    assert [t.name for t in catalog.topics] == ["orders"]
    assert [(e.topic, e.field) for e in catalog.errors] == [("events", field)]


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
    # An explicit path at a bucket's root would hold its own parsed tables.
    ("{name: orders, freshness_sla: 1h, path: 's3a://bucket'}", "orders", "parsed.table", "would lie inside"),
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


def test_shipped_catalog_parsed_settings(lake_root):
    catalog = load_catalog(REPO_ROOT / "include" / "topics.yaml", lake_root)
    orders, clicks = catalog.topic("orders"), catalog.topic("clickstream")
    assert orders.parsed.latest_by_key
    assert [(e.name, e.action) for e in orders.parsed.expectations] == [("positive_amount", "drop")]
    assert orders.latest_table == "silver.orders_latest"
    assert clicks.parsed == ParsedConfig(table="clickstream")


# priority: the tasks' priority_weight in the shared Spark pool


def test_priority_defaults_to_1_and_comes_from_defaults_or_the_topic(tmp_path, lake_root):
    assert (
        load_catalog(write_catalog(tmp_path, "topics: [{name: a, freshness_sla: 1h}]"), lake_root)
        .topic("a")
        .priority
        == 1
    )
    file = write_catalog(
        tmp_path,
        "defaults: {priority: 3}\ntopics:\n  - {name: a, freshness_sla: 1h}\n"
        "  - {name: b, freshness_sla: 1h, priority: 20}\n",
    )
    catalog = load_catalog(file, lake_root)
    assert [(t.name, t.priority) for t in catalog.topics] == [("a", 3), ("b", 20)]


def test_bad_priority_strict_raises_naming_file_topic_and_field(lake_root):
    path = CATALOGS / "bad_priority.yaml"
    with pytest.raises(CatalogError) as excinfo:
        load_catalog(path, lake_root)
    assert_names_where(excinfo.value, path, "zero", "priority")
    assert "whole number from 1 to 2147483647" in str(excinfo.value)


def test_bad_priority_lenient_collects_each(lake_root):
    path = CATALOGS / "bad_priority.yaml"
    catalog = load_catalog(path, lake_root, strict=False)
    assert [(t.name, t.priority) for t in catalog.topics] == [("orders", 2_147_483_647)]
    assert [e.topic for e in catalog.errors] == ["zero", "negative", "boolean", "text", "huge"]
    for err, shown in zip(catalog.errors, ["0", "-3", "True", "'high'", "2147483648"], strict=True):
        assert_names_where(err, path, err.topic, "priority")
        assert str(err).endswith(f"not {shown}")


def test_bad_priority_in_defaults_names_every_topic(tmp_path, lake_root):
    file = write_catalog(tmp_path, "defaults: {priority: 1.5}\ntopics: [{name: a, freshness_sla: 1h}]")
    with pytest.raises(CatalogError) as excinfo:
        load_catalog(file, lake_root)
    assert_names_where(excinfo.value, file, "a", "priority")


def test_a_credential_in_spark_conf_is_named_but_its_value_never_shown(lake_root):
    with pytest.raises(CatalogError) as excinfo:
        load_catalog(CATALOGS / "credential_in_spark_conf.yaml", lake_root, strict=True)
    message = str(excinfo.value)
    assert "'spark.hadoop.fs.s3a.secret.key'" in message
    assert "wJalrXUtnFEMI" not in message
    # The provider class is the supported way in, not a credential.
    assert "aws.credentials.provider'" not in message


# ---------------------------------------------------------------------------------------------
# Entries that would load into something else than the file says


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


def test_a_key_given_twice_is_refused_naming_file_topic_field_and_lines(lake_root):
    file = CATALOGS / "duplicate_key.yaml"
    with pytest.raises(CatalogError) as caught:
        load_catalog(file, lake_root)
    assert_names_where(caught.value, file, "events", "parsed.max_value_bytes")
    assert "lines 8 and 10" in str(caught.value)
    # Lenient mode cannot keep the other topics: the file itself says two things.
    with pytest.raises(CatalogError):
        load_catalog(file, lake_root, strict=False)


@pytest.mark.parametrize(
    ("text", "topic", "field_name"),
    [
        ("topics:\n  - name: a\n    freshness_sla: 1h\n    freshness_sla: 2h\n", "a", "freshness_sla"),
        ("defaults:\n  owner: x\n  owner: y\ntopics: []\n", None, "defaults.owner"),
        ("topics: []\ntopics: []\n", None, "topics"),
        (
            "topics:\n  - name: a\n    freshness_sla: 1h\n    spark_conf:\n"
            "      spark.x: 1\n      spark.x: 2\n",
            "a",
            "spark_conf.spark.x",
        ),
    ],
)
def test_duplicate_keys_anywhere_name_where_they_are(tmp_path, lake_root, text, topic, field_name):
    file = write_catalog(tmp_path, text)
    with pytest.raises(CatalogError) as caught:
        load_catalog(file, lake_root)
    assert_names_where(caught.value, file, topic, field_name)


@pytest.mark.parametrize(
    ("value", "field_name", "says"),
    [
        (
            "max_offsets_per_trigger: 010",
            "max_offsets_per_trigger",
            "010 (line 4) is read by YAML as an octal number, 8",
        ),
        (
            "spark_conf: {spark.sql.shuffle.partitions: 010}",
            "spark_conf.spark.sql.shuffle.partitions",
            "octal",
        ),
        (
            "spark_conf: {spark.network.timeout: 1:30}",
            "spark_conf.spark.network.timeout",
            "base-60 number, 90:",
        ),
        ("spark_conf: {spark.x: 1:30.5}", "spark_conf.spark.x", "base-60 number, 90.5"),
        ("tags: [a, -007]", "tags[1]", "octal number, -7"),
    ],
)
def test_numbers_yaml_1_1_reads_unlike_their_reader_are_refused(tmp_path, lake_root, value, field_name, says):
    text = f"topics:\n  - name: a\n    freshness_sla: 1h\n    {value}\n"
    file = write_catalog(tmp_path, text)
    with pytest.raises(CatalogError) as caught:
        load_catalog(file, lake_root)
    assert_names_where(caught.value, file, "a", field_name)
    assert says in str(caught.value)
    assert "quote it" in str(caught.value)


def test_quoted_or_plain_numbers_are_taken_as_written(tmp_path, lake_root):
    text = (
        "topics:\n  - name: a\n    freshness_sla: 1h\n    max_offsets_per_trigger: 10\n"
        "    spark_conf: {spark.a: '010', spark.b: \"1:30\", spark.c: 0, spark.d: 0x10,\n"
        "                 spark.e: 08, spark.f: 0.5}\n"
    )
    topic = load_catalog(write_catalog(tmp_path, text), lake_root).topics[0]
    assert topic.max_offsets_per_trigger == 10
    as_given = {"a": "010", "b": "1:30", "c": "0", "d": "16", "e": "08", "f": "0.5"}
    assert dict(topic.spark_conf) == {f"spark.{k}": v for k, v in as_given.items()}


def test_yaml_merge_keys_are_not_duplicates(tmp_path, lake_root):
    text = (
        "common: &common\n  freshness_sla: 1h\n"
        "topics:\n  - <<: *common\n    name: a\n  - <<: *common\n    name: b\n    freshness_sla: 2h\n"
    )
    file = write_catalog(tmp_path, text.replace("common: &common\n  freshness_sla: 1h\n", ""))
    # Anchors need a home the catalog allows: put the shared fields on the first topic.
    file.write_text(
        "topics:\n  - &common\n    name: a\n    freshness_sla: 1h\n"
        "  - <<: *common\n    name: b\n    freshness_sla: 2h\n"
    )
    catalog = load_catalog(file, lake_root)
    assert catalog.topic("b").freshness_sla == timedelta(hours=2)


def test_a_non_scalar_spark_conf_value_is_refused(lake_root):
    file = CATALOGS / "non_scalar_spark_conf.yaml"
    with pytest.raises(CatalogError) as caught:
        load_catalog(file, lake_root)
    assert_names_where(caught.value, file, "events", "spark_conf.spark.executor.extraJavaOptions")
    assert "single value" in str(caught.value)
    lenient = load_catalog(file, lake_root, strict=False)
    assert [t.name for t in lenient.topics] == ["orders"]


@pytest.mark.parametrize("value", ["null", "{a: 1}"])
def test_spark_conf_values_must_be_single_values(tmp_path, lake_root, value):
    file = write_catalog(
        tmp_path, f"topics:\n  - name: a\n    freshness_sla: 1h\n    spark_conf:\n      spark.x: {value}\n"
    )
    with pytest.raises(CatalogError) as caught:
        load_catalog(file, lake_root)
    assert_names_where(caught.value, file, "a", "spark_conf.spark.x")


def test_spark_conf_booleans_are_spelled_as_spark_reads_them(tmp_path, lake_root):
    file = write_catalog(
        tmp_path,
        "topics:\n  - name: a\n    freshness_sla: 1h\n    spark_conf:\n"
        "      spark.sql.adaptive.enabled: false\n      spark.sql.shuffle.partitions: 4\n",
    )
    assert load_catalog(file, lake_root).topic("a").spark_conf == (
        ("spark.sql.adaptive.enabled", "false"),
        ("spark.sql.shuffle.partitions", "4"),
    )


def test_an_expectation_rule_that_does_not_parse_is_refused(lake_root):
    file = CATALOGS / "bad_expectation.yaml"
    with pytest.raises(CatalogError) as caught:
        load_catalog(file, lake_root)
    assert_names_where(caught.value, file, "events", "parsed.expectations[0].rule")
    assert "does not parse" in str(caught.value) and "')' is missing" in str(caught.value)


def test_spark_task_timeout_defaults_to_two_hours_and_is_bounded(tmp_path, lake_root):
    file = write_catalog(
        tmp_path,
        "topics:\n  - name: a\n    freshness_sla: 1h\n  - name: b\n    freshness_sla: 1h\n"
        "    spark_task_timeout: 45m\n",
    )
    catalog = load_catalog(file, lake_root)
    assert catalog.topic("a").spark_task_timeout == timedelta(hours=2)
    assert catalog.topic("b").spark_task_timeout == timedelta(minutes=45)
    for bad in ("30s", "3d", "soon"):
        file.write_text(f"topics:\n  - name: a\n    freshness_sla: 1h\n    spark_task_timeout: {bad}\n")
        with pytest.raises(CatalogError) as caught:
            load_catalog(file, lake_root)
        assert_names_where(caught.value, file, "a", "spark_task_timeout")


@pytest.mark.parametrize(
    ("entry", "field", "says"),
    [
        ("{name: orders, freshness_sla: 1h, path: 'abfss://c@a.dfs.core.windows.net/t'}", "path", "abfss://"),
        ("{name: orders, freshness_sla: 1h, path: 'gs://bucket/t'}", "path", "s3a://<bucket>/<folder>"),
        (
            "{name: orders, freshness_sla: 1h, path: 's3a://bucket/t', storage_conn_id: ''}",
            "storage_conn_id",
            "aws",
        ),
    ],
)
def test_table_locations_that_do_not_work_yet_are_refused_naming_file_topic_and_field(
    tmp_path, lake_root, entry, field, says
):
    file = write_catalog(tmp_path, f"topics:\n  - {entry}\n")
    with pytest.raises(CatalogError) as excinfo:
        load_catalog(file, lake_root)
    assert_names_where(excinfo.value, file, "orders", field)
    assert says in str(excinfo.value)


def test_a_topic_on_s3a_names_its_storage_connection(tmp_path, lake_root):
    file = write_catalog(
        tmp_path,
        "defaults: {storage_conn_id: lake_s3}\n"
        "topics:\n  - {name: orders, freshness_sla: 1h, path: 's3a://bucket/raw/orders'}\n",
    )
    topic = load_catalog(file, lake_root).topic("orders")
    assert topic.storage_conn_id == "lake_s3"
    assert topic.on_object_store


def test_max_offsets_default_is_larger_for_a_bronze_only_topic_and_the_catalog_wins(tmp_path, lake_root):
    path = write_catalog(
        tmp_path,
        """
defaults:
  parsed: false
topics:
  - {name: raw, freshness_sla: 1h}
  - {name: typed, freshness_sla: 1h, parsed: true}
  - {name: raw-set, freshness_sla: 1h, max_offsets_per_trigger: 1000}
  - {name: typed-set, freshness_sla: 1h, parsed: true, max_offsets_per_trigger: 3000000}
  - {name: raw-all, freshness_sla: 1h, max_offsets_per_trigger: null}
""",
    )
    catalog = load_catalog(path, lake_root)

    wanted = {"raw": 2_000_000, "typed": 1_000_000, "raw-set": 1000, "typed-set": 3_000_000, "raw-all": None}
    assert {t.name: t.max_offsets_per_trigger for t in catalog.topics} == wanted


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


@pytest.mark.parametrize("strict", [True, False])
def test_a_file_that_cannot_be_read_as_text_is_a_catalog_error(tmp_path, lake_root, strict):
    file = tmp_path / "catalog.yaml"
    file.write_bytes(b"topics:\n  - name: orders\n    owner: caf\xe9\n    freshness_sla: 1h\n")
    with pytest.raises(CatalogError, match="not UTF-8 text: byte 0xe9 on line 3"):
        load_catalog(file, lake_root, strict=strict)
    with pytest.raises(CatalogError, match="cannot be read: Is a directory"):
        load_catalog(tmp_path, lake_root, strict=strict)


@pytest.mark.timeout(20)
@pytest.mark.parametrize(
    ("text", "says"),
    [
        # An alias inside its own anchor: the duplicate-key walk went round it forever.
        ("topics: &t\n  - *t\n", "must be a mapping of fields"),
        # Aliases of aliases: 10**8 paths to walk, each node reached 10 ways from the one above.
        (
            "x0: &x0 [a, a, a, a, a, a, a, a, a, a]\n"
            + "".join(f"x{i}: &x{i} [{', '.join([f'*x{i - 1}'] * 10)}]\n" for i in range(1, 8))
            + "topics: []\n",
            "unknown top-level keys",
        ),
    ],
)
def test_aliases_that_repeat_or_contain_their_anchor_end_in_an_error(tmp_path, lake_root, text, says):
    file = write_catalog(tmp_path, text)
    with pytest.raises(CatalogError, match=says):
        load_catalog(file, lake_root)


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


@pytest.mark.parametrize(("value", "shown"), [("no", "False"), ("0", "0"), ("''", "''")])
def test_a_table_that_yaml_reads_as_false_zero_or_empty_is_refused(tmp_path, lake_root, value, shown):
    # `table: no` named the table after the topic, silently; only a missing table takes the default.
    file = write_catalog(tmp_path, f"topics:\n  - {{name: orders, freshness_sla: 1h, table: {value}}}\n")
    with pytest.raises(CatalogError, match=f"not {re.escape(shown)}$") as caught:
        load_catalog(file, lake_root)
    assert_names_where(caught.value, file, "orders", "table")
    file.write_text("topics:\n  - {name: orders, freshness_sla: 1h, table: null}\n")
    assert load_catalog(file, lake_root).topic("orders").table == "orders"


@pytest.mark.parametrize(("sla", "loads"), [("3650d", True), ("3651d", False), ("9999999w", False)])
def test_an_sla_too_long_to_schedule_is_refused(tmp_path, lake_root, sla, loads):
    # 9999999w loaded: the schema refresh's `now - SLA` and Airflow's next run overflowed at run time.
    file = write_catalog(tmp_path, f"topics:\n  - {{name: orders, freshness_sla: {sla}}}\n")
    if loads:
        assert load_catalog(file, lake_root).topic("orders").freshness_sla == timedelta(days=3650)
        return
    with pytest.raises(CatalogError, match="must be at most 3650d") as caught:
        load_catalog(file, lake_root)
    assert_names_where(caught.value, file, "orders", "freshness_sla")


def test_a_table_or_database_name_too_long_for_a_folder_is_refused(tmp_path, lake_root):
    # A table's name is its folder's; a parsed table's dead letters go to `<name>_dead_letter`
    # beside it. Longer names loaded, and the file system refused the folder at run time.
    def load(entry: str) -> Catalog:
        return load_catalog(
            write_catalog(tmp_path, f"topics:\n  - {{name: orders, freshness_sla: 1h, {entry}}}\n"), lake_root
        )

    for entry, field, says in [
        (f"table: {'t' * 256}", "table", "at most 255 characters, not 256"),
        (f"database: {'d' * 129}", "database", "at most 128 characters, not 129"),
        (f"parsed: {{table: {'p' * 244}}}", "parsed.table", "at most 243 characters, not 244"),
        (f"parsed: {{database: {'d' * 129}}}", "parsed.database", "at most 128 characters, not 129"),
        (f"table: {'t' * 244}", "table", "set parsed.table (at most 243 characters), or a shorter table"),
    ]:
        with pytest.raises(CatalogError, match=re.escape(says)) as caught:
            load(entry)
        assert caught.value.field == field
    # At the limits, and a long bronze name whose parsed tables are named apart, or are off.
    assert load(f"table: {'t' * 243}").topic("orders").parsed.table == "t" * 243
    assert load(f"table: {'t' * 255}, parsed: {{table: orders}}").topic("orders").table == "t" * 255
    assert load(f"table: {'t' * 255}, parsed: {{enabled: false}}").topic("orders").table == "t" * 255
    assert load(f"database: {'d' * 128}").topic("orders").database == "d" * 128


@pytest.mark.parametrize(("value", "loads"), [(2**63 - 1, True), (2**63, False), (10**30, False)])
def test_max_offsets_per_trigger_fits_a_java_long(tmp_path, lake_root, value, loads):
    # Spark reads maxOffsetsPerTrigger as a long: a larger number loaded, then failed the run.
    file = write_catalog(
        tmp_path, f"topics:\n  - {{name: orders, freshness_sla: 1h, max_offsets_per_trigger: {value}}}\n"
    )
    if loads:
        assert load_catalog(file, lake_root).topic("orders").max_offsets_per_trigger == value
        return
    with pytest.raises(CatalogError, match=f"from 1 to {2**63 - 1} or null, not {value}$") as caught:
        load_catalog(file, lake_root)
    assert_names_where(caught.value, file, "orders", "max_offsets_per_trigger")


@pytest.mark.parametrize("value", ["false", "0", "[]"])
def test_defaults_that_yaml_reads_as_false_or_zero_are_refused(tmp_path, lake_root, value):
    file = write_catalog(tmp_path, f"defaults: {value}\ntopics:\n  - {{name: orders, freshness_sla: 1h}}\n")
    with pytest.raises(CatalogError, match="must be a mapping") as caught:
        load_catalog(file, lake_root)
    assert caught.value.field == "defaults"


def test_a_schema_field_yaml_reads_as_a_boolean_says_to_quote_it(tmp_path, lake_root):
    file = write_catalog(
        tmp_path, "topics:\n  - {name: orders, freshness_sla: 1h, parsed: {schema: {on: string}}}\n"
    )
    with pytest.raises(CatalogError, match="True is not a non-empty field name: quote it") as caught:
        load_catalog(file, lake_root)
    assert caught.value.field == "parsed.schema"
