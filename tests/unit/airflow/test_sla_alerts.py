"""The SLA-miss callback: its message, and the optional webhook POST to a real local HTTP server."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import httpx
import pytest

from kafkalake.airflow import sla_alerts
from kafkalake.airflow.sla_alerts import (
    callback_kwargs,
    miss_message,
    on_sla_miss,
    redacted_url,
    webhook_url,
)
from kafkalake.core.errors import WebhookError

# The shape of the context Airflow's scheduler hands the callback (Deadline.handle_miss: the
# REST API's DAGRunResponse, with ``dag_run_id``, and the deadline).
CONTEXT = {
    "dag_run": {
        "dag_id": "ingest_orders",
        "dag_run_id": "scheduled__2026-11-22T10:00:00+00:00",
        "queued_at": "2026-11-22T10:00:01.5+00:00",
        "state": "running",
    },
    "deadline": {"id": "0b7c", "deadline_time": "2026-11-22T10:04:01.5+00:00"},
}
KWARGS = {"topic": "orders", "table": "bronze.orders", "sla": "6h", "deadline": "4h"}


REAL_LANDED_SINCE_PREFLIGHT = sla_alerts.landed_since_preflight


def landed(answer: bool | Exception) -> Any:
    async def landed_since_preflight(dag_id: str, run_id: str) -> bool:
        assert (dag_id, run_id) == ("ingest_orders", CONTEXT["dag_run"]["dag_run_id"])
        if isinstance(answer, Exception):
            raise answer
        return answer

    return landed_since_preflight


@pytest.fixture(autouse=True)
def nothing_landed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Outside a triggerer there is no Airflow to ask: by default no ingest landed since."""
    monkeypatch.setattr(sla_alerts, "landed_since_preflight", landed(False))


class FakeTI:
    dag_id = "ingest_orders"

    def __init__(self, count: int | Exception) -> None:
        self.count, self.pushed, self.asked = count, {}, []

    def get_ti_count(self, **filters: Any) -> int:
        self.asked.append(filters)
        if isinstance(self.count, Exception):
            raise self.count
        return self.count

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed[key] = value


def test_the_preflight_records_how_many_ingests_had_landed():
    ti = FakeTI(7)
    sla_alerts.record_landed_count(ti)
    assert ti.asked == [{"dag_id": "ingest_orders", "task_ids": ["ingest"], "states": ["success"]}]
    assert ti.pushed == {"landed_ingests_before": 7}


def test_a_count_airflow_cannot_give_never_fails_the_preflight(caplog):
    ti = FakeTI(RuntimeError("execution API down"))
    sla_alerts.record_landed_count(ti)
    assert ti.pushed == {}
    assert "could not record the count of landed ingests" in caplog.text


class Receiver(BaseHTTPRequestHandler):
    received: list[dict[str, Any]]
    status = 200

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).received.append(
            {"path": self.path, "headers": dict(self.headers), "json": json.loads(body)}
        )
        self.send_response(type(self).status)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[tuple[type[Receiver], int]]:
    handler = type("TestReceiver", (Receiver,), {"received": [], "status": 200})
    server = HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield handler, server.server_address[1]
    server.shutdown()
    server.server_close()


def use_webhook(monkeypatch: pytest.MonkeyPatch, port: int) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_KAFKALAKE_TEST_SLA_HOOK",
        json.dumps({"conn_type": "http", "host": "127.0.0.1", "port": port}),
    )


def test_message_names_dag_run_sla_and_deadline():
    message = miss_message(CONTEXT, **KWARGS)
    assert message.startswith("SLA miss: DAG ingest_orders run scheduled__2026-11-22T10:00:00+00:00 ")
    assert "deadline 2026-11-22T10:04:01.5+00:00 (queued + 4h)" in message
    assert "freshness SLA of 6h" in message
    assert "bronze.orders" in message


def test_message_without_context_still_says_what_missed():
    assert miss_message(None, **KWARGS).startswith("SLA miss: DAG ? run ? ")


def test_callback_kwargs_are_strings_and_leave_out_an_absent_webhook():
    kwargs = callback_kwargs(
        topic="t",
        table="bronze.t",
        sla=timedelta(minutes=7),
        deadline=timedelta(minutes=5),
        webhook_conn_id=None,
    )
    assert kwargs == {"topic": "t", "table": "bronze.t", "sla": "7m", "deadline": "5m"}


