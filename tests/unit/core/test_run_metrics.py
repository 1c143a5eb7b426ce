from __future__ import annotations

import json
import re
from dataclasses import replace
from datetime import UTC, datetime

import pytest
from airflow.sdk._shared.observability.metrics.validators import (
    stat_name_default_handler,
    stat_name_otel_handler,
)

from kafkalake.core.run_metrics import (
    MAX_TOPIC_SEGMENT,
    JobMetrics,
    RunMetrics,
    freshness_seconds,
    idle_metrics,
    ingest_metrics,
    lag_text,
    metric_name,
    metric_points,
    partition_lag,
    topic_segment,
)
from kafkalake.spark.topic_parser import RunStats

NOW = datetime(2025, 6, 1, 12, 0, 0, tzinfo=UTC)
NOW_MS = int(NOW.timestamp() * 1000)

JOB = JobMetrics(
    batches=3,
    rows=10_000,
    bytes=1_572_864,
    parsed_rows=9_992,
    dead_letters={"invalid_utf8": 2, "malformed_json": 6},
    newest_timestamp_ms=NOW_MS - 90_500,
    startup_seconds=20.04,
    processing_seconds=25.13,
)


# --- lag -----------------------------------------------------------------------------------------


def test_lag_is_end_minus_committed_per_partition():
    assert partition_lag({0: 100, 1: 50, 2: 7}, {0: 60, 1: 50, 2: 0}, {0: 0, 1: 0, 2: 0}) == {
        0: 40,
        1: 0,
        2: 7,
    }


def test_first_run_lag_depends_on_where_the_topic_starts():
    end, earliest = {0: 100, 1: 50}, {0: 10, 1: 0}
    assert partition_lag(end, None, earliest, "earliest") == {0: 90, 1: 50}
    assert partition_lag(end, None, earliest, "latest") == {0: 0, 1: 0}


def test_records_kafka_already_deleted_are_not_waiting():
    # Committed 5, but Kafka starts at 30: only 30..99 can still be landed.
    assert partition_lag({0: 100}, {0: 5}, {0: 30}) == {0: 70}


def test_a_partition_new_to_the_checkpoint_is_read_from_its_start():
    assert partition_lag({0: 10, 1: 8}, {0: 10}, {0: 0, 1: 2}) == {0: 0, 1: 6}


def test_end_below_committed_is_no_negative_lag():
    assert partition_lag({0: 3}, {0: 10}, {0: 0}) == {0: 0}


# --- freshness -----------------------------------------------------------------------------------


def test_freshness_is_the_age_of_the_newest_timestamp():
    assert freshness_seconds(NOW_MS - 90_500, NOW) == pytest.approx(90.5)
    assert freshness_seconds(None, NOW) is None
    # A producer clock ahead of ours is not negative age.
    assert freshness_seconds(NOW_MS + 5_000, NOW) == 0.0


def test_ingest_metrics_take_the_newest_timestamp_from_the_job_or_else_the_table():
    landed = ingest_metrics(
        "orders",
        JOB,
        lag_before={0: 10_000},
        lag_after={0: 0},
        table_newest_ms=None,
        duration_seconds=50,
        now=NOW,
    )
    assert landed.newest_timestamp_ms == NOW_MS - 90_500
    assert landed.freshness_seconds == pytest.approx(90.5)
    assert (landed.rows, landed.bytes, landed.batches, landed.dead_letter_count) == (10_000, 1_572_864, 3, 8)

    nothing = JobMetrics(0, 0, 0, 0, {}, None, 10.0, 1.0)
    empty = ingest_metrics(
        "orders",
        nothing,
        lag_before={},
        lag_after={},
        table_newest_ms=NOW_MS - 3_600_000,
        duration_seconds=20,
        now=NOW,
    )
    assert empty.freshness_seconds == pytest.approx(3600)
    never = ingest_metrics(
        "orders", nothing, lag_before={}, lag_after={}, table_newest_ms=None, duration_seconds=20, now=NOW
    )
    assert never.newest_timestamp_ms is None and never.freshness_seconds is None


def test_idle_metrics_land_nothing_and_report_the_age():
    idle = idle_metrics("orders", {0: 0, 1: 0}, NOW_MS - 7_200_000, NOW)
    assert (idle.ingested, idle.rows, idle.dead_letter_count) == (False, 0, 0)
    assert idle.lag_before == idle.lag_after == {0: 0, 1: 0}
    assert idle.freshness_seconds == pytest.approx(7200)
    assert idle.duration_seconds is None


# --- the job's file ------------------------------------------------------------------------------


def test_job_metrics_round_trip_through_json():
    assert JobMetrics.from_json(JOB.to_json()) == JOB
    with_follow_ups = replace(JOB, follow_ups={"refresh_schema": "schema unchanged"})
    assert JobMetrics.from_json(with_follow_ups.to_json()) == with_follow_ups


