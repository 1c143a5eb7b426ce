"""A `format: debezium` topic's DAG: the current-state table is one more table its ingest writes."""

from __future__ import annotations

from airflow.sdk import Asset

from kafkalake.airflow.dag_factory import dag_for
from kafkalake.config.catalog import load_catalog


def test_the_ingest_updates_the_current_state_tables_asset_too(tmp_path):
    file = tmp_path / "catalog.yaml"
    file.write_text("topics:\n  - {name: shop.public.customers, freshness_sla: 1h, format: debezium}\n")
    catalog = load_catalog(file, tmp_path / "lake")
    topic = catalog.topic("shop.public.customers")
    dag = dag_for(topic, catalog, tmp_path / "lake")
    assert dag.get_task("ingest").outlets[-1] == Asset(
        name="silver.shop_public_customers_current", uri=f"file://{topic.current_path}"
    )
    assert [t.task_id for t in dag.tasks if t.outlets] == ["ingest"]
