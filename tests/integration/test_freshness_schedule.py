"""``schedule: freshness`` in a real Airflow (``airflow standalone``: its triggerer runs the watcher)
on the session's broker: records produced, the watcher queues a run with no trigger by hand, and the
rows land; nothing produced for longer than the heartbeat (SLA / 3), and no run is queued (nothing
waits, Kafka and the table are in sight, no care is due); more records, and a run is queued for them
(a file's worth waits).

A server of its own (its catalog has only this topic): SLA 3m (heartbeat 1m), floor 10s,
``file_bytes: 1`` (any record waiting is a file's worth once the table knows its bytes per row).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from kafkalake.config.topic import dag_id_for
from kafkalake.dev import local_airflow, producer
from kafkalake.dev.broker import LocalKafka
from kafkalake.dev.producer import Record
from kafkalake.dev.standalone_airflow import StandaloneAirflow, free_port, wait_for

from .helpers import assert_exactly_once, read_rows

pytestmark = [pytest.mark.integration, pytest.mark.freshness]

TOPIC = "fresh-events"
DAG_ID = dag_id_for(TOPIC)
CATALOG = f"""\
topics:
  - name: {TOPIC}
    freshness_sla: 3m
    parsed: false
    schedule: {{mode: freshness, floor: 10s, file_bytes: 1}}
"""
START_TIMEOUT = 420
# A whole run: check, ingest, the first registration (a new Derby metastore) and table care, each a
# task of its own. CI's loaded run of 0ad405e took over 240 s for the first one (register_table
# 91 s, maintain_table still running), so the wait is generous; it is dead time, not a race.
RUN_TIMEOUT = 600


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, kafka: LocalKafka) -> Iterator[StandaloneAirflow]:
    root = tmp_path_factory.mktemp("freshness-airflow")
    catalog = root / "topics.yaml"
    catalog.write_text(CATALOG)
    home, lake = root / "home", root / "lake"
    env = local_airflow.environment(
        home, kafka_bootstrap=kafka.bootstrap_servers, catalog=catalog, lake_root=lake
    )
    env = local_airflow.standalone_environment(
        env, port=free_port(), log_server_ports=(free_port(), free_port())
    )
    env.update({"KAFKALAKE_STRICT": "1", "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2"})
    airflow = StandaloneAirflow(
        url=f"http://127.0.0.1:{env['AIRFLOW__API__PORT']}", home=home, env=env, log=root / "standalone.log"
    )
    producer.create_topic(kafka.bootstrap_servers, TOPIC, partitions=2)
    local_airflow.init_db(env)
    try:
        airflow.start()
        wait_for(airflow.healthy, what="Airflow to be healthy", timeout=START_TIMEOUT, every=2)
        wait_for(lambda: airflow.dags_parsed(DAG_ID), what="the DAG to be parsed", timeout=120, every=2)
        yield airflow
    finally:
        airflow.stop()


def produce(kafka: LocalKafka, first: int, count: int) -> None:
    records = [
        Record(f"k{i}".encode(), json.dumps({"n": i}).encode(), i % 2) for i in range(first, first + count)
    ]
    assert len(producer.produce(kafka.bootstrap_servers, TOPIC, records)) == count


def runs(server: StandaloneAirflow) -> list[tuple[Any, ...]]:
    """(run_id, run_type, state, queued_at) of the DAG's runs, oldest first."""
    return server.query(
        "SELECT run_id, run_type, state, queued_at FROM dag_run WHERE dag_id = :d ORDER BY id", d=DAG_ID
    )


def reasons(server: StandaloneAirflow) -> list[str]:
    """Why the watcher queued each run: the reasons its events carried, oldest first."""
    rows = server.query(
        "SELECT e.extra FROM asset_event e JOIN asset a ON a.id = e.asset_id WHERE a.name = :n ORDER BY e.id",
        n=f"{DAG_ID}.freshness",
    )
    return [json.loads(extra)["payload"]["reason"] for (extra,) in rows]


def landed(server: StandaloneAirflow, lake: Path, count: int) -> bool:
    table = lake / "bronze" / TOPIC.replace("-", "_")
    done = [r for r in runs(server) if r[2] in ("success", "failed")]
    assert all(r[2] == "success" for r in done), server.runs_report(DAG_ID)
    # A table being created has its _delta_log folder before its first commit: not landed yet (a
    # read then fails "No files in log segment"; seen in a clean-clone suite run).
    return (
        DeltaTable.is_deltatable(str(table))
        and len(read_rows(table)) >= count
        and not any(r[2] in ("queued", "running") for r in runs(server))
    )


@pytest.mark.timeout(START_TIMEOUT + 3 * RUN_TIMEOUT + 300)
def test_the_watcher_queues_runs_for_what_waits_and_none_when_nothing_does(
    server: StandaloneAirflow, kafka: LocalKafka
):
    lake = Path(server.env["KAFKALAKE_LAKE_ROOT"])
    table = lake / "bronze" / TOPIC.replace("-", "_")
    produce(kafka, 0, 6)
    server.api("PATCH", f"/dags/{DAG_ID}", json={"is_paused": False})

    explain = lambda: f"reasons: {reasons(server)}\n{server.runs_report(DAG_ID)}"  # noqa: E731
    wait_for(
        lambda: landed(server, lake, 6),
        what="the first 6 records to land",
        timeout=RUN_TIMEOUT,
        every=2,
        explain=explain,
    )
    assert_exactly_once(read_rows(table), TOPIC, kafka.bootstrap_servers)
    first = runs(server)
    assert {r[1] for r in first} == {"asset_triggered"}, first

    # Nothing produced: no event for a heartbeat (a minute after the last run was queued) and a
    # poll (10 s) to spare. The fixed schedule would have run here; such a run lands nothing.
    idle_from = len(reasons(server))
    time.sleep(75)
    assert reasons(server)[idle_from:] == [], explain()

    # Records produced now are queued for themselves: a file's worth, past the 10 s floor.
    produce(kafka, 6, 4)
    wait_for(
        lambda: landed(server, lake, 10),
        what="the next 4 records to land",
        timeout=RUN_TIMEOUT,
        every=2,
        explain=explain,
    )
    rows = read_rows(table)
    assert len(rows) == 10
    assert_exactly_once(rows, TOPIC, kafka.bootstrap_servers)
    later = runs(server)[len(first) :]
    assert later and {r[1] for r in later} == {"asset_triggered"}, later
    queued_for = reasons(server)[idle_from:]
    assert queued_for and all("file's worth" in reason for reason in queued_for), reasons(server)
    # One run per event at most (max_active_runs folds events that wait into one run).
    assert len(runs(server)) <= len(reasons(server)), explain()
