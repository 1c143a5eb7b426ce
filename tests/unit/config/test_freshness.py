"""``schedule: freshness``'s decision (kafkalake.config.freshness.decide), table-driven: the floor,
the heartbeat (only for unknown record times, a watcher that cannot see Kafka or the table, care
due: never for a topic where nothing waits), a file's worth, the SLA budget; empty topics, a
re-created topic, clocks that step back or records stamped in the future; and the catalog's
``schedule`` field."""

from __future__ import annotations

import itertools
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from kafkalake.config.catalog import load_catalog
from kafkalake.config.freshness import DEFAULT_FLOOR, Budget, FreshnessSchedule, Observation, decide
from kafkalake.core.errors import CatalogError

from .catalog_helpers import assert_names_where, write_catalog

NOW = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
S, M = timedelta(seconds=1), timedelta(minutes=1)
#: SLA 30m: heartbeat every 10m; a record may wait 30m - 60s run - 75s margin = 27m45s; a queued
#: run may be landing for 2 x 60s + 75s = 3m15s.
BUDGET = Budget(sla=30 * M, expected_run=60 * S, floor=DEFAULT_FLOOR, file_bytes=1000, margin=75 * S)


def seen(
    high: dict[int, int],
    committed: dict[int, int] | None,
    oldest: datetime | None = None,
    bytes_waiting: int | None = None,
    low: dict[int, int] | None = None,
    landed: datetime | None = NOW,
    queued: dict[int, int] | None = None,
    blind: str | None = None,
    care: bool = False,
) -> Observation:
    """What the watcher saw at NOW; by default the table landed something just now."""
    return Observation(NOW, high, committed, low, oldest, bytes_waiting, landed, queued, blind, care)


#: What the watcher sees while its Kafka connection is backed off.
BLIND = "Kafka (kafka_default: KafkaException)"


