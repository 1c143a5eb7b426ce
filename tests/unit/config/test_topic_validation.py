"""One topic's entry, field by field (kafkalake.config.topic_validation): names, paths, the parsed
block, priority, spark_conf, timeouts, offsets per trigger; every error names file, topic, field."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path, PurePosixPath

import pytest

from kafkalake.config.catalog import Catalog, load_catalog
from kafkalake.config.parsed import Expectation, ParsedConfig
from kafkalake.config.topic import TopicConfig, dag_id_for, sanitize_identifier
from kafkalake.core.errors import CatalogError

from .catalog_helpers import CATALOGS, assert_names_where, write_catalog


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


def test_a_credential_in_spark_conf_is_named_but_its_value_never_shown(lake_root):
    with pytest.raises(CatalogError) as excinfo:
        load_catalog(CATALOGS / "credential_in_spark_conf.yaml", lake_root, strict=True)
    message = str(excinfo.value)
    assert "'spark.hadoop.fs.s3a.secret.key'" in message
    assert "wJalrXUtnFEMI" not in message
    # The provider class is the supported way in, not a credential.
    assert "aws.credentials.provider'" not in message


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


def test_a_schema_field_yaml_reads_as_a_boolean_says_to_quote_it(tmp_path, lake_root):
    file = write_catalog(
        tmp_path, "topics:\n  - {name: orders, freshness_sla: 1h, parsed: {schema: {on: string}}}\n"
    )
    with pytest.raises(CatalogError, match="True is not a non-empty field name: quote it") as caught:
        load_catalog(file, lake_root)
    assert caught.value.field == "parsed.schema"


def _one_topic(tmp_path, extra: str) -> Path:
    return write_catalog(tmp_path, f"topics:\n  - name: orders\n    freshness_sla: 1h\n{extra}")


def test_a_registry_format_takes_its_registry_connection(tmp_path, lake_root):
    file = _one_topic(tmp_path, "    format: avro\n    registry_conn_id: schemas\n")
    topic = load_catalog(file, lake_root).topic("orders")
    assert (topic.format, topic.registry_conn_id, topic.uses_registry) == ("avro", "schemas", True)
    assert topic.registry_subject == "orders-value"
    assert topic.registry_schema_dir == f"{topic.schema_dir}/registry"
    framed = load_catalog(_one_topic(tmp_path, "    format: json_schema\n"), lake_root).topic("orders")
    assert (framed.parsed.framed, framed.uses_registry) == (True, False)
    plain = load_catalog(_one_topic(tmp_path, ""), lake_root).topic("orders")
    assert not plain.parsed.framed
    assert (plain.format, plain.registry_conn_id, plain.uses_registry) == ("json", None, False)
    assert plain.key_format is None


@pytest.mark.parametrize(
    ("extra", "key_format"),
    [
        ("    format: avro\n    registry_conn_id: s\n    key_format: avro\n", "avro"),
        ("    format: avro\n    registry_conn_id: s\n    key_format: json_schema\n", "json_schema"),
        ("    format: json_schema\n    key_format: json_schema\n", "json_schema"),
        ("    format: protobuf\n    registry_conn_id: s\n    key_format: protobuf\n", "protobuf"),
        ("    format: protobuf\n    registry_conn_id: s\n    key_format: avro\n", "avro"),
        ("    format: avro\n    registry_conn_id: s\n    key_format: protobuf\n", "protobuf"),
    ],
)
def test_framed_keys_go_beside_a_registry_format(tmp_path, lake_root, extra, key_format):
    topic = load_catalog(_one_topic(tmp_path, extra), lake_root).topic("orders")
    assert (topic.key_format, topic.registry_key_subject) == (key_format, "orders-key")


@pytest.mark.parametrize(
    ("extra", "field", "says"),
    [
        ("    format: protobuf3\n", "format", "must be one of json, debezium, avro, protobuf, json_schema"),
        (
            "    format: json_schema\n    registry_conn_id: s\n",
            "registry_conn_id",
            "schema ids are not looked up",
        ),
        ("    format: avro\n", "registry_conn_id", "required with format avro"),
        ("    format: protobuf\n", "registry_conn_id", "required with format protobuf"),
        ("    registry_conn_id: schemas\n", "registry_conn_id", "does nothing with format json"),
        ("    format: avro\n    registry_conn_id: ''\n", "registry_conn_id", "must be the id of an Airflow"),
        (
            "    format: avro\n    registry_conn_id: schemas\n    parsed: {schema: {id: bigint}}\n",
            "parsed.schema",
            "the registry's schema is the table's",
        ),
        (
            "    format: avro\n    registry_conn_id: s\n    key_format: string\n",
            "key_format",
            "must be one of",
        ),
        ("    format: json_schema\n    key_format: avro\n", "key_format", "must be one of avro"),
        # Decoded with the registry's schemas, as Avro keys: the values' registry is needed.
        ("    format: json_schema\n    key_format: protobuf\n", "key_format", "protobuf keys are decoded"),
        ("    key_format: json_schema\n", "key_format", "does nothing with format json"),
    ],
)
def test_a_bad_format_or_registry_connection_names_its_field(tmp_path, lake_root, extra, field, says):
    file = _one_topic(tmp_path, extra)
    with pytest.raises(CatalogError) as excinfo:
        load_catalog(file, lake_root)
    assert_names_where(excinfo.value, file, "orders", field)
    assert says in str(excinfo.value)
