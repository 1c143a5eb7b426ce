"""The discovery DAG of a routed entry (``topic_pattern`` + ``table_per_topic``): which topics match.

One DAG per routed entry, ``discover_<name>``, one task, no JVM: it lists the cluster's topics
(librdkafka's metadata, as the family pre-flight does) and records those that match in the entry's
discovery file (:mod:`kafkalake.config.routing`), whole or not at all. The DAG factory reads that
file at its next parse and builds one ordinary single-topic DAG per recorded topic.

Two topics that would land in one table fail the task (``bad_config``, not retried), naming both
and the entry; the file is left as it was, so the DAGs already built keep running. A recorded topic
Kafka no longer has keeps its DAG and its table, and is reported here (a warning and the task's
return value) until it comes back.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG

from kafkalake.airflow.connections import kafka_config_for
from kafkalake.config.catalog import Catalog, load_catalog
from kafkalake.config.family import matches
from kafkalake.config.routing import Route, discovery_text, read_discovered, route_tables, write_discovered
from kafkalake.core.errors import CatalogError
from kafkalake.kafka import offsets

log = logging.getLogger(__name__)

DISCOVERY_TASK_ID = "discover_topics"


def discover(catalog_file: Path, lake_root: Path, route_name: str, existing: set[str]) -> dict[str, Any]:
    """Record the routed entry's matching topics among ``existing`` (every topic Kafka has now).

    Returns what the task reports: the topics recorded, those new to the file, those missing.

    Raises:
        CatalogError: the entry is gone or broken, its discovery file is unreadable, or two topics
            would land in one table (the file is then not written).
    """
    catalog = load_catalog(catalog_file, lake_root, strict=False)
    route = _route(catalog, route_name)
    before = read_discovered(route.discovery_file, catalog.file, route.name)
    found = sorted(t for t in existing if matches(route.topic_pattern, t))
    try:
        tables = route_tables(route.topic_pattern, route.table_per_topic, {*found, *before.topics})
    except ValueError as err:
        raise CatalogError(
            catalog.file,
            f"{err}; the discovery file {route.discovery_file} is unchanged, the DAGs already built keep "
            "running",
            route.name,
            "table_per_topic",
        ) from None
    text, record = discovery_text(found, before, datetime.now(UTC))
    write_discovered(route.discovery_file, text)
    new = sorted(set(record.topics) - set(before.topics))
    for topic in new:
        log.info(
            "%s: new topic %s -> table %s: its DAG appears at the next parse",
            route.name,
            topic,
            tables[topic],
        )
    if record.missing:
        log.warning(
            "%s: Kafka no longer has %s: their DAGs and tables stay (runs fail with topic_missing until "
            "they come back)",
            route.name,
            ", ".join(record.missing),
        )
    log.info("%s: %d topics recorded in %s", route.name, len(record.topics), route.discovery_file)
    return {"topics": tables, "new": new, "missing": list(record.missing)}


def _route(catalog: Catalog, name: str) -> Route:
    for route in catalog.routes:
        if route.name == name:
            return route
    for error in catalog.errors:
        if error.topic == name:
            raise error
    known = ", ".join(r.name for r in catalog.routes) or "none"
    raise CatalogError(catalog.file, f"no routed entry named {name!r} (known: {known})")


def discover_topics(catalog_file: str, lake_root: str, route_name: str, kafka_conn_id: str) -> dict[str, Any]:
    """The discovery task: :func:`discover` with the topics the entry's Kafka connection sees."""
    existing = offsets.topic_names(kafka_config_for(kafka_conn_id))
    return discover(Path(catalog_file), Path(lake_root), route_name, existing)


def discovery_dag(route: Route, catalog: Catalog, lake: Path, start_date: Any, retry_policy: Any) -> DAG:
    with DAG(
        dag_id=route.dag_id,
        description=f"Kafka topics matching {route.topic_pattern!r}, a table each ({route.table_per_topic})",
        schedule=route.interval,
        start_date=start_date,
        catchup=False,
        max_active_runs=1,
        doc_md=(
            f"### Topic discovery for `{route.topic_pattern}` → `{route.table_per_topic}`\n\n"
            f"Lists the topics Kafka has (no JVM) and records those that match in `{route.discovery_file}`; "
            "the next parse of the DAG file gives each an ingest DAG of its own. Two topics that would "
            "land in one table fail this task (the file is left as it was). A recorded topic Kafka no "
            "longer has keeps its DAG and is reported here."
        ),
        tags=sorted({"kafkalake", "discovery", *route.tags}),
        default_args={
            "owner": route.owner,
            "retries": 3,
            "retry_delay": timedelta(minutes=1),
            "retry_exponential_backoff": 2.0,
            "retry_policy": retry_policy,
        },
    ) as dag:
        PythonOperator(
            task_id=DISCOVERY_TASK_ID,
            python_callable=discover_topics,
            op_kwargs={
                "catalog_file": str(catalog.file),
                "lake_root": str(lake),
                "route_name": route.name,
                "kafka_conn_id": route.kafka_conn_id,
            },
            execution_timeout=timedelta(minutes=5),
        )
    return dag