def test_a_metrics_file_of_an_older_job_has_no_follow_ups():
    data = json.loads(JOB.to_json())
    del data["follow_ups"]
    assert JobMetrics.from_json(json.dumps(data)).follow_ups == {}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"rows": "many"}, "'rows'"),
        ({"batches": True}, "'batches'"),
        ({"dead_letters": [1]}, "'dead_letters'"),
        ({"startup_seconds": None}, "'startup_seconds'"),
        ({"follow_ups": ["refresh_schema"]}, "'follow_ups'"),
        ({"follow_ups": {"refresh_schema": 1}}, "'follow_ups'"),
    ],
)
def test_a_bad_metrics_file_names_the_field(change, field):
    data = {**json.loads(JOB.to_json()), **change}
    with pytest.raises(ValueError, match=rf"m\.json: field {field}"):
        JobMetrics.from_json(json.dumps(data), source="m.json")


def test_a_metrics_file_that_is_not_json_is_an_error():
    with pytest.raises(ValueError, match=r"m\.json: not JSON"):
        JobMetrics.from_json("{", source="m.json")


def test_run_stats_sum_what_landed_and_keep_the_newest_timestamp():
    stats = RunStats()
    stats.add_landed({"rows": 3, "bytes": 30, "newest_timestamp_ms": 2_000})
    stats.add_landed({"rows": 0, "bytes": None, "newest_timestamp_ms": None})  # an empty batch
    stats.add_landed({"rows": 2, "bytes": 12, "newest_timestamp_ms": 1_000})
    stats.batches = 3
    stats.dead_letters["oversize"] += 1
    job = stats.job_metrics(startup_seconds=1.5, processing_seconds=2.5)
    assert job == JobMetrics(3, 5, 42, 0, {"oversize": 1}, 2_000, 1.5, 2.5)


# --- text ----------------------------------------------------------------------------------------


def test_summary_of_a_run_that_landed():
    metrics = ingest_metrics(
        "orders",
        JOB,
        lag_before={0: 4_000, 1: 6_000, 2: 0},
        lag_after={0: 0, 1: 0, 2: 0},
        table_newest_ms=None,
        duration_seconds=61.27,
        now=NOW,
    )
    assert metrics.summary().splitlines() == [
        "run metrics of topic orders",
        "  landed:    10,000 rows (1.5 MiB of keys and values) in 3 micro-batches, 9,992 parsed, "
        "8 dead letters (invalid_utf8=2, malformed_json=6)",
        "  lag:       10,000 → 0 records (partition 0: 4,000 → 0, 1: 6,000 → 0)",
        "  freshness: newest Kafka timestamp landed 2025-06-01T11:58:29.500+00:00, 1m30s old",
        "  duration:  61.3 s of spark-submit (job start-up 20.0 s, processing 25.1 s)",
    ]


def test_summary_of_an_idle_run():
    assert idle_metrics("orders", {0: 0}, None, NOW).summary().splitlines() == [
        "run metrics of topic orders",
        "  landed:    nothing: no new offsets in Kafka, no Spark job (idle run)",
        "  lag:       0 → 0 records",
        "  freshness: no record landed yet",
    ]


def test_lag_text_lists_a_few_lagging_partitions_and_counts_the_rest():
    before = {p: 10 for p in range(20)}
    text = lag_text(before, {p: 0 for p in range(20)})
    assert text.startswith("200 → 0 records (partition 0: 10 → 0, 1: 10 → 0,")
    assert text.endswith("11: 10 → 0, and 8 more)")
    assert lag_text(None, {0: 5}) == "unknown → 5 records (partition 0: unknown → 5)"


# --- metrics -------------------------------------------------------------------------------------


def test_metric_points_of_a_run():
    metrics = ingest_metrics(
        "orders",
        JOB,
        lag_before={0: 10_000, 1: 0},
        lag_after={0: 2, 1: 0},
        table_newest_ms=None,
        duration_seconds=61.0,
        now=NOW,
    )
    points = {(p.kind, p.name): (p.value, p.tags) for p in metric_points(metrics)}
    tags = {"topic": "orders"}
    assert points == {
        ("gauge", "kafkalake.orders.rows"): (10_000, tags),
        ("gauge", "kafkalake.orders.bytes"): (1_572_864, tags),
        ("gauge", "kafkalake.orders.batches"): (3, tags),
        ("gauge", "kafkalake.orders.dead_letters"): (8, tags),
        ("gauge", "kafkalake.orders.lost_offsets"): (0, tags),
        ("gauge", "kafkalake.orders.lag"): (2, tags),
        ("gauge", "kafkalake.orders.lag_before"): (10_000, tags),
        ("gauge", "kafkalake.orders.partition_lag.0"): (2, {**tags, "partition": "0"}),
        ("gauge", "kafkalake.orders.partition_lag.1"): (0, {**tags, "partition": "1"}),
        ("gauge", "kafkalake.orders.freshness_seconds"): (pytest.approx(90.5), tags),
        ("timing", "kafkalake.orders.duration"): (61.0, tags),
        ("timing", "kafkalake.orders.startup"): (20.04, tags),
        ("timing", "kafkalake.orders.processing"): (25.13, tags),
    }