CASES = [
    # (id, observation, last run, run?, recheck, words in the reason)
    ("empty topic, never ran: no run", seen({0: 0}, None), None, False, 10 * M, "nothing waits"),
    ("empty topic, ran 2m ago", seen({0: 0}, None), NOW - 2 * M, False, 8 * M, "nothing waits"),
    ("no partitions at all", seen({}, {}), NOW - 2 * M, False, 8 * M, "nothing waits"),
    ("all landed", seen({0: 5, 1: 7}, {0: 5, 1: 7}), NOW - 3 * M, False, 7 * M, "nothing waits"),
    (
        "SLA/3 since the last run, nothing waits: no run",
        seen({0: 5}, {0: 5}),
        NOW - 10 * M,
        False,
        10 * M,
        "nothing",
    ),
    (
        "hours since the last run, nothing waits: no run",
        seen({0: 5}, {0: 5}),
        NOW - 5 * 60 * M,
        False,
        10 * M,
        "nothing",
    ),
    (
        "heartbeat: Kafka cannot be seen",
        seen({}, {0: 5}, blind=BLIND),
        NOW - 10 * M,
        True,
        0 * S,
        "cannot see Kafka",
    ),
    (
        "heartbeat: never ran, Kafka cannot be seen",
        seen({}, None, blind=BLIND),
        None,
        True,
        0 * S,
        "no run known",
    ),
    (
        "Kafka cannot be seen, heartbeat later",
        seen({}, {0: 5}, blind=BLIND),
        NOW - 4 * M,
        False,
        6 * M,
        "cannot see",
    ),
    ("floor beats the blind heartbeat", seen({}, {0: 5}, blind=BLIND), NOW - 30 * S, False, 30 * S, "floor"),
    ("heartbeat: care due", seen({0: 5}, {0: 5}, care=True), NOW - 10 * M, True, 0 * S, "table care is due"),
    (
        "care due, heartbeat later",
        seen({0: 5}, {0: 5}, care=True),
        NOW - 4 * M,
        False,
        6 * M,
        "nothing waits",
    ),
    (
        "heartbeat: lag, timestamps unknown",
        seen({0: 9}, {0: 5}),
        NOW - 10 * M,
        True,
        0 * S,
        "4 records wait, their time unknown",
    ),
    (
        "floor beats a file's worth",
        seen({0: 90}, {0: 0}, bytes_waiting=10**6),
        NOW - 20 * S,
        False,
        40 * S,
        "floor",
    ),
    ("a file's worth", seen({0: 90}, {0: 0}, bytes_waiting=1000), NOW - 2 * M, True, 0 * S, "file's worth"),
    ("first run: no table, records wait", seen({0: 3}, None), NOW - 2 * M, True, 0 * S, "does not exist"),
    (
        "no table, records below low are gone",
        seen({0: 3}, None, low={0: 3}),
        NOW - 2 * M,
        False,
        8 * M,
        "nothing",
    ),
    (
        "young record: look again when due or at heartbeat",
        seen({0: 6}, {0: 5}, NOW - 1 * M),
        NOW - 2 * M,
        False,
        8 * M,
        "oldest",
    ),
    (
        "old record, heartbeat later",
        seen({0: 6}, {0: 5}, NOW - 25 * M),
        NOW - 1 * M,
        False,
        2 * M + 45 * S,
        "oldest",
    ),
    (
        "record at the budget",
        seen({0: 6}, {0: 5}, NOW - 27 * M - 45 * S),
        NOW - 1 * M,
        True,
        0 * S,
        "within the SLA",
    ),
    (
        "record past the SLA",
        seen({0: 6}, {0: 5}, NOW - 2 * 60 * M),
        NOW - 1 * M,
        True,
        0 * S,
        "within the SLA",
    ),
    ("lag, timestamps unknown: heartbeat only", seen({0: 9}, {0: 5}), NOW - 4 * M, False, 6 * M, "unknown"),
    (
        "new partition read from low",
        seen({0: 5, 1: 4}, {0: 5}, low={1: 4}),
        NOW - 4 * M,
        False,
        6 * M,
        "nothing",
    ),
    (
        "new partition with records",
        seen({0: 5, 1: 4}, {0: 5}, NOW - 28 * M),
        NOW - 4 * M,
        True,
        0 * S,
        "SLA",
    ),
    (
        "re-created topic: Kafka below the table",
        seen({0: 2}, {0: 500}, NOW - 60 * M),
        NOW - 4 * M,
        False,
        6 * M,
        "nothing",
    ),
    (
        "clock stepped back behind the last run",
        seen({0: 90}, {0: 0}, bytes_waiting=10**6),
        NOW + 5 * M,
        False,
        60 * S,
        "floor",
    ),
    (
        "in flight: queued, not landed",
        seen({0: 90}, {0: 0}, bytes_waiting=10**6, landed=NOW - 5 * M),
        NOW - 2 * M,
        False,
        75 * S,
        "not landed yet",
    ),
    (
        "in flight: never landed",
        seen({0: 90}, {0: 0}, bytes_waiting=10**6, landed=None),
        NOW - 2 * M,
        False,
        75 * S,
        "not landed",
    ),
    (
        "in flight, a file's worth came since",
        seen({0: 90}, {0: 0}, bytes_waiting=9000, landed=None, queued={0: 80}),
        NOW - 2 * M,
        True,
        0 * S,
        "came after the run queued",
    ),
    (
        "in flight, too little came since",
        seen({0: 90}, {0: 0}, bytes_waiting=9000, landed=None, queued={0: 85}),
        NOW - 2 * M,
        False,
        75 * S,
        "not landed",
    ),
    (
        "in flight for too long",
        seen({0: 90}, {0: 0}, bytes_waiting=10**6, landed=None),
        NOW - 4 * M,
        True,
        0 * S,
        "file's worth",
    ),
    (
        "in flight, heartbeat still due",
        seen({0: 90}, {0: 0}, landed=None),
        NOW - 10 * M,
        True,
        0 * S,
        "at least",
    ),
    (
        "record stamped in the future counts as now",
        seen({0: 6}, {0: 5}, NOW + 60 * M),
        NOW - 2 * M,
        False,
        8 * M,
        "0:00:00 old",
    ),
]


@pytest.mark.parametrize(
    ("case", "observation", "last_run", "run", "recheck", "words"), CASES, ids=[c[0] for c in CASES]
)
def test_decide(case, observation, last_run, run, recheck, words):
    verdict = decide(observation, BUDGET, last_run)
    assert (verdict.run, verdict.recheck) == (run, recheck), verdict.reason
    assert words in verdict.reason


def test_margin_and_expected_run_bring_the_run_forward():
    young = seen({0: 6}, {0: 5}, NOW - 20 * M)
    assert not decide(young, BUDGET, NOW - 2 * M).run
    slow = Budget(sla=30 * M, expected_run=8 * M, margin=2 * M)
    assert decide(young, slow, NOW - 2 * M).run


def test_an_expected_run_longer_than_the_sla_runs_whenever_anything_waits():
    budget = Budget(sla=30 * M, expected_run=40 * M)
    assert budget.wait_allowed == timedelta(0)
    assert decide(seen({0: 6}, {0: 5}, NOW), budget, NOW - 2 * M).run


