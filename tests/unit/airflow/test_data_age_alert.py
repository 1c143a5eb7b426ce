"""The data-age SLA miss as an ingest or an idle pre-flight ends: the pure decision, table-driven;
then the task side, writing real history rows (delta-rs) and posting to a real local HTTP server."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from kafkalake.airflow import data_age_alert
from kafkalake.airflow.dag_factory import dag_for
from kafkalake.airflow.data_age_alert import alert_after_run, previous_measured, should_alert
from kafkalake.airflow.run_history_emit import recorded
from kafkalake.airflow.sla_alerts import send_webhook
from kafkalake.config.catalog import load_catalog
from kafkalake.config.topic import TopicConfig
from kafkalake.core.errors import BrokerUnreachableError, WebhookError
from kafkalake.core.run_metrics import idle_metrics
from kafkalake.lake import run_history
from kafkalake.lake.run_history import RunRecord

T0 = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
SLA = 900.0  # 15m
OLD = T0 - timedelta(hours=2)
NEWER = T0 - timedelta(hours=1)


def row(
    age: float | None, newest: datetime | None = OLD, *, kind: str = "idle", sla: float = SLA
) -> RunRecord:
    return RunRecord(
        topic="orders",
        dag_id="ingest_orders",
        run_id="scheduled__1",
        task_id="check_new_offsets",
        try_number=1,
        kind=kind,
        outcome="idle" if kind == "idle" else "success",
        failure_kind=None,
        started_at=T0,
        ended_at=T0,
        sla_seconds=sla,
        newest_timestamp=newest,
        data_age_seconds=age,
        lag_records=0,
    )


@pytest.mark.parametrize(
    ("previous", "current", "alert"),
    [
        # Within the SLA: never.
        (None, row(600), False),
        (row(2000), row(900), False),  # exactly the SLA is within it
        # Over it with no earlier measured row: the first crossing.
        (None, row(1000), True),
        # Previous within its SLA, now over: the crossing.
        (row(800), row(1000), True),
        # Previous over it at the same table position: alerted then, not again.
        (row(1000), row(1900), False),
        # Over it at a new position (records landed, still old): a new alert.
        (row(1000), row(950, NEWER), True),
        # The previous row's own SLA decides: within the 1h it had, so nothing was sent then.
        (row(1000, sla=3600), row(1900), True),
        # Unknown data age (an empty table): nothing to alert on.
        (None, row(None, None), False),
        # A re-ingest lands old records on purpose; care measures no data age.
        (None, row(5000, kind="reingest"), False),
        (None, row(5000, kind="care"), False),
        # Ingest and catch-up rows alert as the idle pre-flight's do.
        (row(800), row(1000, kind="ingest"), True),
        (row(800), row(1000, kind="catch_up"), True),
    ],
)
def test_should_alert(previous, current, alert):
    assert should_alert(previous, current) is alert


def test_the_previous_row_is_the_newest_that_measured_a_data_age():
    measured = row(1000)
    later = [row(None, None, kind="ingest"), row(3000, kind="reingest"), row(None, None, kind="care")]
    assert previous_measured([row(10), measured, *later]) is measured
    assert previous_measured(later) is None


def test_the_history_read_for_the_previous_row_is_the_last_week_only(tmp_path):
    """A table over its SLA for longer than the window alerts once more a week, and the read stays
    a week's rows however long the history is."""
    location = str(tmp_path / "runs")
    long_ago = replace(row(1000), started_at=T0 - timedelta(days=8), ended_at=T0 - timedelta(days=8))
    last_week = replace(row(1000), started_at=T0 - timedelta(days=6), ended_at=T0 - timedelta(days=6))
    run_history.append(location, long_ago)
    assert data_age_alert.history_before(location, now=T0)() == []
    assert should_alert(previous_measured(data_age_alert.history_before(location, now=T0)()), row(1900))
    run_history.append(location, last_week)
    assert data_age_alert.history_before(location, now=T0)() == [last_week]
    assert not should_alert(previous_measured(data_age_alert.history_before(location, now=T0)()), row(1900))


