"""The freshness view's pure parts: risk order, formatting, the SVG chart, the pages' HTML."""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta

import pytest

from kafkalake.airflow import freshness_figures as fig
from kafkalake.airflow import freshness_pages as pages
from kafkalake.airflow.freshness_svg import Point, line_chart, nice_ceiling, nice_duration
from kafkalake.lake.run_history import RunRecord

NOW = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
SVG = "{http://www.w3.org/2000/svg}"


def run(
    ended_minutes_ago: float,
    *,
    topic: str = "orders",
    outcome: str = "success",
    kind: str = "ingest",
    newest_minutes_ago: float | None = None,
    **fields: object,
) -> RunRecord:
    ended = NOW - timedelta(minutes=ended_minutes_ago)
    newest = None if newest_minutes_ago is None else NOW - timedelta(minutes=newest_minutes_ago)
    values: dict[str, object] = {
        "topic": topic,
        "dag_id": f"kafka_{topic}",
        "run_id": f"r{ended_minutes_ago}",
        "task_id": "ingest",
        "try_number": 1,
        "kind": kind,
        "outcome": outcome,
        "failure_kind": None if outcome != "failed" else "kafka_unreachable",
        "started_at": ended - timedelta(seconds=40),
        "ended_at": ended,
        "sla_seconds": 3600.0,
        "dead_letters": {},
        "lag_records": None,
        "lag_seconds": None,
        "newest_timestamp": newest,
        "data_age_seconds": None if newest is None else (ended - newest).total_seconds(),
        "driver_peak_memory_bytes": None,
        "duration_seconds": 40.0,
        "schema_version": None,
        "files_before": None,
        "files_after": None,
        "table_bytes_before": None,
        "table_bytes_after": None,
    }
    values.update(fields)
    return RunRecord(**values)  # type: ignore[arg-type]


def status(topic: str, sla_minutes: float, runs: list[RunRecord]) -> fig.TopicStatus:
    return fig.status(topic, f"kafka_{topic}", sla_minutes * 60, runs, NOW)


def test_data_age_comes_from_the_newest_measured_run_and_grows_with_time():
    runs = [run(30, newest_minutes_ago=35), run(10, newest_minutes_ago=12), run(5, kind="care")]
    s = status("orders", 60, runs)
    assert s.last is runs[-1]  # the care run: the last outcome shown
    assert s.measured is runs[1]
    assert s.data_age_seconds == 12 * 60  # now - newest timestamp, not the age at the run's end
    assert s.risk == pytest.approx(0.2)
    assert s.level == "ok"


def test_risk_levels_and_order():
    late = status("late", 10, [run(5, newest_minutes_ago=15)])  # 150 %
    warn = status("warn", 100, [run(5, newest_minutes_ago=80)])  # 80 %
    ok_b = status("b", 60, [run(1, newest_minutes_ago=6)])  # 10 %
    ok_a = status("a", 60, [run(1, newest_minutes_ago=6)])  # 10 %, same: by name
    never = status("never", 60, [])
    care_only = status("care-only", 60, [run(1, kind="care")])
    assert (late.level, warn.level, ok_a.level, never.level) == ("late", "warn", "ok", "unknown")
    assert math.isinf(never.risk) and care_only.data_age_seconds is None
    order = [s.topic for s in fig.by_risk([ok_b, warn, never, late, ok_a, care_only])]
    assert order == ["care-only", "never", "late", "warn", "a", "b"]


def test_bar_ends_at_twice_the_sla():
    assert fig.bar_percent(0.0) == 0.0
    assert fig.bar_percent(0.5) == 25.0
    assert fig.bar_percent(1.0) == 50.0
    assert fig.bar_percent(7.0) == 100.0
    assert fig.bar_percent(math.inf) == 0.0


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (None, "-"),
        (0.4, "0s"),
        (59.6, "1m00s"),
        (125, "2m05s"),
        (3600 * 2 + 600, "2h10m"),
        (86400 * 3 + 7200, "3d2h"),
    ],
)
def test_age_text(seconds, text):
    assert fig.age_text(seconds) == text


def test_counts_bytes_and_dead_letters():
    assert fig.count_text(1234567) == "1,234,567"
    assert fig.count_text(None) == "-"
    assert fig.bytes_text(512) == "512 B"
    assert fig.bytes_text(1536) == "1.5 KiB"
    assert fig.bytes_text(3 * 1024**3) == "3.0 GiB"
    assert fig.dead_letter_text({}) == "0"
    assert fig.dead_letter_text({"too_large": 1, "bad_json": 2, "none": 0}) == "3 (bad_json 2, too_large 1)"


