"""What a run does: backfill (table care only), guarded re-ingest, or the normal ingest."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from kafkalake.core.errors import Kind, ReingestRefusedError
from kafkalake.core.run_mode import Mode, parse_reingest_from, run_mode

NOW = datetime(2026, 5, 2, 12, 0, tzinfo=UTC)
CONFIRMED = {"reingest_from": "2026-05-01T10:00:00Z", "confirm_reingest": True}


def test_a_backfill_run_never_ingests_whatever_its_params():
    mode = run_mode("backfill", CONFIRMED, NOW)

    assert mode.mode is Mode.BACKFILL
    assert "checkpoint-driven, not date-driven" in mode.note
    assert "reingest_from" in mode.note and "replay DAG" in mode.note


def test_a_scheduled_run_ignores_the_reingest_params():
    mode = run_mode("scheduled", CONFIRMED, NOW)

    assert mode.mode is Mode.INGEST
    assert "ignored" in mode.note


@pytest.mark.parametrize("params", [None, {}, {"reingest_from": None, "confirm_reingest": False}])
def test_a_manual_run_without_params_is_a_normal_ingest(params):
    assert run_mode("manual", params, NOW).mode is Mode.INGEST


def test_a_confirmed_manual_run_reingests_from_the_time_in_utc():
    mode = run_mode("manual", {**CONFIRMED, "reingest_from": "2026-05-01T12:00:00+02:00"}, NOW)

    assert mode.mode is Mode.REINGEST
    assert mode.reingest_from == datetime(2026, 5, 1, 10, 0, tzinfo=UTC)


def test_a_time_without_zone_is_utc():
    assert parse_reingest_from("2026-05-01T10:00", NOW) == datetime(2026, 5, 1, 10, 0, tzinfo=UTC)
    assert parse_reingest_from(" 2026-05-01 ", NOW) == datetime(2026, 5, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("params", "says"),
    [
        ({"reingest_from": "yesterday", "confirm_reingest": True}, "'yesterday' is not an ISO timestamp"),
        ({"reingest_from": "2026-13-01T00:00:00Z", "confirm_reingest": True}, "is not an ISO timestamp"),
        ({"reingest_from": "2026-05-03T00:00:00Z", "confirm_reingest": True}, "is in the future"),
        ({"reingest_from": "2026-05-01T10:00:00Z"}, "confirm_reingest is not true"),
        (
            {"reingest_from": "2026-05-01T10:00:00Z", "confirm_reingest": "yes"},
            "confirm_reingest is not true",
        ),
    ],
)
def test_a_bad_reingest_is_refused_saying_why(params, says):
    with pytest.raises(ReingestRefusedError) as refused:
        run_mode("manual", params, NOW)

    assert refused.value.kind is Kind.REINGEST_REFUSED
    assert says in str(refused.value)
    assert str(refused.value).startswith("[reingest_refused] re-ingest refused: ")
    assert "NOT retrying" in str(refused.value) and "RUNBOOK.md, section reingest_refused" in str(
        refused.value
    )


def test_the_task_contexts_run_type_enum_is_understood():
    """In a task, ``dag_run.run_type`` is the Task SDK's enum, whose str() is "DagRunType.MANUAL"."""
    from airflow.sdk.api.datamodels._generated import DagRunType

    assert run_mode(DagRunType.BACKFILL, {}, NOW).mode is Mode.BACKFILL
    assert run_mode(DagRunType.MANUAL, CONFIRMED, NOW).mode is Mode.REINGEST
    assert run_mode(DagRunType.SCHEDULED, CONFIRMED, NOW).mode is Mode.INGEST