def test_idle_runs_over_the_sla_alert_once_then_again_when_the_table_moves():
    """A sequence of runs, each judged against the rows written before it."""
    runs = [row(600), row(1000), row(1600), row(2200), row(950, NEWER), row(1500, NEWER), row(100, T0)]
    alerted = [should_alert(previous_measured(runs[:i]), r) for i, r in enumerate(runs)]
    assert alerted == [False, True, False, False, True, False, False]


def test_the_alert_names_topic_age_sla_newest_and_lag_and_carries_no_value():
    current = replace(row(7384), lag_records=12)
    text = data_age_alert.message(current, "/lake/bronze/orders")
    assert text == (
        "data age SLA miss: table /lake/bronze/orders of Kafka topic orders is 2h3m4s old at the end of "
        "run scheduled__1 (task check_new_offsets, idle), over its freshness SLA of 15m; newest "
        f"record's time {OLD.isoformat()}; lag 12 records"
    )
    body = data_age_alert.payload(current, "/lake/bronze/orders", text)
    assert body["event"] == "kafkalake.data_age_miss" and body["data_age_seconds"] == 7384
    assert set(body) == {
        "text", "event", "checked_at", "topic", "table_path", "dag_id", "run_id", "task_id", "outcome",
        "sla_seconds", "data_age_seconds", "newest_timestamp", "lag_records",
    }  # fmt: skip


def test_a_webhook_or_history_that_fails_never_raises(caplog):
    def broken_history() -> list[RunRecord]:
        raise OSError("store down")

    def refusing(conn_id: str, body: Any) -> int:
        raise RuntimeError("HTTP 500")

    text = alert_after_run(row(1000), broken_history, table_path="/t", webhook_conn_id="hook", post=refusing)
    assert text is not None and text.startswith("data age SLA miss")
    assert "alerting anyway: store down" in caplog.text
    assert "not posted to webhook connection 'hook': HTTP 500" in caplog.text


# --- the task side: real history rows, a real HTTP receiver ---------------------------------------


class Receiver(BaseHTTPRequestHandler):
    received: list[dict[str, Any]]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).received.append(json.loads(body))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def webhook(monkeypatch) -> Iterator[list[dict[str, Any]]]:
    """A real HTTP server behind the Airflow connection ``kafkalake_test_age_hook``."""
    handler = type("AgeReceiver", (Receiver,), {"received": []})
    server = HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv(
        "AIRFLOW_CONN_KAFKALAKE_TEST_AGE_HOOK",
        json.dumps({"conn_type": "http", "host": "127.0.0.1", "port": server.server_address[1]}),
    )
    yield handler.received
    server.shutdown()
    server.server_close()


TI = SimpleNamespace(dag_id="ingest_orders", run_id="scheduled__1", task_id="check_new_offsets", try_number=1)


@pytest.fixture
def topic(tmp_path) -> TopicConfig:
    config = TopicConfig(name="orders", freshness_sla=timedelta(minutes=15), path=str(tmp_path / "orders"))
    write_deltalake(config.path, pa.table({"offset": [0]}))
    return config


def idle_run(topic: TopicConfig, newest: datetime, *, alert: bool = True) -> None:
    with recorded(topic, "idle", TI, alert_data_age=alert, webhook_conn_id="kafkalake_test_age_hook") as run:
        run.outcome = "idle"
        newest_ms = round(newest.timestamp() * 1000)
        run.metrics(idle_metrics("orders", {0: 0}, newest_ms, datetime.now(UTC)))


