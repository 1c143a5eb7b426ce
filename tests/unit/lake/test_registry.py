"""The registration records: what the register_table task reads to skip its JVM."""

from __future__ import annotations

import pyarrow as pa
from deltalake import write_deltalake

from kafkalake.config.tables import Table
from kafkalake.lake import registry


def test_a_table_is_recorded_only_at_the_location_it_was_registered_at(tmp_path):
    records = registry.registry_dir(tmp_path / "lake")
    orders = Table("bronze.orders", str(tmp_path / "lake" / "bronze" / "orders"))
    assert not registry.is_recorded(records, orders)
    registry.record(records, orders)
    assert registry.is_recorded(records, orders)
    assert not registry.is_recorded(records, Table("bronze.orders", str(tmp_path / "elsewhere")))
    assert [p.name for p in records.iterdir()] == ["bronze.orders"]  # no partial file left


def test_unregistered_lists_existing_tables_without_a_record(tmp_path):
    records = registry.registry_dir(tmp_path / "lake")
    there = Table("bronze.a", str(tmp_path / "a"))
    not_yet = Table("silver.a", str(tmp_path / "parsed-a"))
    write_deltalake(there.location, pa.table({"offset": [1]}))
    assert registry.unregistered(records, [there, not_yet]) == ["bronze.a"]
    registry.record(records, there)
    assert registry.unregistered(records, [there, not_yet]) == []
    assert registry.unregistered(records, [there, Table("bronze.b", f"file://{tmp_path}/a")]) == ["bronze.b"]


def test_a_recorded_table_on_an_object_store_is_not_looked_up(tmp_path):
    # No store answers at this endpoint: a record at the same location is enough.
    table = Table("bronze.s3", "s3a://bucket/bronze/s3")
    records = registry.registry_dir(tmp_path)
    registry.record(records, table)
    assert registry.unregistered(records, [table]) == []
