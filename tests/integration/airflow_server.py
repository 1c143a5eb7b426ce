"""A real Airflow (``airflow standalone``: api-server, scheduler, dag-processor, triggerer) for tests.

One server for the test session, started on first use: a temporary AIRFLOW_HOME with SQLite, free
ports, the session's broker and its own catalog (``SERVER_CATALOG``), so its scheduled runs never
touch the topics the ``airflow dags test`` tests use. The browser test and the deadline test share it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest

from kafkalake.config.topic import dag_id_for
from kafkalake.dev import local_airflow
from kafkalake.dev.broker import LocalKafka
from kafkalake.dev.standalone_airflow import StandaloneAirflow, free_port, wait_for

__all__ = ["AirflowServer", "airflow_server", "free_port", "wait_for"]

#: The topic the browser test triggers from the UI.
UI_TOPIC = "ui-events"
#: A 3m SLA gives a 1m interval and a deadline 2m after a run is queued. Its Kafka connection points
#: at a closed port, so the pre-flight task keeps failing and retrying: the run cannot finish in time.
LATE_TOPIC = "ui-late"
LATE_CONN_ID = "kafka_unreachable"
#: The topic the backfill test backfills (tests/integration/test_backfill.py).
BACKFILL_TOPIC = "ui-backfill"
WEBHOOK_CONN_ID = "sla_test_hook"
WEBHOOK_PATH = "/hooks/sla"
SERVER_CATALOG = f"""\
topics:
  - name: {UI_TOPIC}
    freshness_sla: 6h
  - name: {LATE_TOPIC}
    freshness_sla: 3m
    kafka_conn_id: {LATE_CONN_ID}
    sla_webhook_conn_id: {WEBHOOK_CONN_ID}
  - name: {BACKFILL_TOPIC}
    freshness_sla: 6h
"""
START_TIMEOUT = 420  # seconds; on a loaded 2-core machine the four components take a while


class WebhookReceiver:
    """A local HTTP server that records the JSON bodies POSTed to it."""

    def __init__(self) -> None:
        received: list[dict[str, Any]] = []
        self.received = received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                received.append({"path": self.path, "json": json.loads(body or b"null")})
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self.server.server_address[1])
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def connection(self) -> str:
        return json.dumps(
            {"conn_type": "http", "host": "127.0.0.1", "port": self.port, "extra": {"endpoint": WEBHOOK_PATH}}
        )

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclass(kw_only=True)
class AirflowServer(StandaloneAirflow):
    """The tests' server: its own lake and catalog, and the SLA webhook's receiver."""

    lake: Path
    catalog: Path
    webhook: WebhookReceiver


def server_environment(
    home: Path, kafka: LocalKafka, catalog: Path, lake: Path, webhook: WebhookReceiver
) -> dict[str, str]:
    env = local_airflow.environment(
        home, kafka_bootstrap=kafka.bootstrap_servers, catalog=catalog, lake_root=lake
    )
    env = local_airflow.standalone_environment(
        env, port=free_port(), log_server_ports=(free_port(), free_port())
    )
    env.update(
        {
            "KAFKALAKE_STRICT": "1",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
            f"AIRFLOW_CONN_{LATE_CONN_ID.upper()}": json.dumps(
                {"conn_type": "kafka", "extra": {"bootstrap.servers": f"127.0.0.1:{free_port()}"}}
            ),
            f"AIRFLOW_CONN_{WEBHOOK_CONN_ID.upper()}": webhook.connection(),
        }
    )
    return env


@pytest.fixture(scope="session")
def airflow_server(tmp_path_factory: pytest.TempPathFactory, kafka: LocalKafka) -> Iterator[AirflowServer]:
    """``airflow standalone`` serving this project's DAGs, healthy and with both DAGs parsed.

    The late topic's DAG is unpaused at once, so its deadline clock runs while other tests work.
    """
    root = tmp_path_factory.mktemp("airflow-server")
    catalog = root / "topics.yaml"
    catalog.write_text(SERVER_CATALOG)
    webhook = WebhookReceiver()
    home, lake = root / "home", root / "lake"
    env = server_environment(home, kafka, catalog, lake, webhook)
    server = AirflowServer(
        url=f"http://127.0.0.1:{env['AIRFLOW__API__PORT']}",
        home=home,
        env=env,
        log=root / "standalone.log",
        lake=lake,
        catalog=catalog,
        webhook=webhook,
    )
    # The metadata DB with the Spark pool: without it the scheduler leaves every Spark task queued.
    local_airflow.init_db(env)
    server.start()
    try:
        wait_for(server.healthy, what="airflow standalone to be healthy", timeout=START_TIMEOUT, every=2)
        wait_for(
            lambda: server.dags_parsed(
                dag_id_for(UI_TOPIC), dag_id_for(LATE_TOPIC), dag_id_for(BACKFILL_TOPIC)
            ),
            what="the DAG processor to parse the DAGs",
            timeout=120,
            every=2,
        )
        server.api("PATCH", f"/dags/{dag_id_for(LATE_TOPIC)}", json={"is_paused": False})
        yield server
    finally:
        server.stop()
        webhook.close()