def test_schema_versions_and_care_runs():
    runs = [
        run(50, schema_version=1),
        run(40, schema_version=2),
        run(30, schema_version=2),
        run(20, kind="care", files_before=40, files_after=2),
    ]
    versions = fig.schema_versions(runs)
    assert [(v.version, v.first_seen, v.runs) for v in versions] == [
        (1, runs[0].ended_at, 1),
        (2, runs[1].ended_at, 2),
    ]
    assert fig.care_runs(runs) == [runs[3]]


def _points(svg: str) -> list[tuple[float, float]]:
    root = ET.fromstring(svg)
    return [(float(c.get("cx", "")), float(c.get("cy", ""))) for c in root.iter(f"{SVG}circle")]


def test_chart_places_points_by_time_and_value():
    start = NOW - timedelta(hours=4)
    points = [
        Point(NOW - timedelta(hours=1), 50.0, "b"),
        Point(NOW - timedelta(hours=3), 100.0, "a", bad=True),
        Point(NOW - timedelta(hours=5), 1.0, "outside the window"),
    ]
    svg = line_chart(
        points, start=start, end=NOW, title="t", value_text=str, threshold=80.0, threshold_label="SLA"
    )
    root = ET.fromstring(svg)  # well-formed
    dots = _points(svg)
    assert len(dots) == 2
    (x_a, y_a), (x_b, y_b) = dots  # time order
    assert x_a < x_b and y_a < y_b  # the later point is further right; the larger value higher up
    assert [c.get("class") for c in root.iter(f"{SVG}circle")] == ["dot bad", "dot"]
    line = next(root.iter(f"{SVG}polyline")).get("points", "")
    assert line == f"{x_a},{y_a} {x_b},{y_b}"
    threshold = next(e for e in root.iter(f"{SVG}line") if e.get("class") == "threshold")
    # The axis runs to a round 100 (>= 100 * 1.05 -> 200): the SLA at 80 sits below the top point.
    assert y_a < float(threshold.get("y1", "")) < y_b
    assert [t.text for t in root.iter(f"{SVG}title")][1:] == ["a", "b"]


def test_chart_without_points_says_so():
    svg = line_chart([], start=NOW - timedelta(days=1), end=NOW, title="t", value_text=str)
    assert "no runs in this window" in svg
    assert _points(svg) == []


def test_chart_escapes_labels():
    svg = line_chart(
        [Point(NOW, 1.0, "<script>x</script>")],
        start=NOW - timedelta(days=1),
        end=NOW,
        title="a&b",
        value_text=str,
    )
    assert "<script>" not in svg
    ET.fromstring(svg)


def test_fleet_page_rows_by_risk_refreshing_and_linked():
    statuses = [
        status("quiet", 60, [run(2, newest_minutes_ago=6, lag_records=0, lag_seconds=0.0)]),
        status(
            "<b>late</b>",
            10,
            [run(5, newest_minutes_ago=15, outcome="failed", lag_records=1234, lag_seconds=610.0)],
        ),
    ]
    html = pages.fleet_page(statuses, base="/kafkalake/freshness", now=NOW)
    assert '<meta http-equiv="refresh" content="60">' in html
    assert "<b>late</b>" not in html  # escaped
    topics = re.findall(r'data-topic="([^"]+)"', html)
    assert topics == ["&lt;b&gt;late&lt;/b&gt;", "quiet"]
    late_row = html.split('data-topic="&lt;b&gt;late')[1].split("</tr>")[0]
    assert 'class="num age">15m00s<' in late_row
    assert 'class="num risk">150%<' in late_row
    assert 'class="num lag-records">1,234<' in late_row
    assert 'class="num lag-time">10m10s<' in late_row
    assert "failed: kafka_unreachable" in late_row
    assert 'style="width:75.0%"' in late_row
    assert 'href="/kafkalake/freshness/dags/kafka_%3Cb%3Elate%3C%2Fb%3E"' in late_row
    assert "http" not in html.replace("http-equiv", "")  # nothing loaded from elsewhere


