"""Fixtures of the Airflow side's unit tests: the DAGs of the policy catalog, and an ``ingest`` task."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from airflow.dag_processing.dagbag import DagBag

from kafkalake.airflow import run_metrics_emit
from kafkalake.kafka import offsets as kafka_offsets

from .dag_helpers import (
    FOUR_TOPICS,
    POLICY,
    parse_dags,
    set_catalog,
)


@pytest.fixture(scope="module")
def policy_lake(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("policy-lake")


@pytest.fixture(scope="module")
def policy_bag(policy_lake) -> DagBag:
    with pytest.MonkeyPatch.context() as mp:
        set_catalog(mp, POLICY, policy_lake, strict=True)
        bag = parse_dags()
    assert bag.import_errors == {}
    return bag


@pytest.fixture
def ingest_task(monkeypatch, tmp_path) -> Any:
    """A fresh ``ingest`` task (tests below change its state) from a parsed DAG."""
    set_catalog(monkeypatch, FOUR_TOPICS, tmp_path / "lake", strict=True)
    # The lag metrics ask Kafka for offsets; these tests' brokers do not exist, and each ask would
    # wait for its timeout. tests/integration/test_ingest_dag.py measures the lag on a real broker.
    monkeypatch.setattr(run_metrics_emit, "lag_now", lambda config, topic: None)
    monkeypatch.setattr(run_metrics_emit, "lag_and_marks", lambda config, topic: (None, {}))
    # Likewise the topic's ID (tests/integration/test_lost_state.py checks it on a real broker).
    monkeypatch.setattr(kafka_offsets, "topic_id", lambda config, topic: "topic-id-1")
    return parse_dags().dags["ingest_payments"].get_task("ingest")
