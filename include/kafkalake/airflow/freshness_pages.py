"""The freshness view's two pages as plain HTML and CSS: nothing loaded from anywhere else.

Every figure comes from the run history (counts, times, offsets' lags): no record value and no
connection setting is ever on a page. Names from the catalog are escaped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from html import escape

from kafkalake.airflow import freshness_figures as fig
from kafkalake.airflow.freshness_svg import Point, line_chart, nice_ceiling, nice_duration
from kafkalake.lake.run_history import RunRecord

#: Seconds between the fleet page's reloads (a meta refresh: no script needed).
REFRESH_SECONDS = 60

CSS = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:16px;color:#1d2433}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:24px 0 6px}
.muted{color:#5b6475} a{color:#0b5cad}
table{border-collapse:collapse;margin-top:8px}
th,td{padding:4px 10px;border-bottom:1px solid #e3e6eb;text-align:left}
th{font-weight:600;background:#f5f7fa} td.num{text-align:right;font-variant-numeric:tabular-nums}
.bar{position:relative;width:220px;height:14px;background:#eef1f5;border-radius:3px;overflow:hidden}
.bar .fill{position:absolute;left:0;top:0;bottom:0}
.bar .sla{position:absolute;left:50%;top:0;bottom:0;border-left:2px solid #1d2433}
.ok .fill{background:#2f9e44} .warn .fill{background:#f08c00} .late .fill{background:#e03131}
.unknown .fill{background:#adb5bd}
.badge{display:inline-block;padding:0 6px;border-radius:3px;font-size:12px;color:#fff}
.badge.success{background:#2f9e44} .badge.failed{background:#e03131} .badge.idle{background:#868e96}
.badge.none{background:#adb5bd}
svg.chart{display:block;margin:6px 0 2px} svg .plot{fill:#fafbfc;stroke:#d0d5dd}
svg .grid{stroke:#e9ecef} svg .axis{font-size:11px;fill:#5b6475}
svg .line{fill:none;stroke:#0b5cad;stroke-width:1.5} svg .dot{fill:#0b5cad} svg .dot.bad{fill:#e03131}
svg .threshold{stroke:#e03131;stroke-dasharray:5 4} svg .threshold-label{font-size:11px;fill:#e03131}
svg .empty{font-size:13px;fill:#868e96}
"""


def _page(title: str, body: str, *, refresh: int | None = None) -> str:
    meta = f'<meta http-equiv="refresh" content="{refresh}">' if refresh else ""
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"{meta}<title>{escape(title)}</title><style>{CSS}</style></head>"
        f"<body>{body}</body></html>"
    )


def _badge(run: RunRecord | None) -> str:
    if run is None:
        return '<span class="badge none">no run</span>'
    text = run.outcome if run.failure_kind is None else f"{run.outcome}: {run.failure_kind}"
    return f'<span class="badge {escape(run.outcome)}">{escape(text)}</span>'


def fleet_page(statuses: Sequence[fig.TopicStatus], *, base: str, now: datetime) -> str:
    """Every topic the user may read, highest risk first, reloading itself."""
    rows = []
    for s in fig.by_risk(statuses):
        risk = "-" if s.data_age_seconds is None else f"{s.risk:.0%}"
        last = s.last
        lag_records = None if s.measured is None else s.measured.lag_records
        lag_seconds = None if s.measured is None else s.measured.lag_seconds
        rows.append(
            f'<tr class="{s.level}" data-topic="{escape(s.topic)}">'
            f'<td><a href="{escape(fig.topic_href(s.dag_id, base))}">{escape(s.topic)}</a></td>'
            f'<td><div class="bar {s.level}" title="data age {fig.age_text(s.data_age_seconds)}'
            f' of SLA {fig.age_text(s.sla_seconds)}">'
            f'<div class="fill" style="width:{fig.bar_percent(s.risk)}%"></div>'
            '<div class="sla"></div></div></td>'
            f'<td class="num age">{fig.age_text(s.data_age_seconds)}</td>'
            f'<td class="num">{fig.age_text(s.sla_seconds)}</td>'
            f'<td class="num risk">{risk}</td>'
            f'<td class="num lag-records">{fig.count_text(lag_records)}</td>'
            f'<td class="num lag-time">{fig.age_text(lag_seconds)}</td>'
            f'<td class="outcome">{_badge(last)}</td>'
            f"<td>{escape(last.kind) if last else '-'}</td>"
            f"<td>{fig.time_text(last.ended_at if last else None)}</td>"
            "</tr>"
        )
    table = (
        "<table><thead><tr><th>Topic</th><th>Data age against SLA (mark = SLA)</th><th>Data age</th>"
        "<th>SLA</th><th>Risk</th><th>Lag (records)</th><th>Lag (time)</th><th>Last run</th><th>Kind</th>"
        "<th>Ended</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
        if rows
        else "<p>No topic to show: the catalog is empty, or your user may read none of its DAGs.</p>"
    )
    body = (
        "<h1>Freshness of the fleet</h1>"
        f'<p class="muted">{len(statuses)} topics, highest risk (data age / SLA) first. As of '
        f"{fig.time_text(now)}; this page reloads every {REFRESH_SECONDS} s. Data age: now minus the newest "
        "Kafka timestamp the table held after its last measured run.</p>" + table
    )
    return _page("kafkalake freshness", body, refresh=REFRESH_SECONDS)


def _td(text: str, css: str = "num") -> str:
    """A cell; ``text`` is already HTML (escaped where it comes from outside)."""
    return f'<td class="{css}">{text}</td>' if css else f"<td>{text}</td>"


