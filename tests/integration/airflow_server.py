"""A real Airflow (``airflow standalone``: api-server, scheduler, dag-processor, triggerer) for tests.

One server for the test session, started on first use: a temporary AIRFLOW_HOME with SQLite, free
ports, the session's broker and its own catalog (``SERVER_CATALOG``), so its scheduled runs never
touch the topics the ``airflow dags test`` tests use. The browser test and the deadline test share it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from kafkalake import local_airflow
from kafkalake.broker import LocalKafka
from kafkalake.catalog import dag_id_for

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


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(condition: Callable[[], Any], *, what: str, timeout: float, every: float = 1.0) -> Any:
    """Poll ``condition`` until it returns something truthy; fail naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(every)


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


@dataclass
class AirflowServer:
    url: str
    home: Path
    env: dict[str, str]
    log: Path
    lake: Path
    catalog: Path
    webhook: WebhookReceiver
    process: subprocess.Popen[bytes] | None = None
    _token: str | None = field(default=None, repr=False)

    @property
    def password(self) -> str:
        password = local_airflow.admin_password(self.home)
        assert password, f"no generated admin password in {self.home}"
        return password

    def output(self, last: int = 8000) -> str:
        return self.log.read_text(errors="replace")[-last:] if self.log.exists() else ""

    def start(self) -> None:
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                local_airflow.airflow_command("standalone"),
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: stop() ends all four components
            )

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def healthy(self) -> bool:
        if not self.running():
            raise AssertionError(f"airflow standalone exited:\n{self.output()}")
        try:
            health = httpx.get(f"{self.url}/api/v2/monitor/health", timeout=5).json()
        except (httpx.HTTPError, ValueError):
            return False
        parts = ("metadatabase", "scheduler", "triggerer", "dag_processor")
        return all((health.get(part) or {}).get("status") == "healthy" for part in parts)

    def dags_parsed(self, *dag_ids: str) -> bool:
        try:
            with sqlite3.connect(self.home / "airflow.db", timeout=5) as db:
                found = {row[0] for row in db.execute("SELECT dag_id FROM dag WHERE is_stale = 0")}
        except sqlite3.OperationalError:
            return False
        return set(dag_ids) <= found

    def api(self, method: str, path: str, **kwargs: Any) -> Any:
        """Call the REST API as admin (JWT from ``/auth/token``)."""
        if self._token is None:
            answer = httpx.post(
                f"{self.url}/auth/token", json={"username": "admin", "password": self.password}, timeout=30
            )
            answer.raise_for_status()
            self._token = answer.json()["access_token"]
        response = httpx.request(
            method,
            f"{self.url}/api/v2{path}",
            headers={"Authorization": f"Bearer {self._token}"},
            timeout=30,
            **kwargs,
        )
        response.raise_for_status()
        return response.json() if response.content else None

    def stop(self) -> None:
        if self.running():
            assert self.process is not None
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=30)


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
