"""A backfill of a topic's DAG, run by a real scheduler: table care, never an ingest.

The ingest is checkpoint-driven, so a backfill run must not ingest (kafkalake.core.run_mode). The DAG
is unpaused and its first scheduled run lands the topic; then records arrive that no run has read,
and a backfill over past intervals is created through the REST API, as the UI does. Every backfill
run must succeed without starting the ingest, and bronze and its checkpoint must be exactly as before.

It runs on Airflow as deployed (PostgreSQL, tests/integration/airflow_server.py), not on
``airflow standalone``'s SQLite: Airflow does not support creating backfills on SQLite under
concurrent access. There the create commits the backfill before its runs; a "database is locked"
while it writes the runs answers 503, and when the clean-up fails too, the backfill is left active
with no runs (a CI run waited 900 s on one). RUNBOOK.md, "Backfills and re-ingest", says what
on-call does about it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from kafkalake.config.catalog import load_catalog
from kafkalake.config.topic import dag_id_for
from kafkalake.dev import producer
from kafkalake.dev.producer import Record
from kafkalake.lake.checkpoint import read_checkpoint

from .airflow_server import BACKFILL_TOPIC, START_TIMEOUT, DeployedAirflowServer, wait_for
from .helpers import read_rows

pytestmark = [pytest.mark.integration, pytest.mark.services]

FINISHED = ("success", "failed")


def records(start: int, count: int) -> list[Record]:
    return [Record(f"k{i}".encode(), f'{{"seq": {i}}}'.encode(), i % 2) for i in range(start, start + count)]


def dag_runs(server: DeployedAirflowServer, dag_id: str) -> list[tuple[str, str, str]]:
    """(run_id, run_type, state) of every run of the DAG."""
    rows = server.query("SELECT run_id, run_type, state FROM dag_run WHERE dag_id = :dag_id", dag_id=dag_id)
    return [(run_id, kind, state) for run_id, kind, state in rows]


def tasks_of(server: DeployedAirflowServer, dag_id: str, run_id: str) -> dict[str, tuple[str, str | None]]:
    """{task_id: (state, hostname)}; a task that never started has no hostname."""
    rows = server.query(
        "SELECT task_id, state, hostname, try_number FROM task_instance"
        " WHERE dag_id = :dag_id AND run_id = :run_id",
        dag_id=dag_id,
        run_id=run_id,
    )
    # Nothing here is meant to fail: a task that needed a second try fails the test, not passes it.
    retried = {task: tries for task, _state, _host, tries in rows if (tries or 0) > 1}
    assert not retried, f"{run_id}: tasks retried {retried}"
    return {task: (state, host or None) for task, state, host, _tries in rows}


def task_log(server: DeployedAirflowServer, run_id: str, task_id: str) -> str:
    logs = [
        p
        for p in (server.home / "logs").rglob("*.log")
        if f"run_id={run_id}" in str(p) and f"task_id={task_id}" in str(p)
    ]
    return "\n".join(p.read_text(errors="replace") for p in logs)


@pytest.mark.timeout(START_TIMEOUT + 1500)  # may be the test that starts the server
def test_backfill_runs_do_table_care_and_never_ingest(deployed_airflow_server: DeployedAirflowServer, kafka):
    server, bootstrap = deployed_airflow_server, kafka.bootstrap_servers
    name = server.topic_prefix + BACKFILL_TOPIC
    topic = load_catalog(server.catalog, server.lake).topic(name)
    dag_id = dag_id_for(name)
    producer.create_topic(bootstrap, name, partitions=2)
    producer.produce(bootstrap, name, records(0, 300))

    # Backfill runs only start on an unpaused DAG; its first scheduled run lands the 300 records.
    server.api("PATCH", f"/dags/{dag_id}", json={"is_paused": False})
    try:

        def all_finished() -> list[tuple[str, str, str]]:
            runs = dag_runs(server, dag_id)
            return runs if runs and all(state in FINISHED for _, _, state in runs) else []

        first = wait_for(
            all_finished,
            what=f"the first scheduled run of {dag_id}",
            timeout=600,
            every=2,
            explain=lambda: server.runs_report(dag_id),
        )
        [(first_run, kind, state)] = first
        assert (kind, state) == ("scheduled", "success"), server.runs_report(dag_id)
        assert tasks_of(server, dag_id, first_run)["ingest"][0] == "success", server.runs_report(dag_id)
        checkpoint = read_checkpoint(Path(topic.checkpoint_path), name)
        assert checkpoint is not None and sum(checkpoint.committed.values()) == 300, checkpoint
        assert len(read_rows(Path(topic.path))) == 300

        # Records no run has read: a run that ingested would land them.
        producer.produce(bootstrap, name, records(300, 200))
        now = datetime.now(UTC)
        # Through the REST API, as the UI's Backfill dialog does.
        created = server.api(
            "POST",
            "/backfills",
            json={
                "dag_id": dag_id,
                "from_date": (now - timedelta(hours=7)).isoformat(),
                "to_date": (now - timedelta(hours=1)).isoformat(),
                "max_active_runs": 1,
            },
        )
        assert created["dag_id"] == dag_id, created

        def backfill_runs() -> list[tuple[str, str]]:
            return [(run_id, state) for run_id, kind, state in dag_runs(server, dag_id) if kind == "backfill"]

        wait_for(
            lambda: (runs := backfill_runs()) and all(state in FINISHED for _, state in runs),
            what=f"the backfill runs of {dag_id}",
            timeout=600,
            every=3,
            explain=lambda: server.runs_report(dag_id),
        )
    finally:
        server.api("PATCH", f"/dags/{dag_id}", json={"is_paused": True})

    runs = backfill_runs()
    assert len(runs) >= 2, runs  # 6 hours of a 2h interval
    for run_id, state in runs:
        tasks = tasks_of(server, dag_id, run_id)
        assert state == "success", (run_id, tasks)
        assert {task: s for task, (s, _host) in tasks.items()} == {
            "check_new_offsets": "success",
            "ingest": "skipped",
            "refresh_schema": "skipped",
            "register_table": "skipped",
            "maintain_table": "skipped",  # ran its due check (no JVM): nothing due on a new table
        }, run_id
        assert tasks["ingest"][1] is None, f"ingest started in {run_id}"
        assert tasks["maintain_table"][1] is not None, f"maintain_table never ran in {run_id}"
        log = task_log(server, run_id, "check_new_offsets")
        assert "backfill run: not ingesting" in log and "reingest_from" in log, run_id
        assert "Spark-Submit cmd" not in task_log(server, run_id, "maintain_table")

    # Nothing more landed and the checkpoint did not move, although Kafka holds 200 unread records.
    assert len(read_rows(Path(topic.path))) == 300
    assert read_checkpoint(Path(topic.checkpoint_path), name) == checkpoint