def _table(css: str, headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{h}</th>" for h in headers)
    body = "".join("<tr>" + "".join(row) + "</tr>" for row in rows)
    return f'<table class="{css}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


RUN_HEADERS = (
    "Ended", "Kind", "Outcome", "Duration", "Rows", "Bytes read", "Dead letters", "Lag (records)",
    "Data age at end", "Schema version",
)  # fmt: skip


def _run_rows(runs: Sequence[RunRecord]) -> str:
    rows = [
        [
            _td(fig.time_text(r.ended_at), ""),
            _td(escape(r.kind), ""),
            _td(_badge(r), ""),
            _td(fig.age_text(r.duration_seconds)),
            _td(fig.count_text(r.rows), "num rows"),
            _td(fig.bytes_text(r.bytes), "num bytes"),
            _td(escape(fig.dead_letter_text(r.dead_letters)), "num dead-letters"),
            _td(fig.count_text(r.lag_records)),
            _td(fig.age_text(r.data_age_seconds)),
            _td(fig.count_text(r.schema_version)),
        ]
        for r in reversed(runs)
    ]
    return _table("runs", RUN_HEADERS, rows)


def _care_rows(runs: Sequence[RunRecord]) -> str:
    cared = fig.care_runs(runs)
    if not cared:
        return "<p>No care run in this window.</p>"
    rows = [
        [
            _td(fig.time_text(r.ended_at), ""),
            _td(fig.count_text(r.files_before)),
            _td(fig.count_text(r.files_after)),
            _td(fig.bytes_text(r.table_bytes_before)),
            _td(fig.bytes_text(r.table_bytes_after)),
        ]
        for r in reversed(cared)
    ]
    return _table("care", ("Ended", "Files before", "Files after", "Size before", "Size after"), rows)


def _schema_rows(runs: Sequence[RunRecord]) -> str:
    versions = fig.schema_versions(runs)
    if not versions:
        return "<p>No schema version recorded in this window.</p>"
    rows = [[_td(str(v.version)), _td(fig.time_text(v.first_seen), ""), _td(str(v.runs))] for v in versions]
    return _table("schemas", ("Version", "First seen", "Runs"), rows)


def _chart(
    runs: Sequence[RunRecord],
    figure: Callable[[RunRecord], float | None],
    text: Callable[[float], str],
    window: tuple[datetime, datetime],
    *,
    title: str,
    sla: float | None = None,
    axis_top: Callable[[float], float] = nice_duration,
) -> str:
    """A heading and the chart of one figure per run (runs without it left out; failed ones red)."""
    points = [
        Point(r.ended_at, value, f"{fig.time_text(r.ended_at)}: {text(value)}", r.outcome == "failed")
        for r in runs
        if (value := figure(r)) is not None
    ]
    label = "" if sla is None else f"SLA {fig.age_text(sla)}"
    chart = line_chart(
        points,
        start=window[0],
        end=window[1],
        title=title,
        value_text=text,
        threshold=sla,
        threshold_label=label,
        axis_top=axis_top,
    )
    return f"<h2>{escape(title)}</h2>{chart}"


def _records(value: float) -> str:
    return fig.count_text(round(value))


def _data_age(run: RunRecord) -> float | None:
    return run.data_age_seconds


def _lag_records(run: RunRecord) -> float | None:
    return None if run.lag_records is None else float(run.lag_records)


def _lag_seconds(run: RunRecord) -> float | None:
    return run.lag_seconds


LAG_TIME_TITLE = "Lag after each run (age of the oldest record not landed)"


def topic_page(
    status: fig.TopicStatus, runs: Sequence[RunRecord], *, base: str, start: datetime, days: float
) -> str:
    """One topic over the window: charts of data age and lag, then its runs, schemas and care."""
    now, sla = status.now, status.sla_seconds
    window = (start, now)
    charts = (
        _chart(runs, _data_age, fig.age_text, window, title="Data age at the end of each run", sla=sla)
        + _chart(
            runs, _lag_records, _records, window, title="Lag after each run (records)", axis_top=nice_ceiling
        )
        + _chart(runs, _lag_seconds, fig.age_text, window, title=LAG_TIME_TITLE, sla=sla)
    )
    summary = (
        f'<p>Data age now <b class="age">{fig.age_text(status.data_age_seconds)}</b> of SLA '
        f"{fig.age_text(sla)}; last run {_badge(status.last)}. DAG <code>{escape(status.dag_id)}</code>.</p>"
    )
    windows = " · ".join(
        f'<a href="?days={d}">{d} d</a>' if d != days else f"<b>{d} d</b>" for d in (1, 3, 7, 30)
    )
    body = (
        f'<p><a href="{escape(base)}/">← all topics</a></p>'
        f"<h1>{escape(status.topic)}</h1>"
        f'<p class="muted">{len(runs)} runs since {fig.time_text(start)} (window: {windows}).</p>'
        + summary
        + charts
        + "<h2>Runs (newest first)</h2>"
        + _run_rows(runs)
        + "<h2>Schema versions</h2>"
        + _schema_rows(runs)
        + "<h2>Table care: files and size before and after</h2>"
        + _care_rows(runs)
    )
    return _page(f"kafkalake freshness: {status.topic}", body)


def not_a_topic_page(dag_id: str, *, base: str) -> str:
    body = (
        f'<p><a href="{escape(base)}/">← all topics</a></p>'
        f"<p>The DAG <code>{escape(dag_id)}</code> is not one topic's ingest DAG, so it has no freshness"
        " figures of its own.</p>"
    )
    return _page("kafkalake freshness", body)


def refused_page(reason: str, *, login: str | None) -> str:
    """A refused request (401, 403): why, and where to log in when that is what is missing."""
    link = f' <a href="{escape(login)}">Log in to Airflow</a>.' if login else ""
    return _page("kafkalake freshness", f'<h1>Freshness</h1><p class="refused">{escape(reason)}.{link}</p>')
