"""The standalone Airflow's REST client: what it sends again when the API server answers 5xx."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from kafkalake.dev import standalone_airflow
from kafkalake.dev.standalone_airflow import StandaloneAirflow


def server(tmp_path: Path) -> StandaloneAirflow:
    return StandaloneAirflow("http://127.0.0.1:1", tmp_path, {}, tmp_path / "log", _token="t")


def answering(monkeypatch: pytest.MonkeyPatch, codes: list[int]) -> list[str]:
    sent: list[str] = []

    def request(method: str, url: str, **_kwargs: object) -> httpx.Response:
        sent.append(method)
        return httpx.Response(codes[len(sent) - 1], json={"n": len(sent)}, request=httpx.Request(method, url))

    monkeypatch.setattr(httpx, "request", request)
    monkeypatch.setattr(standalone_airflow.time, "sleep", lambda _s: None)
    return sent


@pytest.mark.parametrize("method", ["GET", "PATCH"])
def test_a_read_or_a_patch_is_sent_again_after_a_500(tmp_path, monkeypatch, method):
    sent = answering(monkeypatch, [500, 500, 200])
    assert server(tmp_path).api(method, "/dags/x") == {"n": 3}
    assert sent == [method] * 3


def test_a_post_is_sent_once_since_it_may_have_created_a_run(tmp_path, monkeypatch):
    sent = answering(monkeypatch, [500, 200])
    with pytest.raises(httpx.HTTPStatusError):
        server(tmp_path).api("POST", "/dags/x/dagRuns", json={})
    assert sent == ["POST"]


def test_it_gives_up_after_five_and_says_what_failed(tmp_path, monkeypatch):
    sent = answering(monkeypatch, [503] * 5)
    with pytest.raises(httpx.HTTPStatusError, match="503"):
        server(tmp_path).api("GET", "/dags/x")
    assert len(sent) == 5


def test_a_client_error_is_not_sent_again(tmp_path, monkeypatch):
    sent = answering(monkeypatch, [404, 200])
    with pytest.raises(httpx.HTTPStatusError, match="404"):
        server(tmp_path).api("PATCH", "/dags/x", json={"is_paused": False})
    assert sent == ["PATCH"]


def test_a_timed_out_wait_names_what_it_waited_for_and_tells_the_state():
    with pytest.raises(AssertionError, match=r"(?s)waiting for the runs of d\n2 runs queued"):
        standalone_airflow.wait_for(
            lambda: [], what="the runs of d", timeout=0, explain=lambda: "2 runs queued"
        )


def test_a_report_that_fails_does_not_hide_the_timeout():
    def broken() -> str:
        raise RuntimeError("database is locked")

    with pytest.raises(
        AssertionError, match=r"(?s)waiting for x\n\(no report: RuntimeError\('database is locked'\)\)"
    ):
        standalone_airflow.wait_for(lambda: None, what="x", timeout=0, explain=broken)


def test_a_met_condition_returns_its_value_without_a_report():
    def never() -> str:
        raise AssertionError("no report when the wait succeeds")

    assert standalone_airflow.wait_for(lambda: ["run"], what="x", timeout=0, explain=never) == ["run"]


def test_the_runs_report_lists_the_runs_their_tasks_the_backfills_and_the_log(tmp_path):
    import sqlite3

    with sqlite3.connect(tmp_path / "airflow.db") as db:
        db.executescript(
            """
            CREATE TABLE dag_run (id INTEGER PRIMARY KEY, dag_id, run_id, run_type, state, queued_at,
                                  start_date, end_date, backfill_id);
            CREATE TABLE task_instance (dag_id, run_id, task_id, state, try_number, hostname,
                                        start_date, end_date);
            CREATE TABLE backfill (id, dag_id, from_date, to_date, is_paused, max_active_runs, completed_at);
            INSERT INTO dag_run VALUES (1, 'd', 'backfill__1', 'backfill', 'queued', 'q', NULL, NULL, 7);
            INSERT INTO dag_run VALUES (2, 'late', 'scheduled__2', 'scheduled', 'running', 'q', 's',
                                        NULL, NULL);
            INSERT INTO dag_run VALUES (3, 'other', 'scheduled__3', 'scheduled', 'success', 'q', 's',
                                        'e', NULL);
            INSERT INTO task_instance VALUES ('d', 'backfill__1', 'check_new_offsets', 'scheduled', 0, '',
                                              NULL, NULL);
            INSERT INTO backfill VALUES (7, 'd', 'f', 't', 0, 1, NULL);
            """
        )
    (tmp_path / "log").write_text("scheduler | the last line")

    report = server(tmp_path).runs_report("d")

    assert "('backfill__1', 'backfill', 'queued', 'q', None, None, 7)" in report
    assert "    ('check_new_offsets', 'scheduled', 0, '', None, None)" in report
    assert "  (7, 'f', 't', 0, 1, None)" in report
    assert "('late', 'scheduled__2', 'running')" in report and "scheduled__3" not in report
    assert report.endswith("scheduler | the last line")
