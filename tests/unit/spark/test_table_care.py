"""Pure decisions of table care: when maintenance is due, layout columns, full-refresh and guard."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from kafkalake.cli.full_refresh import plan
from kafkalake.config.maintenance import MaintenanceConfig
from kafkalake.config.tables import Table, topic_tables
from kafkalake.config.topic import TopicConfig
from kafkalake.core.errors import NonRetryableError
from kafkalake.lake.care_due import TableState, decide, is_due
from kafkalake.lake.start_plan import TableFacts, refusal
from kafkalake.spark.table_care import (
    LayoutError,
    holds_run_lock,
    layout_plan,
    retain_hours,
    vacuum_retention,
)

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
DAY = timedelta(days=1)


def topic(**fields) -> TopicConfig:
    return TopicConfig(
        name="orders", freshness_sla=timedelta(hours=6), table="orders", path="/lake/o", **fields
    )


@pytest.mark.parametrize(
    ("last", "every", "due"),
    [
        (None, DAY, True),
        (NOW - DAY, DAY, True),
        (NOW - DAY + timedelta(seconds=1), DAY, False),
        (NOW - timedelta(days=30), None, False),
        (None, None, False),
        (NOW + timedelta(minutes=5), DAY, False),  # a clock ahead of ours: not due
    ],
)
def test_is_due(last, every, due):
    assert is_due(last, NOW, every) is due


def state(**fields) -> TableState:
    return TableState(
        **{
            "created": NOW - timedelta(days=3),
            "last_optimize": None,
            "last_vacuum": None,
            "properties": {},
            **fields,
        }
    )


def test_a_new_table_is_not_due_until_a_cadence_after_creation():
    due = decide(state(created=NOW - timedelta(hours=2)), MaintenanceConfig(), NOW)
    assert not due.run
    assert "OPTIMIZE not due" in due.reason and "VACUUM not due" in due.reason


def test_a_table_never_optimized_is_due_a_cadence_after_creation():
    due = decide(state(), MaintenanceConfig(), NOW)
    assert due.optimize and due.vacuum and due.run


def test_recent_optimize_and_vacuum_mean_nothing_due():
    recent = NOW - timedelta(hours=1)
    due = decide(state(last_optimize=recent, last_vacuum=recent), MaintenanceConfig(), NOW)
    assert not due.run


def test_optimize_never_still_vacuums_daily():
    config = MaintenanceConfig(optimize_every=None)
    due = decide(state(last_vacuum=NOW - timedelta(hours=25)), config, NOW)
    assert not due.optimize and due.vacuum


def test_properties_that_differ_make_maintenance_due():
    recent = NOW - timedelta(hours=1)
    config = MaintenanceConfig(properties=(("a", "1"), ("b", "2")))
    due = decide(
        state(last_optimize=recent, last_vacuum=recent, properties={"a": "1", "b": "3"}), config, NOW
    )
    assert due.properties == ("b",)
    assert due.run and not due.optimize
    in_step = decide(
        state(last_optimize=recent, last_vacuum=recent, properties={"a": "1", "b": "2"}), config, NOW
    )
    assert not in_step.run


def test_maintenance_covers_every_table_of_the_topic():
    assert topic_tables(topic())[0] == Table("bronze.orders", "/lake/o", "bronze")
    assert [t.name for t in topic_tables(topic())] == [
        "bronze.orders",
        "silver.orders",
        "silver.orders_dead_letter",
    ]


def test_layout_plan():
    tables = {"bronze.o": ["key", "offset"], "silver.o": ["customer_id", "ts"]}
    assert layout_plan(tables, []) == {"bronze.o": (), "silver.o": ()}
    assert layout_plan(tables, ["customer_id"]) == {"bronze.o": (), "silver.o": ("customer_id",)}
    with pytest.raises(LayoutError, match=r"table silver\.o has no column 'region'") as raised:
        layout_plan(tables, ["customer_id", "region"])
    assert isinstance(raised.value, NonRetryableError)
    with pytest.raises(LayoutError, match=r"no table has column 'region'.*bronze\.o: key, offset"):
        layout_plan(tables, ["region"])


def test_retain_hours_rounds_up():
    assert retain_hours(timedelta(days=7)) == 168
    assert retain_hours(timedelta(0)) == 0
    assert retain_hours(timedelta(minutes=90)) == 2


# ---------------------------------------------------------------------------------------------
# full refresh


def test_full_refresh_allowed_when_kafka_holds_everything_from_zero():
    decision = plan(topic(), {0: (0, 100), 1: (0, 50)})
    assert decision.allowed and decision.lost == {}
    assert "150 records" in decision.reason


def test_full_refresh_refused_names_partitions_and_lost_records():
    decision = plan(topic(), {0: (150, 200), 1: (0, 200), 2: (10, 20)})
    assert not decision.allowed
    assert decision.lost == {0: 150, 2: 10}
    assert "partition 0: offsets 0..149 (150 records)" in decision.reason
    assert "partition 2: offsets 0..9 (10 records)" in decision.reason
    assert "lose 160 records" in decision.reason


def test_full_refresh_refused_for_a_topic_starting_from_latest():
    decision = plan(topic(starting_offsets="latest"), {0: (0, 10)})
    assert not decision.allowed and "'latest'" in decision.reason


# ---------------------------------------------------------------------------------------------
# the start guard


@pytest.mark.parametrize(
    ("table", "landed", "says"),
    [
        (TableFacts(files=3, rows=300), None, "checkpoint at /lake/o/_kafkalake/checkpoint is missing"),
        (None, 300, "says 300 records were landed, but the table at /lake/o is gone"),
        (TableFacts(files=0, rows=0), 300, "holds no rows"),
    ],
)
def test_guard_refuses(table, landed, says):
    reason = refusal(topic(), table, landed)
    assert reason is not None and says in reason


@pytest.mark.parametrize(
    ("table", "landed"),
    [
        (None, None),  # very first run
        (TableFacts(files=0, rows=0), None),  # table created up front, stream not started yet
        (TableFacts(files=0, rows=0), 0),  # empty topic so far
        (None, 0),  # checkpoint of an empty topic, table not there: nothing to lose
        (TableFacts(files=3, rows=300), 300),
        (TableFacts(files=3, rows=250), 300),  # offsets skipped with fail_on_data_loss: false
    ],
)
def test_guard_allows(table, landed):
    assert refusal(topic(), table, landed) is None


def test_table_care_holds_the_run_lock_on_an_object_store_and_for_a_vacuum_below_the_guard():
    # VACUUM RETAIN 0 HOURS beside a running ingest deletes the files it has not committed yet.
    below = MaintenanceConfig(vacuum_retain=timedelta(hours=1), allow_vacuum_retain_below_7d=True)
    assert holds_run_lock(topic(maintenance=below))
    assert holds_run_lock(topic(maintenance=replace(below, vacuum_retain=timedelta(0))))
    assert holds_run_lock(replace(topic(), path="s3a://bucket/o"))
    assert not holds_run_lock(topic())
    assert not holds_run_lock(topic(maintenance=MaintenanceConfig(vacuum_retain=timedelta(days=30))))


def test_vacuum_retains_the_longer_of_the_catalog_and_the_table_retention():
    month = {"delta.deletedFileRetentionDuration": "interval 30 days"}
    assert vacuum_retention(MaintenanceConfig(), {}) == timedelta(days=7)
    assert vacuum_retention(MaintenanceConfig(vacuum_retain=timedelta(days=30)), {}) == timedelta(days=30)
    assert vacuum_retention(MaintenanceConfig(), month) == timedelta(days=30)
    below = MaintenanceConfig(vacuum_retain=timedelta(hours=1), allow_vacuum_retain_below_7d=True)
    assert vacuum_retention(below, {"delta.deletedFileRetentionDuration": "interval 2 hours"}) == timedelta(
        hours=2
    )
    assert vacuum_retention(below, {"delta.deletedFileRetentionDuration": "calendarinterval"}) == timedelta(
        hours=1
    )
