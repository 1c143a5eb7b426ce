"""The freshness view in a real browser, served by the real Airflow with the plugin loaded.

Run-history rows are written with the run_history API into one topic's history table (the
standalone server's backfill topic, which no test of this server runs), then Chromium logs in as a
read-only user and reads the figures back off the fleet page and the topic page, and through the
DAG's "Freshness" tab in Airflow's own UI. Anonymous requests are refused (the simple auth manager is
on). Screenshots of both pages go to the test's tmp dir; with KAFKALAKE_KEEP_SCREENSHOTS=1 also to
docs/images/ (the README shows the fleet page).
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from kafkalake.config.catalog import load_catalog
from kafkalake.config.topic import TopicConfig, dag_id_for
from kafkalake.core.paths import REPO_ROOT
from kafkalake.lake import run_history
from kafkalake.lake.run_history import RunRecord

from .airflow_server import BACKFILL_TOPIC, START_TIMEOUT, VIEWER, AirflowServer
from .test_airflow_ui import follow_link, page  # noqa: F401  (page: the Chromium page fixture)

pytestmark = [pytest.mark.integration, pytest.mark.browser]

FLEET = "/kafkalake/freshness/"
KEEP_SCREENSHOTS = "KAFKALAKE_KEEP_SCREENSHOTS"


def record(topic: TopicConfig, ended: datetime, **fields: Any) -> RunRecord:
    """A history row as the DAG's tasks write one: an ingest of 42 s, ``fields`` on top."""
    run_id = f"scheduled__{ended.isoformat()}"
    base = RunRecord(topic.name, topic.dag_id, run_id, "ingest", 1, "ingest", "success", None,
                     ended - timedelta(seconds=42), ended, topic.freshness_sla.total_seconds(),
                     batches=1, jvm_count=1, duration_seconds=42.0)  # fmt: skip
    if (newest := fields.get("newest_timestamp")) is not None:
        fields["data_age_seconds"] = (ended - newest).total_seconds()
    return dataclasses.replace(base, **fields)


def history(topic: TopicConfig, now: datetime) -> list[RunRecord]:
    """Two days of one topic: ingests, a failed run, a schema change, a care run; oldest first."""
    hours = lambda h: now - timedelta(hours=h)  # noqa: E731
    return [
        record(topic, hours(40), rows=1200, bytes=96_000, parsed_rows=1197, newest_timestamp=hours(40.1),
               dead_letters={"bad_json": 3}, lag_records=0, lag_seconds=0.0, schema_version=1),
        record(topic, hours(30), rows=800, bytes=64_000, parsed_rows=800, newest_timestamp=hours(30.5),
               lag_records=40, lag_seconds=95.0, schema_version=2),
        record(topic, hours(20), outcome="failed", failure_kind="kafka_unreachable", batches=0, jvm_count=0,
               lag_records=5_000, lag_seconds=7_200.0),
        record(topic, hours(12), kind="care", task_id="maintain_table", batches=0,
               files_before=37, files_after=3, table_bytes_before=5 * 1024**2, table_bytes_after=4 * 1024**2),
        record(topic, hours(9), rows=5_321, bytes=425_680, parsed_rows=5_320, newest_timestamp=hours(9.2),
               dead_letters={"bad_json": 1}, lag_records=1_234, lag_seconds=610.0, schema_version=2),
    ]  # fmt: skip


