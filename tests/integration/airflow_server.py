"""A real Airflow (api-server, scheduler, dag-processor, triggerer) for tests, in two shapes.

``airflow_server``: ``airflow standalone`` on SQLite. ``deployed_airflow_server``: the components as
separate processes on PostgreSQL with the LocalExecutor (kafkalake.dev.deployed_airflow), as
``make stack`` and the docker-compose file run them. Each is started on first use and shared by
the tests that follow: a temporary AIRFLOW_HOME, free ports, the session's broker and its own
catalog (``server_catalog``), so its scheduled runs never touch the topics the ``airflow dags test``
tests use; the deployed one's topics have their own prefix, so both can share the session's broker.
The browser test and the deadline test run against both (test_deployed_airflow.py for the second).

A server is stopped as soon as the next test on its worker does not use it (``stop_unless_needed``,
from tests/integration/conftest.py): its four components keep polling while idle, and each one
used to run to the end of its worker's session. Its modules run one after the other on one worker
(tests/conftest.py groups them), so each server starts once per run.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest

from kafkalake.config.topic import dag_id_for
from kafkalake.dev import local_airflow
from kafkalake.dev.broker import LocalKafka
from kafkalake.dev.deployed_airflow import DeployedAirflow, deployed_environment, write_secrets
from kafkalake.dev.postgres import LocalPostgres
from kafkalake.dev.standalone_airflow import StandaloneAirflow, free_port, wait_for

__all__ = [
    "VIEWER",
    "AirflowServer",
    "airflow_server",
    "deployed_airflow_server",
    "free_port",
    "stop_unless_needed",
    "wait_for",
]

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
#: The standalone server's read-only user (the simple auth manager's ``viewer`` role).
VIEWER = "viewer"
#: The deployed server's topics: the same ones under this prefix.
DEPLOYED_PREFIX = "stack-"


def server_catalog(prefix: str = "") -> str:
    return f"""\
topics:
  - name: {prefix}{UI_TOPIC}
    freshness_sla: 6h
  - name: {prefix}{LATE_TOPIC}
    freshness_sla: 3m
    kafka_conn_id: {LATE_CONN_ID}
    sla_webhook_conn_id: {WEBHOOK_CONN_ID}
  - name: {prefix}{BACKFILL_TOPIC}
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
class _ServerFixture:
    """What the tests know of their server: its own lake and catalog, the SLA webhook's receiver."""

    lake: Path
    catalog: Path
    webhook: WebhookReceiver
    topic_prefix: str = ""

    @property
    def ui_topic(self) -> str:
        return self.topic_prefix + UI_TOPIC

    @property
    def late_topic(self) -> str:
        return self.topic_prefix + LATE_TOPIC

    @property
    def dag_ids(self) -> tuple[str, ...]:
        return tuple(dag_id_for(self.topic_prefix + t) for t in (UI_TOPIC, LATE_TOPIC, BACKFILL_TOPIC))


@dataclass(kw_only=True)
class AirflowServer(StandaloneAirflow, _ServerFixture):
    """``airflow standalone`` on SQLite."""

    def password_of(self, user: str) -> str:
        """The password the simple auth manager generated for ``user``."""
        passwords = json.loads((self.home / "simple_auth_manager_passwords.json.generated").read_text())
        return str(passwords[user])


@dataclass(kw_only=True)
class DeployedAirflowServer(DeployedAirflow, _ServerFixture):
    """The separate components on PostgreSQL with the LocalExecutor."""


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


def _serve(server: AirflowServer | DeployedAirflowServer) -> None:
    """Start, wait until healthy with the DAGs parsed; unpause the late DAG so its deadline clock runs."""
    server.start()
    wait_for(server.healthy, what="Airflow to be healthy", timeout=START_TIMEOUT, every=2)
    wait_for(
        lambda: server.dags_parsed(*server.dag_ids),
        what="the DAG processor to parse the DAGs",
        timeout=120,
        every=2,
    )
    server.api("PATCH", f"/dags/{dag_id_for(server.late_topic)}", json={"is_paused": False})