@pytest.mark.parametrize(
    ("host", "schema", "port", "extra", "url"),
    [
        ("127.0.0.1", None, 8000, {}, "http://127.0.0.1:8000"),
        ("hooks.example", "https", None, {"endpoint": "/alerts/x"}, "https://hooks.example/alerts/x"),
        ("https://hooks.slack.com/services/T/B/X", None, None, {}, "https://hooks.slack.com/services/T/B/X"),
        ("http://h:9/base/", None, None, {"endpoint": "sla"}, "http://h:9/base/sla"),
    ],
)
def test_webhook_url(host, schema, port, extra, url):
    assert webhook_url(host, schema, port, extra) == url


def test_webhook_without_host_is_refused():
    with pytest.raises(ValueError, match="no host"):
        webhook_url("", None, None, {})


def test_default_callback_logs_the_miss_and_posts_nothing(caplog, receiver):
    handler, _port = receiver
    with caplog.at_level("ERROR", logger="kafkalake.airflow.sla_alerts"):
        message = asyncio.run(on_sla_miss(CONTEXT, **KWARGS))
    assert message == miss_message(CONTEXT, **KWARGS)
    assert [r.getMessage() for r in caplog.records] == [message]
    assert handler.received == []


def test_webhook_connection_gets_the_alert_as_json(monkeypatch, receiver):
    handler, port = receiver
    conn = {
        "conn_type": "http",
        "host": "127.0.0.1",
        "port": port,
        "login": "alerts",
        "password": "pw",
        "extra": {"endpoint": "/hooks/sla", "headers": {"X-Team": "lake"}},
    }
    monkeypatch.setenv("AIRFLOW_CONN_KAFKALAKE_TEST_SLA_HOOK", json.dumps(conn))

    message = asyncio.run(on_sla_miss(CONTEXT, **KWARGS, webhook_conn_id="kafkalake_test_sla_hook"))

    [request] = handler.received
    assert request["path"] == "/hooks/sla"
    assert request["headers"]["X-Team"] == "lake"
    assert request["headers"]["Authorization"] == "Basic " + base64.b64encode(b"alerts:pw").decode()
    assert request["json"] == {
        "text": message,
        "event": "kafkalake.sla_miss",
        "dag_id": "ingest_orders",
        "run_id": "scheduled__2026-11-22T10:00:00+00:00",
        "queued_at": "2026-11-22T10:00:01.5+00:00",
        "deadline_time": "2026-11-22T10:04:01.5+00:00",
        "topic": "orders",
        "table": "bronze.orders",
        "freshness_sla": "6h",
        "deadline_after_queued": "4h",
        "landing_checked": True,
    }


def test_webhook_error_fails_the_callback_so_airflow_records_it(monkeypatch, receiver):
    handler, port = receiver
    handler.status = 500
    use_webhook(monkeypatch, port)
    with pytest.raises(Exception, match="500"):
        asyncio.run(on_sla_miss(CONTEXT, **KWARGS, webhook_conn_id="kafkalake_test_sla_hook"))
    assert len(handler.received) == 1


@pytest.mark.parametrize("status", [404, 500])
def test_a_failed_post_names_the_webhook_but_never_its_token(monkeypatch, receiver, caplog, status):
    """A Slack-style URL is its own secret: the error and every log line show host and port only."""
    handler, port = receiver
    handler.status = status
    token = "T0KEN-b7f3e1d2c4a5"
    monkeypatch.setenv(
        "AIRFLOW_CONN_KAFKALAKE_TEST_SLA_HOOK",
        json.dumps({"conn_type": "http", "host": f"http://127.0.0.1:{port}/services/T1/B2/{token}"}),
    )
    with caplog.at_level("DEBUG"), pytest.raises(WebhookError) as excinfo:
        asyncio.run(on_sla_miss(CONTEXT, **KWARGS, webhook_conn_id="kafkalake_test_sla_hook"))
    assert handler.received[0]["path"] == f"/services/T1/B2/{token}"  # it was sent where it should
    message = str(excinfo.value)
    assert f"HTTP {status}" in message and f"http://127.0.0.1:{port}/***" in message
    assert token not in message
    # No chained httpx error either: its message (and traceback) would carry the whole URL.
    assert excinfo.value.__cause__ is None
    assert excinfo.value.__context__ is None or excinfo.value.__suppress_context__
    assert token not in caplog.text


