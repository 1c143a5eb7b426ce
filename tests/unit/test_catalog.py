"""The topic catalog: YAML in, validated TopicConfig objects out; every error names file, topic, field."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path, PurePosixPath

import pytest
from kafkalake.catalog import (
    Catalog,
    CatalogError,
    TopicConfig,
    dag_id_for,
    load_catalog,
    sanitize_identifier,
)
from kafkalake.paths import REPO_ROOT

CATALOGS = Path(__file__).resolve().parents[1] / "fixtures" / "catalogs"


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
