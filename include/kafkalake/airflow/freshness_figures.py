"""The figures the freshness view shows, computed from the run history: pure, no I/O.

A topic's *data age now* is the age of the newest Kafka timestamp its table held after the last run
that measured one; its *risk* is that age over the freshness SLA (1.0 = at the SLA). The fleet page
sorts by risk, highest first; a topic with no recorded data age sorts first of all, because nothing
says its table is fresh.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING
from urllib.parse import quote

if TYPE_CHECKING:
    # Only a type here: the DAG factory imports this module (for the links), and DAG parsing
    # stays free of deltalake and pyarrow.
    from kafkalake.lake.run_history import RunRecord

#: Where the api-server serves the view (kafkalake.airflow.freshness_view).
URL_PREFIX = "/kafkalake/freshness"
#: Risk at or above which a topic is shown as late, and as at risk (a bar's colour).
LATE, WARN = 1.0, 0.7


def topic_href(dag_id: str, base: str = URL_PREFIX) -> str:
    """The topic page of the DAG ``dag_id``."""
    return f"{base}/dags/{quote(dag_id, safe='')}"


@dataclass(frozen=True)
class TopicStatus:
    """One fleet-page row: a catalog entry and what its last runs say."""

    topic: str
    dag_id: str
    sla_seconds: float
    last: RunRecord | None
    #: The newest run that measured the table's newest timestamp (the last run may be a care run).
    measured: RunRecord | None
    now: datetime

    @property
    def data_age_seconds(self) -> float | None:
        if self.measured is None or self.measured.newest_timestamp is None:
            return None
        return max(0.0, (self.now - self.measured.newest_timestamp).total_seconds())

    @property
    def risk(self) -> float:
        age = self.data_age_seconds
        if age is None or self.sla_seconds <= 0:
            return math.inf
        return age / self.sla_seconds

    @property
    def level(self) -> str:
        """``late``, ``warn``, ``ok`` or ``unknown``: the row's colour."""
        if self.data_age_seconds is None:
            return "unknown"
        if self.risk >= LATE:
            return "late"
        return "warn" if self.risk >= WARN else "ok"


def status(
    topic: str, dag_id: str, sla_seconds: float, runs: Sequence[RunRecord], now: datetime
) -> TopicStatus:
    """The status of one topic from its runs, oldest first (run_history.read's order)."""
    measured = next((r for r in reversed(runs) if r.newest_timestamp is not None), None)
    return TopicStatus(
        topic=topic,
        dag_id=dag_id,
        sla_seconds=sla_seconds,
        last=runs[-1] if runs else None,
        measured=measured,
        now=now,
    )


def by_risk(statuses: Iterable[TopicStatus]) -> list[TopicStatus]:
    """Highest risk first; unknown age first of all; ties by topic name, for a stable page."""
    return sorted(statuses, key=lambda s: (-s.risk, s.topic))


def bar_percent(risk: float) -> float:
    """The filled share of a bar that ends at twice the SLA (the SLA mark sits in its middle)."""
    if math.isinf(risk) or math.isnan(risk):
        return 0.0
    return round(min(max(risk, 0.0), 2.0) * 50.0, 1)


def age_text(seconds: float | None) -> str:
    """``42s``, ``3m05s``, ``2h10m``, ``3d4h``: two units at most; ``-`` when unknown."""
    if seconds is None or math.isnan(seconds):
        return "-"
    whole = round(seconds)
    if whole < 60:
        return f"{whole}s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours}h"


def count_text(value: int | None) -> str:
    """Thousands separated, ``-`` when unknown."""
    return "-" if value is None else f"{value:,}"


def bytes_text(value: int | None) -> str:
    """Binary units, one decimal from KiB up: ``512 B``, ``1.5 KiB``, ``3.2 GiB``."""
    if value is None:
        return "-"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def time_text(moment: datetime | None) -> str:
    return "-" if moment is None else moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def dead_letter_text(dead_letters: dict[str, int]) -> str:
    """``3 (bad_json 2, too_large 1)``, reasons by count; ``0`` when none."""
    total = sum(dead_letters.values())
    if not total:
        return "0"
    reasons = sorted(dead_letters.items(), key=lambda item: (-item[1], item[0]))
    return f"{total:,} (" + ", ".join(f"{reason} {count:,}" for reason, count in reasons if count) + ")"


@dataclass(frozen=True)
class SchemaVersionSeen:
    version: int
    first_seen: datetime
    runs: int


def schema_versions(runs: Iterable[RunRecord]) -> list[SchemaVersionSeen]:
    """Each schema version the runs recorded, with the first run that saw it, oldest first."""
    seen: dict[int, SchemaVersionSeen] = {}
    for run in runs:
        if run.schema_version is None:
            continue
        known = seen.get(run.schema_version)
        if known is None:
            seen[run.schema_version] = SchemaVersionSeen(run.schema_version, run.ended_at, 1)
        else:
            first = min(known.first_seen, run.ended_at)
            seen[run.schema_version] = SchemaVersionSeen(known.version, first, known.runs + 1)
    return sorted(seen.values(), key=lambda s: (s.first_seen, s.version))


def care_runs(runs: Iterable[RunRecord]) -> list[RunRecord]:
    """The runs that measured the table's files before and after (care), oldest first."""
    return [r for r in runs if r.files_before is not None or r.files_after is not None]


def window_start(now: datetime, days: float) -> datetime:
    return now - timedelta(days=days)
