"""The freshness Deadline Alert fires in a real scheduler run, and its webhook gets the alert.

``airflow dags test`` cannot show this (it runs DAGs without their deadline: see
local_airflow.dags_test_environment), so this test uses ``airflow standalone``
(tests/integration/airflow_server.py), and Airflow as deployed (test_deployed_airflow.py). Its late
topic has a 3m SLA, so a 1m interval and a deadline 2m after a run is queued; its Kafka connection
points at a closed port, so the pre-flight task keeps failing and retrying and the run cannot finish
in time. The fixture unpaused the DAG as soon as the server was up: by the time this test runs, part
of the 2 minutes has usually gone by.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from kafkalake.config.topic import dag_id_for

from .airflow_server import START_TIMEOUT, WEBHOOK_PATH, AirflowServer, wait_for

pytestmark = pytest.mark.integration

ALERT_TIMEOUT = 300  # seconds: the 2m deadline, the scheduler's and triggerer's loops, a busy machine


def run_row(server: AirflowServer, run_id: str) -> tuple[Any, ...]:
    rows = server.query(
        "SELECT state, queued_at, end_date FROM dag_run WHERE dag_id = :dag_id AND run_id = :run_id",
        dag_id=dag_id_for(server.late_topic),
        run_id=run_id,
    )
    assert rows, f"no run {run_id}"
    return rows[0]


def parse_time(text: str | datetime) -> datetime:
    """Airflow's spellings of a UTC time (API: ``…Z``, str(): ``… +00:00``, SQLite: naive text,
    PostgreSQL: a datetime)."""
    if isinstance(text, datetime):
        return text if text.tzinfo else text.replace(tzinfo=UTC)
    parsed = datetime.fromisoformat(text.replace(" ", "T").replace("Z", "+00:00"))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


@pytest.mark.timeout(START_TIMEOUT + ALERT_TIMEOUT + 300)  # may be the one that starts the server
def test_run_past_its_deadline_fires_the_sla_miss_alert(airflow_server: AirflowServer):
    dag_id = dag_id_for(airflow_server.late_topic)

    alerts = wait_for(
        lambda: [r for r in airflow_server.webhook.received if (r["json"] or {}).get("dag_id") == dag_id],
        what=f"the SLA-miss webhook of {dag_id}",
        timeout=ALERT_TIMEOUT,
        every=2,
    )

    alert = alerts[0]
    body = alert["json"]
    assert alert["path"] == WEBHOOK_PATH
    assert body["event"] == "kafkalake.sla_miss"
    assert body["topic"] == airflow_server.late_topic
    assert body["freshness_sla"] == "3m"
    assert body["deadline_after_queued"] == "2m"  # 3m SLA - 1m interval
    run_id = body["run_id"]
    assert body["text"].startswith(f"SLA miss: DAG {dag_id} run {run_id} ")
    assert "freshness SLA of 3m" in body["text"]
    # The triggerer could ask Airflow whether an ingest landed the topic since the run's pre-flight
    # began (the pre-flight's count in XCom, the count now): none had, so the alert went.
    assert body["landing_checked"] is True

    # The deadline is measured from the run's queued time, and the run really had not finished.
    state, queued_at, end_date = run_row(airflow_server, run_id)
    assert parse_time(queued_at) == parse_time(body["queued_at"])
    assert parse_time(body["deadline_time"]) - parse_time(queued_at) == timedelta(minutes=2)
    assert end_date is None or parse_time(end_date) > parse_time(body["deadline_time"]), state

    # Airflow recorded the miss and the callback's success; the triggerer logged the SLA-miss line.
    missed = airflow_server.query(
        "SELECT d.missed FROM deadline d JOIN dag_run r ON r.id = d.dagrun_id WHERE r.run_id = :run_id",
        run_id=run_id,
    )
    assert missed == [(True,)]  # SQLite's 1 is True too
    wait_for(
        lambda: f"SLA miss: DAG {dag_id} run {run_id}" in airflow_server.output(last=2_000_000),
        what="the SLA-miss log line in the triggerer's output",
        timeout=60,
    )
