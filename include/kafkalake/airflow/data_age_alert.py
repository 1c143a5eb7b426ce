"""A data-age SLA miss at the end of a run, for topics on the fixed interval.

The run deadline (:mod:`kafkalake.airflow.sla_alerts`) says a run took too long; it says nothing when
runs finish on time while the table still grows old: producers stopped, records produced with old
timestamps, a pre-flight that keeps failing fast. This alert reads the table's data age as the run
history records it (``RunRecord.data_age_seconds = ended_at - newest_timestamp``) when an ingest or
an idle pre-flight ends, success or failure, and alerts when it is over the topic's freshness SLA:
one ``data age SLA miss`` line in the task log (ERROR), and a POST to the topic's SLA webhook
connection, the one the run deadline alert uses.

Once per table position: it alerts when the newest row measured before this one
(:func:`previous_measured`) was within its SLA, or held another newest timestamp; not on every idle
run while nothing changes. ``schedule: freshness`` topics are left to their watcher
(:mod:`kafkalake.airflow.freshness_trigger`), which alerts on the oldest record not yet landed.

The decision is pure (:func:`should_alert`); :func:`alert_after_run` is the I/O around it and never
raises: a failure to alert is a warning, never a failed run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from kafkalake.core.durations import format_duration
from kafkalake.lake import run_history
from kafkalake.lake.run_history import RunRecord

log = logging.getLogger(__name__)

#: The kinds of row whose data age says how fresh the table is. A re-ingest lands old records on
#: purpose (gap repair), and care, registration and the rest measure no data age.
ALERT_KINDS = frozenset({"ingest", "idle", "catch_up"})
EVENT = "kafkalake.data_age_miss"
#: How far back the alert looks for the row measured before this one.
HISTORY_WINDOW = timedelta(days=7)


def over_sla(record: RunRecord) -> bool:
    """Whether the row's data age is over the SLA it ran under (unknown age: no)."""
    age = record.data_age_seconds
    return age is not None and record.sla_seconds > 0 and age > record.sla_seconds


def previous_measured(records: Sequence[RunRecord]) -> RunRecord | None:
    """The newest row (``records`` oldest first, as ``run_history.read`` gives them) that measured
    a data age: rows of care, registration, a re-ingest or a run that knew no data age are passed over."""
    for record in reversed(records):
        if record.kind in ALERT_KINDS and record.data_age_seconds is not None:
            return record
    return None


def should_alert(previous: RunRecord | None, current: RunRecord) -> bool:
    """Whether the run that wrote ``current`` raises a data-age SLA miss.

    ``previous``: :func:`previous_measured` of the rows before it. Each row is judged against its
    own SLA: the alert went out at the previous row when it was over its SLA, so this one alerts
    only for a new table position (another newest timestamp) or a first crossing.
    """
    if current.kind not in ALERT_KINDS or not over_sla(current):
        return False
    if previous is None or not over_sla(previous):
        return True
    return previous.newest_timestamp != current.newest_timestamp


def message(record: RunRecord, table_path: str) -> str:
    """The alert's one line: topic, table, data age, SLA, newest record's time, lag."""
    age = format_duration_seconds(record.data_age_seconds)
    newest = record.newest_timestamp.isoformat() if record.newest_timestamp else "?"
    lag = "unknown" if record.lag_records is None else f"{record.lag_records} records"
    return (
        f"data age SLA miss: table {table_path} of Kafka topic {record.topic} is {age} old at the end "
        f"of run {record.run_id} (task {record.task_id}, {record.outcome}), over its freshness SLA of "
        f"{format_duration_seconds(record.sla_seconds)}; newest record's time {newest}; lag {lag}"
    )


def payload(record: RunRecord, table_path: str, text: str) -> dict[str, Any]:
    """The webhook's JSON: times and counts only, never a record's value or a setting."""
    return {
        "text": text,
        "event": EVENT,
        "checked_at": "run_end",
        "topic": record.topic,
        "table_path": table_path,
        "dag_id": record.dag_id,
        "run_id": record.run_id,
        "task_id": record.task_id,
        "outcome": record.outcome,
        "sla_seconds": record.sla_seconds,
        "data_age_seconds": None if record.data_age_seconds is None else round(record.data_age_seconds),
        "newest_timestamp": record.newest_timestamp.isoformat() if record.newest_timestamp else None,
        "lag_records": record.lag_records,
    }


def format_duration_seconds(seconds: float | None) -> str:
    return "?" if seconds is None else format_duration(timedelta(seconds=round(seconds)))


#: Posts a JSON body to an HTTP connection id (:func:`kafkalake.airflow.sla_alerts.send_webhook`).
Post = Callable[[str, Mapping[str, Any]], int]


def alert_after_run(
    record: RunRecord,
    earlier: Callable[[], Sequence[RunRecord]],
    *,
    table_path: str,
    webhook_conn_id: str | None,
    post: Post | None = None,
) -> str | None:
    """Alert for ``record`` when :func:`should_alert` says so; the message, or None.

    ``earlier`` reads the history's rows before this one: called only when the row is over its SLA
    (an idle run within it reads nothing more). Never raises: a history that cannot be read alerts
    (better twice than never), a webhook that fails is a warning.
    """
    try:
        if record.kind not in ALERT_KINDS or not over_sla(record):
            return None
        try:
            previous = previous_measured(earlier())
        except Exception as err:
            log.warning("data-age alert: the run history could not be read, alerting anyway: %s", err)
            previous = None
        if not should_alert(previous, record):
            log.info(
                "data age %s is still over the SLA at the same table position: already alerted",
                format_duration_seconds(record.data_age_seconds),
            )
            return None
        text = message(record, table_path)
        log.error("%s", text)
    except Exception as err:
        log.warning("data-age alert: not checked: %s", err)
        return None
    if webhook_conn_id:
        try:
            if post is None:
                from kafkalake.airflow.sla_alerts import send_webhook

                post = send_webhook
            status = post(webhook_conn_id, payload(record, table_path, text))
            log.info("data age SLA miss sent to webhook connection %r (HTTP %d)", webhook_conn_id, status)
        except Exception as err:  # the run's own outcome stands
            log.warning("data-age alert: not posted to webhook connection %r: %s", webhook_conn_id, err)
    return text


def history_before(location: str, now: datetime | None = None) -> Callable[[], Sequence[RunRecord]]:
    """Reads the history's rows of the last :data:`HISTORY_WINDOW` as they are (before this run's row
    is appended). A table whose last measured row is older than that alerts once more: the read
    stays the window's, however long the history grows."""
    return lambda: run_history.read(location, since=(now or datetime.now(UTC)) - HISTORY_WINDOW)