#: The servers running in this process, by the name of the fixture that returns them: the server
#: and its start, suspended at its ``yield`` until the server is stopped.
_running: dict[str, tuple[Any, Iterator[Any]]] = {}
STANDALONE, DEPLOYED = "airflow_server", "deployed_airflow_server"


def _shared(name: str, start: Callable[[], Iterator[Any]]) -> Any:
    """The running server of this name; started (``start`` up to its ``yield``) if none is."""
    if name not in _running:
        starting = start()
        _running[name] = (next(starting), starting)
    return _running[name][0]


def stop(name: str) -> None:
    """Stop the named server if it runs (what follows the ``yield`` of its start)."""
    if name in _running:
        _server, starting = _running.pop(name)
        next(starting, None)


def uses(item: pytest.Item | None, name: str) -> bool:
    """Whether the test asks for this server (test_deployed_airflow binds ``airflow_server`` to the
    deployed one)."""
    if item is None:
        return False
    names = getattr(item, "fixturenames", ())
    if name == STANDALONE:
        return STANDALONE in names and DEPLOYED not in names
    return name in names


def stop_unless_needed(nextitem: pytest.Item | None) -> None:
    for name in list(_running):
        if not uses(nextitem, name):
            stop(name)


def _standalone(tmp_path_factory: pytest.TempPathFactory, kafka: LocalKafka) -> Iterator[AirflowServer]:
    root = tmp_path_factory.mktemp("airflow-server")
    catalog = root / "topics.yaml"
    catalog.write_text(server_catalog())
    webhook = WebhookReceiver()
    home, lake = root / "home", root / "lake"
    env = server_environment(home, kafka, catalog, lake, webhook)
    # A read-only user besides admin: the freshness view must work for it (test_freshness_view).
    env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"] = f"admin:admin,{VIEWER}:viewer"
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
    try:
        _serve(server)
        yield server
    finally:
        server.stop()
        webhook.close()


def _deployed(tmp_path_factory: pytest.TempPathFactory, kafka: LocalKafka) -> Iterator[DeployedAirflowServer]:
    root = tmp_path_factory.mktemp("deployed-airflow")
    catalog = root / "topics.yaml"
    catalog.write_text(server_catalog(DEPLOYED_PREFIX))
    postgres = LocalPostgres(root / "postgres").start()
    webhook = WebhookReceiver()
    secrets_dir = root / "secrets"
    try:
        write_secrets(secrets_dir, postgres.database("airflow"))
        home, lake = root / "home", root / "lake"
        env = deployed_environment(server_environment(home, kafka, catalog, lake, webhook), secrets_dir)
        server = DeployedAirflowServer(
            url=f"http://127.0.0.1:{env['AIRFLOW__API__PORT']}",
            home=home,
            env=env,
            log=root / "logs",
            secrets_dir=secrets_dir,
            lake=lake,
            catalog=catalog,
            webhook=webhook,
            topic_prefix=DEPLOYED_PREFIX,
        )
        server.init_db()
        try:
            _serve(server)
            yield server
        finally:
            server.stop()
    finally:
        webhook.close()
        postgres.stop(remove=True)


@pytest.fixture
def airflow_server(tmp_path_factory: pytest.TempPathFactory, kafka: LocalKafka) -> AirflowServer:
    """``airflow standalone`` serving this project's DAGs, healthy and with both DAGs parsed.

    The late topic's DAG is unpaused at once, so its deadline clock runs while other tests work.
    """
    server: AirflowServer = _shared(STANDALONE, lambda: _standalone(tmp_path_factory, kafka))
    return server


@pytest.fixture
def deployed_airflow_server(
    tmp_path_factory: pytest.TempPathFactory, kafka: LocalKafka
) -> DeployedAirflowServer:
    """Airflow as deployed (PostgreSQL, LocalExecutor, four processes) on the same DAGs and broker."""
    server: DeployedAirflowServer = _shared(DEPLOYED, lambda: _deployed(tmp_path_factory, kafka))
    return server
