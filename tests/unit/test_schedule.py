"""run_interval: SLA / 3, rounded down to whole minutes, never looser than the SLA allows."""

from __future__ import annotations

from datetime import timedelta

import pytest
from kafkalake.durations import parse_duration
from kafkalake.schedule import MIN_INTERVAL, run_interval


@pytest.mark.parametrize(
    ("sla", "interval"),
    [
        ("15m", "5m"),
        ("1h", "20m"),
        ("6h", "2h"),
        ("1d", "8h"),
        # Uneven thirds are rounded down to a whole minute.
        ("10m", "3m"),  # 3m20s
        ("1h1m", "20m"),  # 20m20s
        ("7m", "2m"),  # 2m20s
        ("8m", "2m"),  # 2m40s: down, not to the nearest minute
        ("3m", "1m"),  # the shortest SLA allowed
        ("3m59s", "1m"),
        ("5m59s", "1m"),  # 1m59.67s
        ("6m", "2m"),
    ],
)
def test_run_interval(sla, interval):
    assert run_interval(parse_duration(sla)) == parse_duration(interval)


@pytest.mark.parametrize(
    "sla",
    [timedelta(minutes=m, seconds=s) for m in range(3, 200, 7) for s in (0, 1, 29, 59)]
    + [timedelta(hours=h, minutes=1) for h in range(1, 50)],
)
def test_interval_is_whole_minutes_and_never_exceeds_a_third_of_the_sla(sla):
    interval = run_interval(sla)
    assert interval.total_seconds() % 60 == 0
    assert interval * 3 <= sla
    # Rounded down, but by less than one minute.
    assert (interval + timedelta(minutes=1)) * 3 > sla
    assert interval >= MIN_INTERVAL


@pytest.mark.parametrize("sla", ["1s", "1m", "2m", "2m59s"])
def test_sla_under_three_minutes_is_rejected_naming_the_minimum(sla):
    with pytest.raises(ValueError) as excinfo:
        run_interval(parse_duration(sla))
    assert "at least 3m" in str(excinfo.value)
