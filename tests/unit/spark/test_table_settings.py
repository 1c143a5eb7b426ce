"""What the catalog asks of each table at creation and on every run: partitioning and properties."""

from __future__ import annotations

from datetime import timedelta

from pyspark.sql.types import ArrayType, LongType, MapType, StringType, StructField, StructType

from kafkalake.config.maintenance import MaintenanceConfig
from kafkalake.config.parsed import ParsedConfig
from kafkalake.config.tables import BRONZE_COLUMNS, Table, topic_tables
from kafkalake.config.topic import TopicConfig
from kafkalake.spark.stream import bronze_schema
from kafkalake.spark.table_settings import (
    BRONZE_STATS_COLUMNS,
    TOPIC_PROPERTY,
    GeneratedColumn,
    as_nullable,
    partitioning_mismatch,
    properties_to_set,
    settings_for,
)

PROPS = (("delta.autoOptimize.optimizeWrite", "true"),)


def topic(partition_by: str | None = None) -> TopicConfig:
    return TopicConfig(
        name="orders",
        freshness_sla=timedelta(hours=6),
        table="orders",
        path="/lake/o",
        parsed=ParsedConfig(latest_by_key=True),
        maintenance=MaintenanceConfig(properties=PROPS, partition_by=partition_by),
    )


def by_kind(partition_by: str | None) -> dict[str, tuple[tuple[str, ...], tuple[GeneratedColumn, ...]]]:
    config = topic(partition_by)
    return {
        t.kind: (settings_for(config, t).partition_by, settings_for(config, t).generated)
        for t in topic_tables(config)
    }


def test_ingestion_date_partitions_every_appended_table_by_a_generated_column():
    kinds = by_kind("ingestion_date")
    assert kinds["bronze"] == (
        ("ingestion_date",),
        (GeneratedColumn("ingestion_date", "DATE", "CAST(ingested_at AS DATE)"),),
    )
    assert kinds["dead_letter"] == kinds["bronze"]
    assert kinds["parsed"] == (
        ("ingestion_date",),
        (GeneratedColumn("ingestion_date", "DATE", "CAST(_kafka.ingested_at AS DATE)"),),
    )
    # MERGE updates the latest rows in place: never partitioned.
    assert kinds["latest"] == ((), ())


def test_a_column_partitions_only_the_parsed_table():
    kinds = by_kind("country")
    assert kinds["parsed"] == (("country",), ())
    assert kinds["bronze"] == kinds["dead_letter"] == kinds["latest"] == ((), ())


def test_no_partitioning_by_default_and_properties_everywhere_with_append_only_on_bronze():
    config = topic()
    settings = {t.kind: settings_for(config, t) for t in topic_tables(config)}
    assert all(s.partition_by == () and s.generated == () for s in settings.values())
    owner = {TOPIC_PROPERTY: config.name}
    assert dict(settings["bronze"].properties) == {
        **dict(PROPS),
        **owner,
        "delta.appendOnly": "true",
        "delta.dataSkippingStatsColumns": "partition,offset,kafka_timestamp,ingested_at",
    }
    for kind in ("parsed", "dead_letter", "latest"):
        assert dict(settings[kind].properties) == {**dict(PROPS), **owner}


def test_bronze_keeps_statistics_of_what_it_is_read_and_laid_out_by_unless_the_catalog_says():
    def bronze_properties(**maintenance: object) -> dict[str, str]:
        config = TopicConfig(
            name="orders",
            freshness_sla=timedelta(hours=6),
            table="orders",
            path="/lake/o",
            maintenance=MaintenanceConfig(**maintenance),  # type: ignore[arg-type]
        )
        bronze = next(t for t in topic_tables(config) if t.kind == "bronze")
        return dict(settings_for(config, bronze).properties)

    stats = "delta.dataSkippingStatsColumns"
    # Z-order by a bronze column and a parsed one: only bronze's joins bronze's statistics.
    laid_out = bronze_properties(zorder_by=("kafka_timestamp_type", "key", "amount"))
    assert laid_out[stats] == "partition,offset,kafka_timestamp,ingested_at,kafka_timestamp_type,key"
    clustered = bronze_properties(cluster_by=("offset", "topic"))
    assert clustered[stats] == "partition,offset,kafka_timestamp,ingested_at,topic"
    own = bronze_properties(properties=((stats, "offset"),))
    assert own[stats] == "offset"
    counted = bronze_properties(properties=(("delta.dataSkippingNumIndexedCols", "5"),))
    assert stats not in counted and counted["delta.dataSkippingNumIndexedCols"] == "5"


def test_the_bronze_columns_known_for_statistics_are_bronze_s():
    assert BRONZE_COLUMNS == tuple(bronze_schema().fieldNames())
    assert set(BRONZE_STATS_COLUMNS) <= set(BRONZE_COLUMNS)


def test_partitioning_mismatch_names_table_both_layouts_and_the_way_out():
    table = Table("bronze.orders", "/lake/o")
    assert partitioning_mismatch(table, ("ingestion_date",), ["ingestion_date"]) is None
    assert partitioning_mismatch(table, (), []) is None
    added = partitioning_mismatch(table, ("ingestion_date",), [])
    assert added is not None
    assert "table bronze.orders at /lake/o is not partitioned, but the catalog wants it" in added
    assert "wants it partitioned by ingestion_date" in added
    assert "Delta cannot re-partition a table in place" in added
    assert "(no maintenance.partition_by)" in added and "kafkalake.cli.full_refresh" in added
    removed = partitioning_mismatch(table, (), ["ingestion_date"])
    assert removed is not None and "(maintenance.partition_by: ingestion_date)" in removed


def test_properties_to_set_are_the_missing_and_the_different():
    wanted = {"a": "1", "b": "2", "c": "3"}
    assert properties_to_set(wanted, {"a": "1", "b": "x", "z": "9"}) == {"b": "2", "c": "3"}
    assert properties_to_set(wanted, wanted) == {}


def test_as_nullable_loosens_every_level():
    strict = StructType(
        [
            StructField("id", LongType(), False),
            StructField(
                "_kafka",
                StructType([StructField("offset", LongType(), False)]),
                False,
            ),
            StructField("tags", ArrayType(StringType(), containsNull=False), False),
            StructField("attrs", MapType(StringType(), LongType(), valueContainsNull=False), False),
        ]
    )
    loose = as_nullable(strict)
    assert loose == StructType(
        [
            StructField("id", LongType()),
            StructField("_kafka", StructType([StructField("offset", LongType())])),
            StructField("tags", ArrayType(StringType())),
            StructField("attrs", MapType(StringType(), LongType())),
        ]
    )