def test_unknown_values_are_left_out_never_sent_as_zero():
    metrics = RunMetrics(topic="orders", ingested=True, lag_before=None, lag_after=None)
    names = {p.name for p in metric_points(metrics)}
    assert names == {
        f"kafkalake.orders.{m}" for m in ("rows", "bytes", "batches", "dead_letters", "lost_offsets")
    }


def test_idle_runs_send_lag_zero_and_the_age():
    points = {p.name: p.value for p in metric_points(idle_metrics("orders", {0: 0}, NOW_MS - 60_000, NOW))}
    assert points["kafkalake.orders.lag"] == 0
    assert points["kafkalake.orders.rows"] == 0
    assert points["kafkalake.orders.freshness_seconds"] == pytest.approx(60)
    assert "kafkalake.orders.duration" not in points


@pytest.mark.parametrize("topic", ["orders", "orders.v2", "a-b_c", "x" * 249, "é-topic"])
def test_metric_names_pass_airflows_statsd_and_otel_rules(topic):
    for point in metric_points(idle_metrics(topic, {999: 0}, NOW_MS, NOW)):
        assert stat_name_default_handler(point.name) == point.name
        stat_name_otel_handler("airflow", point.name)
        assert point.name.count(".") in (2, 3)  # kafkalake.<topic>.<metric>[.<partition>]


def test_a_dotted_topic_keeps_one_level_and_a_long_one_stays_unique():
    assert metric_name("orders.v2", "rows") == "kafkalake.orders__v2.rows"
    long_a, long_b = metric_name("a" * 200 + "1", "rows"), metric_name("a" * 200 + "2", "rows")
    assert long_a != long_b
    assert len(long_a.split(".")[1]) == MAX_TOPIC_SEGMENT


def test_no_two_topics_share_a_metric_series():
    # Each group would have shared one series: '.' is '__' in a metric name.
    groups = [["a.b", "a__b"], ["a._b", "a_.b", "a___b"], ["a..b", "a____b", "a_._b"], ["é", "_"]]
    for group in groups:
        segments = [metric_name(t, "rows") for t in group]
        assert len(set(segments)) == len(group), segments
    # Names that cannot read as another's keep the plain form, the one dashboards already use.
    assert [topic_segment(t) for t in ("a.b", "a_b", "a..b", "a-b.c_d")] == [
        "a__b",
        "a_b",
        "a____b",
        "a-b__c_d",
    ]
    assert re.fullmatch(r"a__b-[0-9a-f]{8}", topic_segment("a__b"))


def test_xcom_value_is_small_json_with_string_partitions():
    metrics = ingest_metrics(
        "orders", JOB, lag_before={0: 5}, lag_after={0: 0}, table_newest_ms=None, duration_seconds=1, now=NOW
    )
    value = json.loads(json.dumps(metrics.as_xcom()))
    assert value["rows"] == 10_000
    assert value["dead_letter_count"] == 8
    assert value["lag_before"] == {"0": 5} and value["lag"] == 0
    assert value["newest_timestamp"] == "2025-06-01T11:58:29.500+00:00"
    assert len(json.dumps(value)) < 1_000


def test_lost_offsets_travel_from_the_job_to_the_run_and_its_log():
    job = JobMetrics.from_json(json.dumps({**json.loads(JOB.to_json()), "lost_offsets": 50}))
    assert job.lost_offsets == 50
    assert JobMetrics.from_json(JOB.to_json()).lost_offsets == 0
    old = json.loads(JOB.to_json())
    del old["lost_offsets"]  # a job from before the field: nothing lost is what it could report
    assert JobMetrics.from_json(json.dumps(old)).lost_offsets == 0
    with pytest.raises(ValueError, match="lost_offsets"):
        JobMetrics.from_json(json.dumps({**old, "lost_offsets": "many"}))
    run = ingest_metrics(
        "orders", job, lag_before=None, lag_after=None, table_newest_ms=None, duration_seconds=1.0, now=NOW
    )
    assert run.lost_offsets == 50 and run.as_xcom()["lost_offsets"] == 50
    assert "  LOST:      50 offsets Kafka deleted before they were read" in run.summary()
    assert {p.name: p.value for p in metric_points(run)}["kafkalake.orders.lost_offsets"] == 50
    assert (
        "LOST"
        not in ingest_metrics(
            "orders",
            JOB,
            lag_before=None,
            lag_after=None,
            table_newest_ms=None,
            duration_seconds=1.0,
            now=NOW,
        ).summary()
    )
