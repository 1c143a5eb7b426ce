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