def test_topic_page_shows_runs_schemas_and_care():
    runs = [
        run(
            300,
            newest_minutes_ago=301,
            rows=120,
            bytes=4096,
            dead_letters={"bad_json": 2},
            schema_version=1,
            lag_records=10,
            lag_seconds=30.0,
        ),
        run(200, outcome="failed", lag_records=500, lag_seconds=900.0),
        run(
            100,
            kind="care",
            files_before=37,
            files_after=3,
            table_bytes_before=5 * 1024**2,
            table_bytes_after=4 * 1024**2,
        ),
        run(50, newest_minutes_ago=52, rows=7, bytes=2048, schema_version=2, lag_records=0, lag_seconds=0.0),
    ]
    s = status("orders", 60, runs)
    html = pages.topic_page(s, runs, base="/kafkalake/freshness", start=NOW - timedelta(days=1), days=1)
    assert html.count("<svg") == 3
    assert html.count('class="dot bad"') == 2  # the failed run's lag points (it has no data age)
    assert 'class="num rows">120<' in html and 'class="num rows">7<' in html
    assert 'class="num bytes">4.0 KiB<' in html
    assert 'class="num dead-letters">2 (bad_json 2)<' in html
    assert "<td>37</td>" not in html and '<td class="num">37</td><td class="num">3</td>' in html
    assert "5.0 MiB" in html and "4.0 MiB" in html
    schemas = html.split('class="schemas"')[1].split("</table>")[0]
    assert re.findall(r'<tr><td class="num">(\d+)</td>', schemas) == ["1", "2"]
    assert 'Data age now <b class="age">52m00s</b>' in html
    assert 'href="/kafkalake/freshness/"' in html


@pytest.mark.parametrize(
    ("top", "axis"),
    [(0.0, 4.0), (3.0, 4.0), (25_000.0, 28_800.0), (7_000.0, 7_200.0), (400_000.0, 4 * 2 * 86_400.0)],
)
def test_time_axes_end_on_round_durations(top, axis):
    assert nice_duration(top) == axis
    assert fig.age_text(axis / 4) in {"1s", "30m00s", "2h00m", "2d0h"}


@pytest.mark.parametrize(("top", "axis"), [(0.0, 1.0), (7.0, 10.0), (5_250.0, 10_000.0), (120.0, 200.0)])
def test_count_axes_end_on_round_numbers(top, axis):
    assert nice_ceiling(top) == axis


def test_a_time_chart_labels_its_axis_in_round_durations():
    points = [Point(NOW - timedelta(hours=1), 6.9 * 3600, "x")]
    svg = line_chart(points, start=NOW - timedelta(hours=2), end=NOW, title="t", value_text=fig.age_text,
                     axis_top=nice_duration)  # fmt: skip
    labels = [t.text for t in ET.fromstring(svg).iter(f"{SVG}text") if t.get("text-anchor") == "end"][:5]
    assert labels == ["0s", "2h00m", "4h00m", "6h00m", "8h00m"]


def test_a_refused_request_says_why_and_where_to_log_in():
    page = pages.refused_page("Not authenticated", login="/auth/login?next=<x>")
    assert '<p class="refused">Not authenticated. ' in page
    assert 'href="/auth/login?next=&lt;x&gt;"' in page
    assert "Log in" not in pages.refused_page("Forbidden", login=None)


def test_an_object_store_topics_history_is_read_with_its_own_connection_not_the_process_settings(
    tmp_path, monkeypatch
):
    """The web server serves many topics at once: each object-store topic's history is read with
    the settings of its own storage connection, and the process's settings stay as they were."""
    import json

    from kafkalake.airflow import freshness_view
    from kafkalake.config.catalog import load_catalog
    from kafkalake.lake import store_settings

    catalog = tmp_path / "topics.yaml"
    catalog.write_text(
        "topics:\n"
        "  - name: on-store\n    freshness_sla: 1h\n    path: s3a://bucket/bronze/on_store\n"
        "    storage_conn_id: it_view_store\n"
        "  - name: local\n    freshness_sla: 1h\n"
    )
    extra = {"endpoint_url": "http://127.0.0.1:9", "region_name": "us-east-1"}
    conn = {"conn_type": "aws", "login": "view-key", "password": "view-secret", "extra": extra}
    monkeypatch.setenv("AIRFLOW_CONN_IT_VIEW_STORE", json.dumps(conn))
    topics = {t.name: t for t in load_catalog(catalog, tmp_path / "lake").topics}

    settings = freshness_view._store(topics["on-store"])
    assert settings is not None and settings.delta_options()["AWS_ENDPOINT_URL"] == "http://127.0.0.1:9"
    assert freshness_view._store(topics["local"]) is None
    assert store_settings.current() == store_settings.StorageSettings()
    assert freshness_view._read(topics["local"], NOW) == []
