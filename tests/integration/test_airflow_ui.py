"""The real Airflow UI in a real browser: log in, find the DAGs, trigger one, watch it succeed.

Playwright drives Debian's Chromium (/usr/bin/chromium, installed by ``make setup``) headless against
``airflow standalone`` (tests/integration/airflow_server.py), and against Airflow as deployed
(test_deployed_airflow.py). The rows the run landed are then read
back with delta-rs. On failure a screenshot and the page's text go to the test's tmp dir.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote

import pytest
from deltalake import DeltaTable

from kafkalake.config.catalog import load_catalog
from kafkalake.config.topic import dag_id_for
from kafkalake.dev import producer
from kafkalake.dev.broker import LocalKafka
from kafkalake.dev.producer import Record
from kafkalake.lake import run_history

from .airflow_server import START_TIMEOUT, AirflowServer, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.browser]

CHROMIUM = "/usr/bin/chromium"
# Headless on a machine without outside network: no GPU, no background calls home, a fresh profile.
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
EVENTS = 25
RUN_TIMEOUT = 480  # seconds for the triggered run (and a scheduled one before it): Spark on 2 busy cores
STEP_TIMEOUT_MS = 90_000
LINK_ATTEMPTS = 3
LINK_WAIT_MS = 30_000


def follow_link(page, link, url: re.Pattern[str]) -> None:
    """Click ``link`` until the page is at ``url``: the UI's router can drop a click that lands while
    React re-renders the page (seen once in CI, on the 2 busy cores: the click took, the page stayed).
    A user clicks again; a link that never navigates still fails, naming where the page is."""
    # Here, not at the top: without Playwright the module still imports, and the fixture skips.
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    for _ in range(LINK_ATTEMPTS):
        link.click()
        try:
            page.wait_for_url(url, timeout=LINK_WAIT_MS)
            return
        except PlaywrightTimeout:
            continue
    raise AssertionError(f"{LINK_ATTEMPTS} clicks on {link} left the page at {page.url}, not {url.pattern}")


@pytest.fixture
def page(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[object]:
    """A Chromium page; on a failed test its screenshot and text are saved in ``tmp_path``."""
    playwright_api = pytest.importorskip("playwright.sync_api")
    if shutil.which(CHROMIUM) is None:
        pytest.fail(f"{CHROMIUM} is missing: `make setup` installs it (apt-get install chromium)")
    with playwright_api.sync_playwright() as playwright:
        # launch() gives Chromium a new empty profile (--user-data-dir) of its own each time.
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        context = browser.new_context(viewport={"width": 1400, "height": 900})
        page = context.new_page()
        page.set_default_timeout(STEP_TIMEOUT_MS)
        try:
            yield page
        finally:
            report = getattr(request.node, "rep_call", None)
            if report is None or report.failed:
                page.screenshot(path=str(tmp_path / "failure.png"), full_page=True)
                (tmp_path / "failure.txt").write_text(f"{page.url}\n\n{page.inner_text('body')}")
                print(f"screenshot of the failed page: {tmp_path / 'failure.png'}")
            browser.close()


# Starting the shared server (up to START_TIMEOUT) is part of the first test that uses it.
@pytest.mark.timeout(START_TIMEOUT + RUN_TIMEOUT + 300)
def test_trigger_a_dag_from_the_ui_and_see_its_run_succeed(
    airflow_server: AirflowServer, kafka: LocalKafka, page
):
    ui_topic = airflow_server.ui_topic
    topic = load_catalog(airflow_server.catalog, airflow_server.lake).topic(ui_topic)
    producer.create_topic(kafka.bootstrap_servers, ui_topic, partitions=2)
    records = [Record(f"k{i}".encode(), f'{{"n": {i}}}'.encode(), i % 2) for i in range(EVENTS)]
    assert len(producer.produce(kafka.bootstrap_servers, ui_topic, records)) == EVENTS

    # Any page leads to the login page first; the password is the one the server was given.
    page.goto(f"{airflow_server.url}/")
    page.wait_for_url(re.compile(r"/auth/login"))
    page.get_by_label("Username").fill("admin")
    page.get_by_label("Password").fill(airflow_server.password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(lambda url: "/auth/login" not in url)

    # The DAG list shows one DAG per catalog topic.
    page.goto(f"{airflow_server.url}/dags")
    dag_id = dag_id_for(ui_topic)
    for shown in (dag_id, dag_id_for(airflow_server.late_topic)):
        page.get_by_role("link", name=shown, exact=True).wait_for()

    follow_link(page, page.get_by_role("link", name=dag_id, exact=True), re.compile(rf"/dags/{dag_id}$"))
    page.get_by_text("1 deadline", exact=True).wait_for()  # the freshness Deadline Alert

    page.get_by_role("button", name="Trigger").first.click()
    dialog = page.get_by_role("dialog")
    # Checked by default: a paused DAG's run would never start. Unpausing also lets the scheduler
    # start the DAG's first scheduled run (no catch-up: one run, due now); with max_active_runs=1
    # one of the two runs waits for the other, and whichever runs first lands the events.
    assert dialog.get_by_label(f"Unpause {dag_id} on trigger").is_checked()
    dialog.get_by_role("button", name="Trigger").click()

    # The UI opens the new run's page: it shows the run's state and its deadline.
    page.wait_for_url(re.compile(rf"/dags/{dag_id}/runs/manual__"))
    run_url = page.url
    run_id = unquote(run_url.rsplit("/runs/", 1)[1])
    run_state = re.compile(rf"^{re.escape(run_id)}\n(Queued|Running|Success|Failed)\s*$", re.MULTILINE)
    seen: list[str] = []
    # The run's freshness deadline (6h SLA - 2h interval after it was queued), then whether it was met;
    # the page renders that section after the rest.
    due = "Must complete within 4 hours of queue time"
    deadline_section = page.get_by_text(re.compile(rf"^({due}|Met|Missed)$"))

    def shown() -> tuple[str, str, bool]:
        deadline_section.first.wait_for()
        text = page.inner_text("body")
        match = run_state.search(text)
        state = match.group(1) if match else "?"
        if not seen or seen[-1] != state:
            seen.append(state)
        return state, text, bool(re.search(r"^Deadline\s*\nMet\s*$", text, re.MULTILINE))

    state, text, met = shown()
    if state in ("Queued", "Running"):
        # Its deadline, or already "Met": the run's last task has ended and the scheduler has not
        # yet marked the run itself (seen in a full run, where an idle run takes seconds).
        assert due in text or met, f"a {state} run should show its deadline"
    if state not in ("Success", "Failed"):
        # While Spark runs, the browser waits on a blank page: the UI re-rendering every few
        # seconds cost Chromium ~50 CPU-s a test on 2 cores the run itself needs. The run page is
        # opened again once the REST API says the run is over.
        page.goto("about:blank")
        wait_for(
            lambda: airflow_server.finished_run(dag_id, run_id),
            what=f"run {run_id} to finish",
            timeout=RUN_TIMEOUT,
            every=2,
        )
        page.goto(run_url)
        # The page shows the end, and whether the deadline was met, as the scheduler records them.
        deadline = time.monotonic() + 60
        while True:
            state, text, met = shown()
            if (state in ("Success", "Failed") and met) or time.monotonic() > deadline:
                break
            page.wait_for_timeout(3_000)
            page.reload()
    assert state == "Success", f"run {run_id} went through {seen} (tasks in the screenshot)"
    assert met, "the run's deadline is not shown as met"
    finished = airflow_server.finished_run(dag_id, run_id)
    assert finished is not None and finished.retried == {}, f"run {run_id} succeeded only after retries"

    rows = DeltaTable(topic.path).to_pyarrow_table()
    assert rows.num_rows == EVENTS
    assert sorted(rows.column("value").to_pylist()) == sorted(r.value for r in records)

    # This real run in the run history the tasks wrote, and on the freshness view (delta-rs in the
    # web server): the rows it landed are bronze's, on the topic page and the fleet page.
    history = run_history.read(topic.history_path)
    landed = [r for r in history if r.kind in ("ingest", "catch_up") and r.outcome == "success"]
    assert sum(r.rows for r in landed) == EVENTS, history
    assert {r.dag_id for r in history} == {dag_id} and not [r for r in history if r.outcome == "failed"]
    page.goto(f"{airflow_server.url}/kafkalake/freshness/dags/{dag_id}")
    shown_rows = page.locator("table.runs .rows").all_inner_texts()
    assert sorted(int(n.replace(",", "")) for n in shown_rows) == sorted(r.rows for r in history)
    assert str(EVENTS) in shown_rows
    page.goto(f"{airflow_server.url}/kafkalake/freshness/")
    fleet_row = page.locator(f'tr[data-topic="{ui_topic}"]')
    # The last run's outcome: the manual run's, or the scheduled run's after it (idle: nothing new).
    assert fleet_row.locator(".outcome").inner_text() == run_history.read(topic.history_path)[-1].outcome
    assert fleet_row.locator(".age").inner_text() != "-"  # the run measured the table's data age