def test_an_unreachable_webhook_is_named_without_its_token(monkeypatch):
    token = "T0KEN-unreachable-9a8b"
    monkeypatch.setenv(
        "AIRFLOW_CONN_KAFKALAKE_TEST_SLA_HOOK",
        json.dumps({"conn_type": "http", "host": f"http://127.0.0.1:9/hooks/{token}?x=1"}),
    )
    with pytest.raises(WebhookError) as excinfo:
        asyncio.run(on_sla_miss(CONTEXT, **KWARGS, webhook_conn_id="kafkalake_test_sla_hook"))
    assert token not in str(excinfo.value)
    assert "127.0.0.1:9/***" in str(excinfo.value)
    assert excinfo.value.__suppress_context__


def test_redacted_url_keeps_scheme_host_and_port_only():
    assert (
        redacted_url("https://user:pw@hooks.slack.com/services/T/B/X?token=y")
        == "https://hooks.slack.com/***"
    )
    assert redacted_url("http://10.0.0.1:8443/a") == "http://10.0.0.1:8443/***"


@pytest.mark.parametrize(
    ("run", "landed_since", "says"),
    [
        # Backfill runs never ingest and queue behind each other: their deadline is not the table's.
        ({"run_type": "backfill"}, False, "not an SLA miss: backfill run"),
        # apache/airflow#60927: a run that failed fast keeps its deadline; the next run kept the
        # table fresh.
        ({"state": "failed"}, True, "not an SLA miss: an ingest succeeded after this run's pre-flight began"),
    ],
    ids=["backfill", "landed by a later run"],
)
def test_a_late_run_that_says_nothing_of_the_table_pages_no_one(
    monkeypatch, receiver, caplog, run, landed_since, says
):
    handler, port = receiver
    use_webhook(monkeypatch, port)
    monkeypatch.setattr(sla_alerts, "landed_since_preflight", landed(landed_since))
    context = {**CONTEXT, "dag_run": {**CONTEXT["dag_run"], **run}}

    with caplog.at_level("INFO", logger="kafkalake.airflow.sla_alerts"):
        asyncio.run(on_sla_miss(context, **KWARGS, webhook_conn_id="kafkalake_test_sla_hook"))

    assert handler.received == []
    assert [r.levelname for r in caplog.records] == ["INFO"]
    assert says in caplog.text


@pytest.mark.parametrize(
    "answer", [RuntimeError("no supervisor"), None], ids=["cannot ask", "outside a triggerer"]
)
def test_when_airflow_cannot_be_asked_the_alert_still_goes(monkeypatch, receiver, caplog, answer):
    handler, port = receiver
    use_webhook(monkeypatch, port)
    check = landed(answer) if answer is not None else REAL_LANDED_SINCE_PREFLIGHT
    monkeypatch.setattr(sla_alerts, "landed_since_preflight", check)

    with caplog.at_level("WARNING", logger="kafkalake.airflow.sla_alerts"):
        asyncio.run(on_sla_miss(CONTEXT, **KWARGS, webhook_conn_id="kafkalake_test_sla_hook"))

    [request] = handler.received
    assert request["json"]["landing_checked"] is False
    assert "could not ask Airflow whether an ingest landed the topic since" in caplog.text


@pytest.mark.parametrize(
    "configured",
    [
        "https://hooks.example.com/services/T0/B0/s3cr3tT0ken",
        "https://HOOKS.Example.com:443/services/T0/B0/s3cr3tT0ken",
        "http://hooks.example.com:80/services/T0/B0/s3cr3tT0ken?sig=s3cr3tT0ken",
        "https://user:s3cr3tT0ken@hooks.example.com/hook",
        "https://hooks.example.com/hook?token=s3cr3tT0ken&x=%2F",
    ],
)
def test_every_form_httpx_logs_the_url_in_is_masked(configured):
    """httpx's INFO line names the URL as it normalised it (lower-case host, default port dropped);
    masking only the URL as configured let the token through."""
    request = httpx.Request("POST", configured)
    logged = f'HTTP Request: POST {request.url} "HTTP/1.1 200 OK"'
    for form in sorted(sla_alerts.secret_forms(configured), key=len, reverse=True):
        logged = logged.replace(form, "***")
    assert "s3cr3tT0ken" not in logged, logged
