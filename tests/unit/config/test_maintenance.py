"""The catalog's ``maintenance:`` block: defaults, every key, and errors that name the field."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from kafkalake.config.catalog import load_catalog
from kafkalake.config.maintenance import MaintenanceConfig, interval_of
from kafkalake.core.errors import CatalogError

GOOD = Path(__file__).resolve().parents[2] / "fixtures" / "maintenance" / "good.yaml"


def load_one(tmp_path: Path, block: str) -> MaintenanceConfig:
    file = tmp_path / "topics.yaml"
    file.write_text(f"topics:\n  - name: orders\n    freshness_sla: 6h\n    maintenance:\n{block}")
    return load_catalog(file, tmp_path / "lake").topic("orders").maintenance


def test_every_key_is_parsed(tmp_path):
    catalog = load_catalog(GOOD, tmp_path)
    orders = catalog.topic("orders").maintenance
    assert orders.optimize_every == timedelta(hours=12)
    assert orders.zorder_by == ("customer_id", "order_ts")
    assert orders.cluster_by == ()
    assert orders.vacuum_retain == timedelta(days=14)
    assert orders.allow_vacuum_retain_below_7d is False
    assert orders.properties == (
        ("delta.autoOptimize.optimizeWrite", "true"),
        ("delta.logRetentionDuration", "interval 30 days"),
    )
    fast = catalog.topic("fast").maintenance
    assert fast.optimize_every is None
    assert fast.vacuum_every == timedelta(days=1)
    assert fast.cluster_by == ("user_id",)
    assert fast.layout_columns == ("user_id",)
    assert fast.vacuum_retain == timedelta(0)


def test_no_block_means_the_documented_defaults(tmp_path):
    clicks = load_catalog(GOOD, tmp_path).topic("clicks").maintenance
    assert clicks == MaintenanceConfig()
    assert clicks.optimize_every == timedelta(days=1)
    assert clicks.vacuum_retain == timedelta(days=7)
    assert clicks.zorder_by == clicks.cluster_by == clicks.properties == ()


def test_defaults_block_applies_to_topics(tmp_path):
    file = tmp_path / "topics.yaml"
    file.write_text(
        "defaults:\n  maintenance: {optimize_every: 2d}\n"
        "topics:\n  - name: a\n    freshness_sla: 1h\n"
        "  - name: b\n    freshness_sla: 1h\n    maintenance: {optimize_every: 3h}\n"
    )
    catalog = load_catalog(file, tmp_path)
    assert catalog.topic("a").maintenance.optimize_every == timedelta(days=2)
    assert catalog.topic("b").maintenance.optimize_every == timedelta(hours=3)


@pytest.mark.parametrize(
    ("block", "field", "says"),
    [
        ("      - 1\n", "maintenance", "must be a mapping"),
        ("      optimise_every: 1d\n", "maintenance.optimise_every", "unknown key"),
        ("      optimize_every: soon\n", "maintenance.optimize_every", "not a duration"),
        ("      zorder_by: customer_id\n", "maintenance.zorder_by", "list of column names"),
        ("      zorder_by: [a, a]\n", "maintenance.zorder_by", "twice"),
        # YAML's false or 0 is a mistake, not "no columns" (it was taken as none, silently).
        ("      zorder_by: false\n", "maintenance.zorder_by", "list of column names"),
        ("      cluster_by: 0\n", "maintenance.cluster_by", "list of column names"),
        ("      cluster_by: ['bad name']\n", "maintenance.cluster_by", "list of column names"),
        ("      zorder_by: [a]\n      cluster_by: [b]\n", "maintenance.cluster_by", "mutually exclusive"),
        ("      vacuum_retain: 6d\n", "maintenance.vacuum_retain", "7-day guard"),
        ("      vacuum_retain: 0h\n", "maintenance.vacuum_retain", "allow_vacuum_retain_below_7d"),
        ("      vacuum_retain: forever\n", "maintenance.vacuum_retain", "not a duration"),
        (
            "      allow_vacuum_retain_below_7d: 'yes'\n",
            "maintenance.allow_vacuum_retain_below_7d",
            "true or false",
        ),
        ("      properties: [a]\n", "maintenance.properties", "must map"),
        (
            "      properties: {delta.appendOnly: false}\n",
            "maintenance.properties.delta.appendOnly",
            "never turn that off",
        ),
        (
            "      properties: {delta.appendOnly: true}\n",
            "maintenance.properties.delta.appendOnly",
            "kafkalake owns this property",
        ),
        (
            "      properties: {delta.deletedFileRetentionDuration: 'interval 2 days'}\n",
            "maintenance.properties.delta.deletedFileRetentionDuration",
            "7-day VACUUM guard",
        ),
        (
            "      properties: {delta.deletedFileRetentionDuration: 'two weeks'}\n",
            "maintenance.properties.delta.deletedFileRetentionDuration",
            "interval 7 days",
        ),
        (
            # timedelta's OverflowError escaped the catalog, even in lenient mode.
            "      properties: {delta.deletedFileRetentionDuration: 'interval 99999999999 days'}\n",
            "maintenance.properties.delta.deletedFileRetentionDuration",
            "too long to be a duration",
        ),
        # Set on the table as "None" and "{'name': 'x'}" before.
        (
            "      properties: {delta.logRetentionDuration: null}\n",
            "maintenance.properties.delta.logRetentionDuration",
            "single value",
        ),
        ("      properties: {team: {name: x}}\n", "maintenance.properties.team", "single value"),
        ("      optimize_write: 'yes'\n", "maintenance.optimize_write", "true or false"),
        (
            "      auto_compact: true\n      properties: {delta.autoOptimize.autoCompact: false}\n",
            "maintenance.auto_compact",
            "also set as properties.delta.autoOptimize.autoCompact",
        ),
        ("      partition_by: [a]\n", "maintenance.partition_by", "'ingestion_date' or a column name"),
        ("      partition_by: 'event date'\n", "maintenance.partition_by", "a column name"),
        (
            "      partition_by: ingestion_date\n      cluster_by: [a]\n",
            "maintenance.partition_by",
            "either partitioned or liquid-clustered",
        ),
        (
            "      partition_by: country\n      zorder_by: [country, id]\n",
            "maintenance.partition_by",
            "Z-ORDER cannot use a partition column",
        ),
        ("      partition_by: _kafka\n", "maintenance.partition_by", "a struct kafkalake writes"),
    ],
)
def test_every_error_names_file_topic_and_field(tmp_path, block, field, says):
    with pytest.raises(CatalogError) as raised:
        load_one(tmp_path, block)
    err = raised.value
    assert err.field == field
    assert err.topic == "orders"
    assert f"field {field!r}" in str(err)
    assert str(tmp_path / "topics.yaml") in str(err)
    assert says in str(err)


def test_below_seven_days_is_allowed_with_the_named_opt_in(tmp_path):
    config = load_one(
        tmp_path,
        "      vacuum_retain: 1d\n      allow_vacuum_retain_below_7d: true\n"
        "      properties: {delta.deletedFileRetentionDuration: 'interval 1 day'}\n",
    )
    assert config.vacuum_retain == timedelta(days=1)
    assert config.allow_vacuum_retain_below_7d


def test_lenient_mode_keeps_the_other_topics(tmp_path):
    file = tmp_path / "topics.yaml"
    file.write_text(
        "topics:\n  - name: a\n    freshness_sla: 1h\n    maintenance: {vacuum_retain: 1h}\n"
        "  - name: b\n    freshness_sla: 1h\n"
    )
    catalog = load_catalog(file, tmp_path, strict=False)
    assert [t.name for t in catalog.topics] == ["b"]
    assert catalog.errors[0].field == "maintenance.vacuum_retain"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("interval 30 days", timedelta(days=30)),
        ("INTERVAL 1 day", timedelta(days=1)),
        ("interval 12 hours", timedelta(hours=12)),
        ("interval 2 weeks", timedelta(weeks=2)),
        ("30 days", None),
    ],
)
def test_interval_of(text, expected):
    assert interval_of(text) == expected


def test_partitioning_and_write_switches(tmp_path):
    config = load_one(
        tmp_path,
        "      partition_by: ingestion_date\n      optimize_write: true\n      auto_compact: false\n"
        "      properties: {delta.logRetentionDuration: 'interval 30 days'}\n",
    )
    assert config.partition_by == "ingestion_date"
    # The switches are the properties they stand for: kept in step like every other property.
    assert config.properties == (
        ("delta.autoOptimize.autoCompact", "false"),
        ("delta.autoOptimize.optimizeWrite", "true"),
        ("delta.logRetentionDuration", "interval 30 days"),
    )
    assert load_one(tmp_path, "      partition_by: country\n").partition_by == "country"
    assert MaintenanceConfig().partition_by is None


def load_topic(tmp_path: Path, fields: str) -> None:
    file = tmp_path / "topics.yaml"
    file.write_text(f"topics:\n  - name: orders\n    freshness_sla: 6h\n{fields}")
    load_catalog(file, tmp_path / "lake")


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        (
            "    parsed: false\n    maintenance: {partition_by: country}\n",
            "bronze can only be partitioned by 'ingestion_date'",
        ),
        (
            "    parsed: {schema: {id: bigint}}\n    maintenance: {partition_by: country}\n",
            "the pinned parsed.schema has no field 'country' (it has id)",
        ),
        (
            "    parsed: {schema: {tags: 'array<string>'}}\n    maintenance: {partition_by: tags}\n",
            "Delta partitions by simple types only",
        ),
        (
            "    parsed: {schema: {ingestion_date: date}}\n    maintenance: {partition_by: ingestion_date}\n",
            "the name of the derived partition column",
        ),
    ],
)
def test_partition_by_is_checked_against_the_parsed_config(tmp_path, fields, says):
    with pytest.raises(CatalogError) as raised:
        load_topic(tmp_path, fields)
    assert raised.value.field == "maintenance.partition_by"
    assert raised.value.topic == "orders"
    assert says in str(raised.value)


def test_partition_by_a_pinned_field_or_ingestion_date_without_parsed_tables(tmp_path):
    load_topic(
        tmp_path, "    parsed: {schema: {country: string}}\n    maintenance: {partition_by: country}\n"
    )
    load_topic(tmp_path, "    parsed: false\n    maintenance: {partition_by: ingestion_date}\n")