def test_the_heartbeat_can_be_set_apart_from_the_sla():
    budget = Budget(sla=30 * M, heartbeat=20 * M)
    assert not decide(seen({0: 9}, {0: 5}), budget, NOW - 15 * M).run
    assert decide(seen({0: 9}, {0: 5}), budget, NOW - 20 * M).run


def runs_in_an_hour(observation: Observation) -> list[datetime]:
    """When decide() queues runs over an hour of polls 10 s apart, each run landing at once."""
    runs: list[datetime] = []
    last, t = None, NOW
    while t < NOW + 60 * M:
        # Each run lands at once: the next poll sees the table moved.
        verdict = decide(replace(observation, now=t, landed_at=t), BUDGET, last)
        if verdict.run:
            runs.append(t)
            last = t
        t += 10 * S
    return runs


@pytest.mark.parametrize(
    ("observation", "gap"),
    [
        (seen({0: 10**6}, {0: 0}, bytes_waiting=10**9), DEFAULT_FLOOR),  # a burst: a file's worth waits
        (seen({0: 9}, {0: 5}), 10 * M),  # records of unknown time wait
        (seen({}, {0: 5}, blind=BLIND), 10 * M),  # the broker does not answer
        (seen({0: 5}, {0: 5}, care=True), 10 * M),  # care due (its run would clear it)
    ],
    ids=["burst", "unknown times", "blind", "care due"],
)
def test_never_more_often_than_the_floor_nor_less_than_the_heartbeat(observation, gap):
    runs = runs_in_an_hour(observation)
    assert len(runs) >= 6
    assert all(b - a == gap for a, b in itertools.pairwise(runs)), runs[:5]


@pytest.mark.parametrize(
    "observation",
    [seen({0: 5}, {0: 5}), seen({0: 0}, None), seen({}, {}), seen({0: 2}, {0: 500})],
    ids=["all landed", "empty topic, no table", "no partitions", "Kafka below the table"],
)
def test_a_topic_where_nothing_waits_takes_no_run(observation):
    """The fixed schedule would run it 6 times an hour here; a run landing nothing makes no table fresher."""
    assert runs_in_an_hour(observation) == []


def test_schedule_defaults_to_the_interval(tmp_path, lake_root):
    file = write_catalog(tmp_path, "topics:\n  - {name: orders, freshness_sla: 1h}\n")
    topic = load_catalog(file, lake_root).topic("orders")
    assert (topic.schedule, topic.freshness) == ("interval", None)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("freshness", FreshnessSchedule()),
        ("{mode: freshness, floor: 2m}", FreshnessSchedule(floor=2 * M)),
        ("{mode: freshness, file_bytes: 1024}", FreshnessSchedule(file_bytes=1024)),
    ],
)
def test_schedule_freshness(tmp_path, lake_root, text, expected):
    file = write_catalog(tmp_path, f"topics:\n  - {{name: orders, freshness_sla: 1h, schedule: {text}}}\n")
    topic = load_catalog(file, lake_root).topic("orders")
    assert (topic.schedule, topic.freshness) == ("freshness", expected)


@pytest.mark.parametrize(
    ("text", "field", "words"),
    [
        ("hourly", "schedule", "must be one of interval, freshness"),
        ("{mode: sometimes}", "schedule.mode", "must be one of"),
        ("{mode: freshness, every: 2m}", "schedule.every", "unknown field"),
        ("{mode: freshness, floor: 5s}", "schedule.floor", "from 10s to the SLA's third (20m)"),
        ("{mode: freshness, floor: 21m}", "schedule.floor", "from 10s"),
        ("{mode: freshness, floor: soon}", "schedule.floor", "not a duration"),
        ("{mode: freshness, file_bytes: 0}", "schedule.file_bytes", "whole number"),
        ("{mode: freshness, file_bytes: true}", "schedule.file_bytes", "whole number"),
        ("{mode: interval, floor: 2m}", "schedule", "mode freshness only"),
    ],
)
def test_bad_schedules_name_file_topic_and_field(tmp_path, lake_root, text, field, words):
    file = write_catalog(tmp_path, f"topics:\n  - {{name: orders, freshness_sla: 1h, schedule: {text}}}\n")
    with pytest.raises(CatalogError) as caught:
        load_catalog(file, lake_root, strict=True)
    assert_names_where(caught.value, file, "orders", field)
    assert words in str(caught.value)


def test_a_family_keeps_the_interval(tmp_path, lake_root):
    file = write_catalog(
        tmp_path,
        "topics:\n  - {topics: [a, b], table: ab, freshness_sla: 1h, parsed: false, schedule: freshness}\n",
    )
    with pytest.raises(CatalogError) as caught:
        load_catalog(file, lake_root, strict=True)
    assert_names_where(caught.value, file, "ab", "schedule")
