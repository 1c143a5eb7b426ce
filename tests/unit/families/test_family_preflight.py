"""The pre-flight of a family, without a JVM: run when any member has something new (or a new member
has records from starting_offsets); a deleted member is no reason to run. And a family's checkpoint
read per topic."""

from __future__ import annotations

import json

import pytest

from kafkalake.kafka.offsets import decide_family
from kafkalake.lake.checkpoint import family_batch_end_offsets, read_family_checkpoint

pytestmark = pytest.mark.families


def state(committed, unfinished=False):
    from kafkalake.lake.checkpoint import FamilyCheckpointState

    return FamilyCheckpointState(committed, unfinished)


MARKS = {"a": {0: (0, 4), 1: (0, 2)}, "b": {0: (0, 3)}}


def test_idle_when_every_member_is_read_to_its_end():
    decision = decide_family(state({"a": {0: 4, 1: 2}, "b": {0: 3}, "gone": {0: 9}}), MARKS, "earliest")
    assert not decision.run and decision.lag == {"a": {0: 0, 1: 0}, "b": {0: 0}}


def test_one_member_with_new_records_runs_the_job():
    decision = decide_family(state({"a": {0: 4, 1: 1}, "b": {0: 3}}), MARKS, "earliest")
    assert decision.run and "a: 1 new records" in decision.reason
    assert decision.lag["a"] == {0: 0, 1: 1}


def test_a_new_member_runs_only_when_starting_offsets_gives_it_records():
    committed = {"a": {0: 4, 1: 2}}
    from_earliest = decide_family(state(committed), MARKS, "earliest")
    assert (
        from_earliest.run
        and from_earliest.new == ("b",)
        and "b: a new member, 3 records" in from_earliest.reason
    )
    from_latest = decide_family(state(committed), MARKS, "latest")
    assert not from_latest.run and from_latest.lag["b"] == {0: 0}


def test_expired_offsets_of_a_member_are_reported_per_member():
    decision = decide_family(state({"a": {0: 4, 1: 2}, "b": {0: 1}}), {**MARKS, "b": {0: (2, 3)}}, "earliest")
    assert decision.expired == {"b": {0: (1, 2)}}


def test_no_checkpoint_is_a_first_run():
    assert decide_family(None, MARKS, "latest").run


def test_a_family_checkpoint_is_read_per_topic(tmp_path):
    checkpoint = tmp_path / "checkpoint"
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "commits").mkdir()
    meta = '{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{}}'
    (checkpoint / "offsets" / "0").write_text(f'v1\n{meta}\n{{"a":{{"0":4,"1":2}},"b":{{"0":3}}}}')
    (checkpoint / "offsets" / "1").write_text(f'v1\n{meta}\n{{"a":{{"0":6,"1":2}},"b":{{"0":3}}}}')
    (checkpoint / "commits" / "0").write_text('v1\n{"nextBatchWatermarkMs":0}')
    read = read_family_checkpoint(str(checkpoint))
    assert read is not None and read.unfinished_batch
    assert read.committed == {"a": {0: 4, 1: 2}, "b": {0: 3}}
    assert family_batch_end_offsets(str(checkpoint), 1) == {"a": {0: 6, 1: 2}, "b": {0: 3}}
    assert read_family_checkpoint(str(tmp_path / "none")) is None


def test_a_familys_start_names_every_partition_of_every_member_read():
    from kafkalake.spark.stream import family_starting_offsets_option

    option = family_starting_offsets_option(
        {"a": {0: 4}, "new": None, "gone": {0: 9}}, {"a": [0, 1], "new": [0, 1]}, "latest"
    )
    # a's partition 1, new to the table, from its earliest; a new member from `latest`; a member
    # not read (gone from Kafka) is not named: Spark refuses partitions it is not assigned.
    assert json.loads(option) == {"a": {"0": 4, "1": -2}, "new": {"0": -1, "1": -1}}
    assert json.loads(family_starting_offsets_option({"new": None}, {"new": [0]}, "earliest")) == {
        "new": {"0": -2}
    }


def test_a_familys_dag_hands_its_members_to_the_preflight(tmp_path, monkeypatch):
    from kafkalake.airflow.dag_factory import build_dags

    catalog = tmp_path / "topics.yaml"
    catalog.write_text(
        "topics:\n  - topic_pattern: 'clicks-.*'\n    table: clicks\n"
        "    freshness_sla: 1h\n    parsed: false\n"
    )
    monkeypatch.setenv("KAFKALAKE_CATALOG", str(catalog))
    monkeypatch.setenv("KAFKALAKE_LAKE_ROOT", str(tmp_path / "lake"))
    dag = build_dags(strict=True)["ingest_clicks"]
    preflight = dag.get_task("check_new_offsets")
    assert preflight.op_kwargs["family"] == {
        "topics": [],
        "topic_pattern": "clicks-.*",
        "starting_offsets": "earliest",
    }
    assert dag.get_task("ingest").application_args == ["--topic", "clicks"]
    assert "topics matching `clicks-.*`" in dag.doc_md
