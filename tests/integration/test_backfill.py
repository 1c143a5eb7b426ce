"""A backfill of a topic's DAG, run by a real scheduler: table care, never an ingest.

The ingest is checkpoint-driven, so a backfill run must not ingest (kafkalake.core.run_mode). The topic
is landed first (in the session's SparkSession), the DAG is unpaused and its first scheduled run
finds nothing new; then records arrive that no run has read, and a backfill over past intervals is
created through the REST API, as the UI does. Every backfill run must succeed without starting the ingest,
and bronze and its checkpoint must be exactly as before.
"""

from __future__ import annotations

import sqlite3
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from kafkalake.config.catalog import load_catalog
from kafkalake.config.topic import dag_id_for
from kafkalake.dev import producer
from kafkalake.dev.producer import Record
from kafkalake.lake.checkpoint import read_checkpoint

from .airflow_server import BACKFILL_TOPIC, START_TIMEOUT, AirflowServer, wait_for
from .helpers import read_rows, run_ingest

pytestmark = pytest.mark.integration

FINISHED = ("success", "failed")


def records(start: int, count: int) -> list[Record]:
    return [Record(f"k{i}".encode(), f'{{"seq": {i}}}'.encode(), i % 2) for i in range(start, start + count)]


def dag_runs(server: AirflowServer, dag_id: str) -> list[tuple[str, str, str]]:
    """(run_id, run_type, state) of every run of the DAG."""
    with sqlite3.connect(server.home / "airflow.db", timeout=10) as db:
        return db.execute(
            "SELECT run_id, run_type, state FROM dag_run WHERE dag_id = ?", (dag_id,)
        ).fetchall()


def tasks_of(server: AirflowServer, dag_id: str, run_id: str) -> dict[str, tuple[str, str | None]]:
    """{task_id: (state, hostname)}; a task that never started has no hostname."""
    with sqlite3.connect(server.home / "airflow.db", timeout=10) as db:
        rows = db.execute(
            "SELECT task_id, state, hostname FROM task_instance WHERE dag_id = ? AND run_id = ?",
            (dag_id, run_id),
        ).fetchall()
    return {task: (state, host or None) for task, state, host in rows}


def task_log(server: AirflowServer, run_id: str, task_id: str) -> str:
    logs = [
        p
        for p in (server.home / "logs").rglob("*.log")
        if f"run_id={run_id}" in str(p) and f"task_id={task_id}" in str(p)
    ]
    return "\n".join(p.read_text(errors="replace") for p in logs)


def create_backfill(server: AirflowServer, body: dict[str, object]) -> dict[str, object]:
    """POST /backfills, as the UI's Backfill dialog does; again while the API server answers 503.

    On SQLite the API server maps a "database is locked" (the scheduler holding the write lock) to
    503, and the create was rolled back whole, so sending it again is safe. Should an earlier try
    have committed after all, the next one gets 409 (a backfill of this DAG is running): that
    backfill is the one asked for.
    """
    deadline = time.monotonic() + 240
    wait, locked = 2.0, False
    while True:
        try:
            created: dict[str, object] = server.api("POST", "/backfills", json=body)
            return created
        except httpx.HTTPStatusError as err:
            status = err.response.status_code
            if status == 409 and locked:
                running = server.api("GET", "/backfills", params={"dag_id": body["dag_id"]})["backfills"]
                active = [b for b in running if b.get("completed_at") is None]
                assert len(active) == 1, running
                return dict(active[0])
            if status != 503 or time.monotonic() > deadline:
                raise
            locked = True
        time.sleep(wait)
        wait = min(wait * 2, 30.0)


@pytest.mark.timeout(START_TIMEOUT + 1200)  # may be the test that starts the server
def test_backfill_runs_do_table_care_and_never_ingest(airflow_server: AirflowServer, kafka, spark):
    server, bootstrap = airflow_server, kafka.bootstrap_servers
    topic = load_catalog(server.catalog, server.lake).topic(BACKFILL_TOPIC)
    dag_id = dag_id_for(BACKFILL_TOPIC)
    producer.create_topic(bootstrap, BACKFILL_TOPIC, partitions=2)
    producer.produce(bootstrap, BACKFILL_TOPIC, records(0, 300))
    run_ingest(spark, topic, bootstrap)
    checkpoint = read_checkpoint(Path(topic.checkpoint_path), BACKFILL_TOPIC)
    assert checkpoint is not None and sum(checkpoint.committed.values()) == 300

    # Backfill runs only start on an unpaused DAG; its first scheduled run then finds nothing new.
    server.api("PATCH", f"/dags/{dag_id}", json={"is_paused": False})
    try:
        wait_for(
            lambda: (runs := dag_runs(server, dag_id)) and all(state in FINISHED for _, _, state in runs),
            what=f"the first scheduled run of {dag_id}",
            timeout=300,
            every=2,
        )
        # Records no run has read: a run that ingested would land them.
        producer.produce(bootstrap, BACKFILL_TOPIC, records(300, 200))
        now = datetime.now(UTC)
        # Through the REST API, as the UI's Backfill dialog does. `airflow backfill create` does the
        # same but writes the metadata DB from its own process: on the embedded SQLite DB, beside a
        # running scheduler, that can fail with "database is locked" (it did in a CI run).
        created = create_backfill(
            server,
            {
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
            timeout=900,
            every=3,
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

    # Nothing landed and the checkpoint did not move, although Kafka holds 200 unread records.
    assert len(read_rows(Path(topic.path))) == 300
    assert read_checkpoint(Path(topic.checkpoint_path), BACKFILL_TOPIC) == checkpoint
