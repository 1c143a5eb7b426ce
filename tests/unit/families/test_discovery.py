"""The discovery DAG of a routed entry: it records the matching topics (given here as the set Kafka
would list), refuses two topics that map to one table without touching the file, reports a topic
Kafka lost, and the DAG factory's next parse has a DAG per recorded topic."""

from __future__ import annotations

import logging

import pytest

from kafkalake.config.catalog import load_catalog
from kafkalake.config.routing import discovery_file, read_discovered
from kafkalake.core.errors import CatalogError

pytestmark = pytest.mark.families

CATALOG = r"""
topics:
  - topic_pattern: 'shop\.public\.(.*)'
    table_per_topic: 'shop_\1'
    freshness_sla: 15m
    tags: [cdc]
"""


@pytest.fixture
def catalog(tmp_path, monkeypatch):
    file = tmp_path / "topics.yaml"
    file.write_text(CATALOG)
    monkeypatch.setenv("KAFKALAKE_CATALOG", str(file))
    monkeypatch.setenv("KAFKALAKE_LAKE_ROOT", str(tmp_path / "lake"))
    return file


def test_discovery_records_the_matching_topics_and_the_next_parse_has_their_dags(catalog, tmp_path):
    from kafkalake.airflow.dag_factory import build_dags
    from kafkalake.airflow.discovery import discover

    before = build_dags(strict=True)
    assert "discover_shop" in before and not any(d.startswith("ingest_shop") for d in before)
    assert set(before["discover_shop"].tags) == {"cdc", "discovery", "kafkalake"}

    found = discover(catalog, tmp_path / "lake", "shop", {"shop.public.customers", "shop.public.orders", "x"})

    assert found["topics"] == {"shop.public.customers": "shop_customers", "shop.public.orders": "shop_orders"}
    assert found["new"] == ["shop.public.customers", "shop.public.orders"] and found["missing"] == []
    after = build_dags(strict=True)
    dag = after["ingest_shop_public_customers"]
    assert dag.get_task("ingest").application_args == ["--topic", "shop.public.customers"]
    assert "discover_shop" in after and "ingest_shop_public_orders" in after


def test_two_topics_for_one_table_fail_discovery_and_leave_the_file_and_dags(catalog, tmp_path):
    from kafkalake.airflow.dag_factory import build_dags
    from kafkalake.airflow.discovery import discover

    discover(catalog, tmp_path / "lake", "shop", {"shop.public.a-b"})
    file = discovery_file(tmp_path / "lake", catalog, "shop")
    text = file.read_text()

    with pytest.raises(CatalogError) as raised:
        discover(catalog, tmp_path / "lake", "shop", {"shop.public.a-b", "shop.public.a_b"})

    message = str(raised.value)
    assert "'shop.public.a-b'" in message and "'shop.public.a_b'" in message and "topic 'shop'" in message
    assert "field 'table_per_topic'" in message and str(catalog) in message
    assert file.read_text() == text
    assert "ingest_shop_public_a_b" in build_dags(strict=True)


def test_a_topic_kafka_lost_keeps_its_dag_and_is_reported(catalog, tmp_path, caplog):
    from kafkalake.airflow.dag_factory import build_dags
    from kafkalake.airflow.discovery import discover

    discover(catalog, tmp_path / "lake", "shop", {"shop.public.a", "shop.public.b"})
    with caplog.at_level(logging.WARNING):
        found = discover(catalog, tmp_path / "lake", "shop", {"shop.public.a"})

    assert found["missing"] == ["shop.public.b"] and "Kafka no longer has shop.public.b" in caplog.text
    file = discovery_file(tmp_path / "lake", catalog, "shop")
    assert read_discovered(file, catalog, "shop").missing == ("shop.public.b",)
    assert "ingest_shop_public_b" in build_dags(strict=True)
    assert load_catalog(catalog, tmp_path / "lake").topic("shop.public.b").table == "shop_b"


def test_the_discovery_dag_follows_the_dag_policy(catalog):
    from datetime import timedelta

    from kafkalake.airflow.dag_factory import build_dags

    dag = build_dags(strict=True)["discover_shop"]
    (task,) = dag.tasks
    assert dag.max_active_runs == 1 and not dag.catchup
    assert dag.schedule == timedelta(minutes=5)  # the run interval of a 15m freshness SLA
    assert task.owner == "data-platform" and task.retries == 3
    assert task.op_kwargs == {
        "catalog_file": str(catalog),
        "lake_root": str(catalog.parent / "lake"),
        "route_name": "shop",
        "kafka_conn_id": "kafka_default",
    }