def test_idle_runs_post_one_alert_per_table_position(topic, webhook, caplog):
    now = datetime.now(UTC)
    idle_run(topic, now - timedelta(minutes=5))  # within the SLA
    assert webhook == []
    stale = (now - timedelta(minutes=40)).replace(microsecond=0)
    idle_run(topic, stale)
    idle_run(topic, stale)  # nothing changed: no second alert
    assert [(b["event"], b["topic"], b["table_path"]) for b in webhook] == [
        ("kafkalake.data_age_miss", "orders", topic.path)
    ]
    assert webhook[0]["newest_timestamp"] == stale.isoformat()
    assert 40 * 60 <= webhook[0]["data_age_seconds"] < 45 * 60
    assert caplog.text.count("data age SLA miss: table") == 1
    idle_run(topic, now - timedelta(minutes=30))  # landed newer records, still too old
    assert len(webhook) == 2
    assert len(run_history.read(topic.history_path)) == 4


def test_a_topic_without_the_alert_posts_nothing(topic, webhook):
    idle_run(topic, datetime.now(UTC) - timedelta(hours=3), alert=False)
    assert webhook == [] and len(run_history.read(topic.history_path)) == 1


def test_a_failed_run_records_the_tables_data_age_and_alerts(topic, webhook):
    """A pre-flight that fails fast (a broker down) lands nothing: the table's newest record, read
    from its Delta log, is the row's data age, and over the SLA it alerts."""
    stale = datetime.now(UTC) - timedelta(hours=1)
    write_deltalake(
        topic.path,
        pa.table({"offset": [1], "kafka_timestamp": pa.array([stale], pa.timestamp("us", tz="UTC"))}),
        mode="overwrite",
        schema_mode="overwrite",
    )
    with (
        pytest.raises(BrokerUnreachableError),
        recorded(topic, "ingest", TI, alert_data_age=True, webhook_conn_id="kafkalake_test_age_hook"),
    ):
        raise BrokerUnreachableError("down")
    (failed,) = run_history.read(topic.history_path)
    assert failed.outcome == "failed" and failed.newest_timestamp is not None
    assert abs((failed.newest_timestamp - stale).total_seconds()) < 0.001
    assert [(b["outcome"], b["task_id"]) for b in webhook] == [("failed", "check_new_offsets")]


def test_interval_topics_alert_on_data_age_and_freshness_topics_leave_it_to_their_watcher(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("KAFKALAKE_SLA_WEBHOOK_CONN_ID", "ops_alerts")
    file = tmp_path / "topics.yaml"
    file.write_text(
        "topics:\n"
        "  - {name: plain, freshness_sla: 30m}\n"
        "  - {name: fresh, freshness_sla: 30m, schedule: freshness, sla_webhook_conn_id: own_hook}\n"
    )
    catalog = load_catalog(file, tmp_path / "lake", strict=True)
    for name, alert, hook in (("plain", True, "ops_alerts"), ("fresh", False, "own_hook")):
        dag = dag_for(catalog.topic(name), catalog, tmp_path / "lake")
        preflight, ingest = dag.get_task("check_new_offsets"), dag.get_task("ingest")
        assert (preflight.op_kwargs["alert_data_age"], preflight.op_kwargs["sla_webhook_conn_id"]) == (
            alert,
            hook,
        )
        assert (ingest.alert_data_age, ingest.sla_webhook_conn_id) == (alert, hook)


def test_a_task_side_post_that_fails_names_the_webhook_but_never_its_token(monkeypatch, caplog):
    token = "T0KEN-task-side-4c2e"
    monkeypatch.setenv(
        "AIRFLOW_CONN_KAFKALAKE_TEST_AGE_HOOK",
        json.dumps({"conn_type": "http", "host": f"http://127.0.0.1:9/hooks/{token}"}),
    )
    with pytest.raises(WebhookError) as excinfo:
        send_webhook("kafkalake_test_age_hook", {"text": "x"})
    assert "127.0.0.1:9/***" in str(excinfo.value) and token not in str(excinfo.value)
    assert excinfo.value.__suppress_context__
    # Through the alert: a warning, no token, and the run goes on.
    alert_after_run(row(1000), list, table_path="/t", webhook_conn_id="kafkalake_test_age_hook")
    assert "not posted to webhook connection" in caplog.text and token not in caplog.text
