"""run_interval: SLA / 3, rounded down to whole minutes, never looser than the SLA allows."""

from __future__ import annotations

from datetime import timedelta

import pytest

from kafkalake.config.schedule import MIN_INTERVAL, SlaPlan, run_interval, sla_plan
from kafkalake.core.durations import parse_duration

#: Even and uneven SLAs from 3m to about 2 days.
MANY_SLAS = [timedelta(minutes=m, seconds=s) for m in range(3, 200, 7) for s in (0, 1, 29, 59)] + [
    timedelta(hours=h, minutes=1) for h in range(1, 50)
]


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


@pytest.mark.parametrize("sla", MANY_SLAS)
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


# ---------------------------------------------------------------------------------------------
# sla_plan: interval, worst-case age and run deadline, written out by hand


@pytest.mark.parametrize(
    ("sla", "interval", "worst_case_age", "deadline"),
    [
        ("15m", "5m", "10m", "10m"),
        ("1h", "20m", "40m", "40m"),
        ("6h", "2h", "4h", "4h"),
        ("1d", "8h", "16h", "16h"),
        # Uneven thirds: the interval rounds down, the deadline keeps the SLA's odd seconds.
        ("7m", "2m", "4m", "5m"),
        ("10m", "3m", "6m", "7m"),
        ("3m", "1m", "2m", "2m"),
        ("3m59s", "1m", "2m", "2m59s"),
        ("1h1m", "20m", "40m", "41m"),
        ("25h", "8h20m", "16h40m", "16h40m"),
    ],
)
def test_sla_plan(sla, interval, worst_case_age, deadline):
    plan = sla_plan(parse_duration(sla))
    assert plan == SlaPlan(
        sla=parse_duration(sla),
        run_interval=parse_duration(interval),
        worst_case_age=parse_duration(worst_case_age),
        deadline=parse_duration(deadline),
    )


@pytest.mark.parametrize("sla", MANY_SLAS)
def test_sla_plan_invariants(sla):
    plan = sla_plan(sla)
    assert plan.run_interval == run_interval(sla)
    # A run that has not finished by its deadline leaves data exactly SLA old.
    assert plan.deadline + plan.run_interval == sla
    # Healthy pipeline: within the SLA, with room for one failed run (3 intervals) to spare.
    assert plan.worst_case_age < sla
    assert plan.worst_case_age + plan.run_interval <= sla
    # A run gets at least two intervals before it is late: the deadline never fires on a run
    # that finishes within its own interval.
    assert plan.deadline >= 2 * plan.run_interval


@pytest.mark.parametrize("sla", ["1s", "2m59s"])
def test_sla_plan_rejects_what_run_interval_rejects(sla):
    with pytest.raises(ValueError, match="at least 3m"):
        sla_plan(parse_duration(sla))
