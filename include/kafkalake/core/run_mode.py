"""What one DAG run of a topic does: ingest, table care only (a backfill), or a guarded re-ingest.

The ingest is checkpoint-driven, not date-driven: every run lands what Kafka holds past the
checkpoint, whatever its logical date. A run's date range therefore means nothing to Kafka, and

* a **backfill run** (``airflow backfill create``, the UI's Backfill) never ingests: it does the
  table care (``maintain_table``) and nothing else, so a backfill of 100 intervals is 100 cheap
  runs that cannot duplicate a row;
* a **manual run with** ``reingest_from`` (an ISO timestamp) **and** ``confirm_reingest: true`` (the
  DAG's params, in "Trigger DAG w/ config") re-reads Kafka from that time and lands only the records
  the tables lack (:mod:`kafkalake.spark.reingest`);
* any other run (scheduled, or manual without the params) is the normal ingest; its params are
  ignored.

Pure: the caller passes the run type, the params and the clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from kafkalake.core.durations import parse_timestamp
from kafkalake.core.errors import Kind, ReingestRefusedError, failure

#: DAG params (Airflow ``Param``), shown in the "Trigger DAG w/ config" form.
PARAM_REINGEST_FROM = "reingest_from"
PARAM_CONFIRM = "confirm_reingest"

#: ``DagRunType.BACKFILL_JOB`` and ``DagRunType.MANUAL``, as ``dag_run.run_type`` spells them.
BACKFILL_RUN_TYPE = "backfill"
MANUAL_RUN_TYPE = "manual"

BACKFILL_SKIP_REASON = (
    "backfill run: not ingesting. The ingest is checkpoint-driven, not date-driven (every run lands "
    "what Kafka holds past the table's checkpoint, whatever its dates), so a backfill run only does "
    "the table care. To re-read Kafka from a point in time into the tables (gap repair), trigger the "
    f"DAG with config {{{PARAM_REINGEST_FROM!r}: '<ISO timestamp>', {PARAM_CONFIRM!r}: true}}; to "
    "re-parse bronze into the parsed tables, use the replay DAG. See RUNBOOK.md, 'Backfills and "
    "re-ingest'."
)


class Mode(StrEnum):
    INGEST = "ingest"
    BACKFILL = "backfill"
    REINGEST = "reingest"


@dataclass(frozen=True)
class RunMode:
    mode: Mode
    #: The re-ingest's start (UTC), for :attr:`Mode.REINGEST` only.
    reingest_from: datetime | None = None
    #: A line for the task log: why the run does what it does.
    note: str = ""


def run_mode(run_type: object, params: Mapping[str, Any] | None, now: datetime) -> RunMode:
    """What a run of ``run_type`` with ``params`` does.

    Raises:
        ReingestRefusedError: a manual run asked for a re-ingest that cannot run: the timestamp is
            unparseable or in the future, or the confirmation is missing. Nothing was written.
    """
    # The task context's run type is an enum whose str() is "DagRunType.MANUAL": compare values.
    run_type = getattr(run_type, "value", run_type)
    if run_type == BACKFILL_RUN_TYPE:
        return RunMode(Mode.BACKFILL, note=BACKFILL_SKIP_REASON)
    params = params or {}
    raw = params.get(PARAM_REINGEST_FROM)
    wanted = raw is not None and str(raw).strip() != ""
    if run_type != MANUAL_RUN_TYPE:
        note = "scheduled run: the re-ingest params are ignored" if wanted else ""
        return RunMode(Mode.INGEST, note=note)
    if not wanted:
        note = f"{PARAM_CONFIRM} is set but {PARAM_REINGEST_FROM} is not: a normal ingest"
        return RunMode(Mode.INGEST, note=note if params.get(PARAM_CONFIRM) is True else "")
    since = parse_reingest_from(raw, now)
    if params.get(PARAM_CONFIRM) is not True:
        raise refused(
            f"{PARAM_REINGEST_FROM}={raw!r} asks for a re-ingest, but {PARAM_CONFIRM} is not true: "
            f"tick {PARAM_CONFIRM} (or pass {PARAM_CONFIRM}: true) to confirm it"
        )
    return RunMode(
        Mode.REINGEST,
        reingest_from=since,
        note=f"re-ingest from {since.isoformat()}: only records the tables lack are written",
    )


def parse_reingest_from(raw: object, now: datetime) -> datetime:
    """An ISO 8601 timestamp (UTC when it names no zone), not later than ``now``."""
    text = str(raw).strip()
    try:
        since = parse_timestamp(text).astimezone(UTC)
    except ValueError:
        raise refused(
            f"{PARAM_REINGEST_FROM}={text!r} is not an ISO timestamp: write e.g. 2026-05-01T10:00:00Z "
            "or 2026-05-01T12:00:00+02:00"
        ) from None
    if since > now:
        raise refused(
            f"{PARAM_REINGEST_FROM}={text!r} is in the future (now is {now.isoformat(timespec='seconds')}): "
            "Kafka has nothing from then yet"
        )
    return since


def refused(detail: str) -> ReingestRefusedError:
    return ReingestRefusedError(failure(Kind.REINGEST_REFUSED, f"re-ingest refused: {detail}").message)