@pytest.mark.timeout(START_TIMEOUT + 300)
def test_the_view_shows_the_run_history_to_a_reader_and_refuses_anonymous_requests(
    airflow_server: AirflowServer,
    page,  # noqa: F811
    tmp_path: Path,
):
    topic = load_catalog(airflow_server.catalog, airflow_server.lake).topic(BACKFILL_TOPIC)
    now = datetime.now(UTC)
    for row in history(topic, now):
        run_history.append(topic.history_path, row)
    written = run_history.read(topic.history_path)
    assert len(written) == 5  # the API reads back what the page will show
    url = airflow_server.url
    dag_id = topic.dag_id

    # Anonymous: refused, both pages, with Airflow's own auth answer.
    for path in (FLEET, f"/kafkalake/freshness/dags/{dag_id}"):
        anonymous = httpx.get(url + path, timeout=30)
        assert anonymous.status_code == 401, (path, anonymous.status_code, anonymous.text[:300])
        assert "1,234" not in anonymous.text
        assert "Log in to Airflow" in anonymous.text and "/auth/login" in anonymous.text
    # A bearer token of the read-only user is enough.
    token = httpx.post(
        f"{url}/auth/token",
        json={"username": VIEWER, "password": airflow_server.password_of(VIEWER)},
        timeout=30,
    ).json()["access_token"]
    fleet = httpx.get(url + FLEET, headers={"Authorization": f"Bearer {token}"}, timeout=60)
    assert fleet.status_code == 200, fleet.text[:500]
    assert f'data-topic="{BACKFILL_TOPIC}"' in fleet.text

    # The browser, logged in as the read-only user through Airflow's login page.
    page.goto(f"{url}/")
    page.wait_for_url(re.compile(r"/auth/login"))
    page.get_by_label("Username").fill(VIEWER)
    page.get_by_label("Password").fill(airflow_server.password_of(VIEWER))
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(lambda u: "/auth/login" not in u)

    page.goto(url + FLEET)
    rows = page.locator("tbody tr")
    shown = [rows.nth(i).get_attribute("data-topic") for i in range(rows.count())]
    # Every catalog entry, highest risk first; one with no measured data age counts as highest.
    catalog = load_catalog(airflow_server.catalog, airflow_server.lake)
    assert sorted(shown) == sorted(t.name for t in catalog.topics)
    risks = [
        float("inf") if r == "-" else float(r.rstrip("%")) for r in page.locator(".risk").all_inner_texts()
    ]
    assert risks == sorted(risks, reverse=True)
    row = page.locator(f'tr[data-topic="{BACKFILL_TOPIC}"]')
    # Data age now: 9.2 h (plus the seconds since) of a 6 h SLA.
    assert re.fullmatch(r"9h1[2-9]m", row.locator(".age").inner_text())
    # 153 % when the rows were written; on a busy machine the page comes minutes later.
    assert 153 <= int(row.locator(".risk").inner_text().rstrip("%")) <= 156
    assert row.get_attribute("class") == "late"
    assert row.locator(".lag-records").inner_text() == "1,234"
    assert row.locator(".lag-time").inner_text() == "10m10s"
    assert row.locator(".outcome").inner_text() == "success"
    assert page.locator('meta[http-equiv="refresh"]').get_attribute("content") == "60"
    page.screenshot(path=str(tmp_path / "freshness-fleet.png"), full_page=True)

    topic_link = row.get_by_role("link", name=BACKFILL_TOPIC)
    follow_link(page, topic_link, re.compile(rf"/kafkalake/freshness/dags/{dag_id}$"))
    runs = page.locator("table.runs tbody tr")
    assert runs.count() == len(written)
    newest_first = [runs.nth(i).inner_text() for i in range(runs.count())]
    assert [r.split("\t")[1] for r in newest_first] == ["ingest", "care", "ingest", "ingest", "ingest"]
    assert page.locator("table.runs .rows").all_inner_texts() == ["5,321", "0", "0", "800", "1,200"]
    assert page.locator("table.runs .bytes").all_inner_texts()[0] == "415.7 KiB"
    assert page.locator("table.runs .dead-letters").all_inner_texts() == [
        "1 (bad_json 1)", "0", "0", "0", "3 (bad_json 3)",
    ]  # fmt: skip
    assert "failed: kafka_unreachable" in newest_first[2]
    versions = page.locator("table.schemas tbody tr").all_inner_texts()
    assert [v.split("\t")[0] for v in versions] == ["1", "2"]
    care = page.locator("table.care tbody tr").all_inner_texts()
    assert len(care) == 1 and care[0].split("\t")[1:] == ["37", "3", "5.0 MiB", "4.0 MiB"]
    charts = page.locator("svg.chart")
    assert charts.count() == 3
    # One dot per run that measured a data age (3), per lag (4), the failed run's in red.
    assert charts.nth(0).locator("circle").count() == 3
    assert charts.nth(1).locator("circle").count() == 4
    assert charts.nth(1).locator("circle.bad").count() == 1
    page.screenshot(path=str(tmp_path / "freshness-topic.png"), full_page=True)

    # From Airflow's own UI: the DAG's "Freshness" tab shows the topic page in a frame, and the
    # navigation's "Freshness" the fleet page (the UI's routes: plugin/<url_route>).
    page.goto(f"{url}/dags/{dag_id}")
    dag_tab = page.locator(f'a[href$="/dags/{dag_id}/plugin/kafkalake-freshness-dag"]').first
    follow_link(page, dag_tab, re.compile(rf"/dags/{dag_id}/plugin/kafkalake-freshness-dag$"))
    frame = page.frame_locator("iframe").first
    frame.locator("table.runs tbody tr").first.wait_for()
    assert frame.locator("h1").inner_text() == BACKFILL_TOPIC
    nav_link = page.locator('a[href$="/plugin/kafkalake-freshness"]').first
    follow_link(page, nav_link, re.compile(r"/plugin/kafkalake-freshness$"))
    page.frame_locator("iframe").first.locator(f'tr[data-topic="{BACKFILL_TOPIC}"]').wait_for()

    if os.environ.get(KEEP_SCREENSHOTS) == "1":
        for name in ("freshness-fleet.png", "freshness-topic.png"):
            shutil.copy(tmp_path / name, REPO_ROOT / "docs" / "images" / name)
    assert dag_id == dag_id_for(BACKFILL_TOPIC)
