"""A ``schedule: freshness`` topic's DAG is scheduled on its watcher's asset (the fixed interval
otherwise); what the trigger stores in the metadata DB is the connection's id, never its settings;
it round-trips through Airflow's serialisation; its poll and budget follow the SLA; a data age over
the SLA alerts once per table position."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from airflow.sdk import Asset
from airflow.serialization.serialized_objects import DagSerialization

from kafkalake.airflow.dag_factory import dag_for, schedule_of
from kafkalake.airflow.freshness_trigger import CLASSPATH, FreshnessTrigger, expected_run_time, poll_interval
from kafkalake.config.catalog import load_catalog
from kafkalake.config.freshness import Observation

CATALOG = """\
topics:
  - name: fresh-a
    freshness_sla: 30m
    kafka_conn_id: kafka_secured
    schedule: {mode: freshness, floor: 2m, file_bytes: 4096}
  - name: plain
    freshness_sla: 30m
"""


def catalog(tmp_path):
    file = tmp_path / "topics.yaml"
    file.write_text(CATALOG)
    return load_catalog(file, tmp_path / "lake", strict=True)


def test_a_freshness_topic_is_scheduled_on_its_watcher_s_asset(tmp_path):
    loaded = catalog(tmp_path)
    fresh, plain = loaded.topic("fresh-a"), loaded.topic("plain")
    assert schedule_of(plain) == timedelta(minutes=10)
    [asset] = schedule_of(fresh)
    assert isinstance(asset, Asset) and asset.name == "ingest_fresh_a.freshness"
    [watcher] = asset.watchers
    trigger = watcher.trigger
    assert isinstance(trigger, FreshnessTrigger)
    assert (trigger.topic, trigger.kafka_conn_id, trigger.file_bytes) == ("fresh-a", "kafka_secured", 4096)
    assert (trigger.sla, trigger.floor_seconds) == (timedelta(minutes=30), 120)

    dag = dag_for(fresh, loaded, tmp_path / "lake")
    assert "schedule: freshness" in dag.doc_md
    stored = json.dumps(DagSerialization.to_dict(dag))
    assert CLASSPATH in stored and "kafka_secured" in stored
    # Only the connection's id: the settings are looked up in the triggerer.
    assert "bootstrap" not in stored and "password" not in stored


def test_the_trigger_round_trips_through_its_kwargs(tmp_path):
    trigger = schedule_of(catalog(tmp_path).topic("fresh-a"))[0].watchers[0].trigger
    classpath, kwargs = trigger.serialize()
    assert classpath == CLASSPATH
    again = FreshnessTrigger(**kwargs)
    assert again.serialize() == (classpath, kwargs)


def test_poll_and_budget_follow_the_sla(tmp_path):
    assert poll_interval(timedelta(minutes=3)) == timedelta(seconds=10)
    assert poll_interval(timedelta(minutes=10)) == timedelta(seconds=30)
    assert poll_interval(timedelta(hours=6)) == timedelta(seconds=60)
    trigger = schedule_of(catalog(tmp_path).topic("fresh-a"))[0].watchers[0].trigger
    budget = trigger.budget()
    assert budget.expected_run == expected_run_time(trigger.table_path) == timedelta(seconds=60)
    assert budget.margin == timedelta(seconds=60 + 15)
    assert budget.every == timedelta(minutes=10)


def test_a_data_age_over_the_sla_alerts_once_per_table_position(tmp_path):
    trigger = schedule_of(catalog(tmp_path).topic("fresh-a"))[0].watchers[0].trigger
    trigger.webhook_conn_id = "ops"
    posted: list[tuple[str, dict]] = []

    async def post(conn_id: str, body: dict) -> int:
        posted.append((conn_id, body))
        return 204

    now = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)

    def seen(age: timedelta, committed: dict[int, int]) -> Observation:
        return Observation(now, {0: 9}, committed, oldest_unlanded=now - age)

    async def alerts() -> list[str | None]:
        return [
            await trigger._report_late(seen(timedelta(minutes=29), {0: 3}), post),  # within the SLA
            await trigger._report_late(seen(timedelta(minutes=31), {0: 3}), post),
            await trigger._report_late(seen(timedelta(minutes=40), {0: 3}), post),  # same position
            await trigger._report_late(seen(timedelta(minutes=35), {0: 5}), post),  # it moved, still late
        ]

    said = asyncio.run(alerts())
    assert [s is not None for s in said] == [False, True, False, True]
    assert "data age SLA miss: Kafka topic fresh-a" in said[1] and "31m ago" in said[1]
    assert [(c, b["event"], b["data_age_seconds"]) for c, b in posted] == [
        ("ops", "kafkalake.data_age_miss", 1860),
        ("ops", "kafkalake.data_age_miss", 2100),
    ]


def test_the_expected_run_time_is_learned_from_the_topics_run_history(tmp_path):
    from datetime import UTC, datetime

    from kafkalake.config.topic import history_path
    from kafkalake.lake import run_history

    trigger = schedule_of(catalog(tmp_path).topic("fresh-a"))[0].watchers[0].trigger
    assert expected_run_time(trigger.table_path) == timedelta(seconds=60)  # no history yet
    started = datetime.now(UTC) - timedelta(hours=1)
    landed = run_history.RunRecord(
        topic="fresh-a",
        dag_id="ingest_fresh_a",
        run_id="r1",
        task_id="ingest",
        try_number=1,
        kind="ingest",
        outcome="success",
        failure_kind=None,
        started_at=started,
        ended_at=started + timedelta(seconds=150),
        sla_seconds=180.0,
        jvm_count=1,
    )
    run_history.append(history_path(trigger.table_path), landed)
    assert expected_run_time(trigger.table_path) == timedelta(seconds=150)
    # A history that cannot be read: the default, and the watcher goes on.
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "_kafkalake").write_text("not a folder")
    assert expected_run_time(str(tmp_path / "broken")) == timedelta(seconds=60)


def test_the_heartbeat_knows_when_table_care_is_due_from_the_delta_logs(tmp_path):
    """care_is_due reads each table's log (delta-rs): OPTIMIZE and VACUUM count from the table's
    creation until they first run; a catalog property the table lacks is due at once."""
    import pyarrow as pa
    from deltalake import write_deltalake

    text = CATALOG.replace("file_bytes: 4096}", "file_bytes: 4096}\n    maintenance: {optimize_every: 1h}")
    file = tmp_path / "topics.yaml"
    file.write_text(text)
    topic = load_catalog(file, tmp_path / "lake", strict=True).topic("fresh-a")
    trigger = schedule_of(topic)[0].watchers[0].trigger
    assert trigger.care_tables[0] == topic.path and trigger.optimize_every_seconds == 3600
    assert FreshnessTrigger(**trigger.serialize()[1]).care_tables == trigger.care_tables
    now = datetime.now(UTC)
    assert not trigger.care_is_due(now + timedelta(hours=2)), "no table yet: nothing to care for"
    write_deltalake(
        topic.path,
        pa.table({"value": [b"x"]}),
        configuration=dict(topic.maintenance.properties) or None,
    )
    assert not trigger.care_is_due(now)
    assert trigger.care_is_due(now + timedelta(hours=2))
    trigger.care_properties = {**trigger.care_properties, "delta.logRetentionDuration": "interval 9 days"}
    assert trigger.care_is_due(now), "a property the table lacks is due now"
    # A log that cannot be read: not due (and a warning), the watcher goes on.
    (Path(topic.path) / "_delta_log" / "00000000000000000001.json").write_text("{not json")
    assert not trigger.care_is_due(now + timedelta(hours=2))
