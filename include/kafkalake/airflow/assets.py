"""A topic's Delta tables as Airflow assets, so that other DAGs can be scheduled on their data.

Each table is an :class:`~airflow.sdk.Asset` and an outlet of the task that writes it: when
``ingest`` succeeds, Airflow records an asset event, and DAGs scheduled on the asset run. A skipped
ingest (nothing new in Kafka) records none.

* **name**: the qualified table name, ``bronze.orders``: what a downstream DAG refers to
  (``schedule=[Asset.ref(name="bronze.orders")]``), without knowing where the table lives;
* **uri**: where it lives. A local path becomes ``file:///…`` (Airflow 3.3 normalises the ``file``
  scheme itself, with no warning); an object-store location (``s3a://``, ``abfss://``) is kept as
  the catalog gives it (no provider registers a normaliser for ``s3a``, so Airflow keeps it as is).
"""

from __future__ import annotations

from pathlib import Path

from airflow.sdk import Asset

from kafkalake.config.tables import Table, topic_tables
from kafkalake.config.topic import TopicConfig


def asset_uri(location: str) -> str:
    """``/data/lake/bronze/orders`` → ``file:///data/lake/bronze/orders``; URIs pass through."""
    return location if "://" in location else Path(location).as_uri()


def table_asset(table: Table) -> Asset:
    return Asset(name=table.name, uri=asset_uri(table.location))


def topic_assets(topic: TopicConfig) -> list[Asset]:
    """The assets of every table of the topic, in :func:`topic_tables` order."""
    return [table_asset(table) for table in topic_tables(topic)]
