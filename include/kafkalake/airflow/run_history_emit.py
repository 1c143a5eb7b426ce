"""The tasks' side of the run history (:mod:`kafkalake.lake.run_history`): one row per run of a task
that did something (the pre-flight of an idle run, an ingest, a catch-up, a re-ingest, a replay,
table care, a registration, a schema refresh), written when the task ends, however it ends.

A task that only reports work its ingest job already did, or finds nothing due, writes no row: the
ingest's row covers the run. A row is written on success and on failure (with the failure's kind);
writing it never fails the run nor hides its error: a failure to write is a warning in the log.

An ingest's rows (bronze's and the parsed table's) are what the tables' Delta logs say their
commits appended after the versions they had before the job (delta-rs, no JVM), like the offsets it
read: the job counts a batch it replays after a crash as landed again, though Delta skips its write
(one committed by the try before), and a job killed by a signal (``job_killed``: the OOM killer, a
drain, a ``kill``) dies without writing its metrics at all. Then its task, which sees the process
die, takes the micro-batches from the log too; its bytes and dead letters by reason are not in the
logs (0 and empty). With the logs unreadable, the job's own figures stand.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kafkalake.airflow import data_age_alert, run_metrics_emit
from kafkalake.config.tables import topic_tables
from kafkalake.config.topic import TopicConfig, history_path
from kafkalake.core.errors import KafkalakeError, Kind
from kafkalake.core.run_metrics import JobMetrics, RunMetrics, total
from kafkalake.lake import landing, run_history, store_settings, table_position
from kafkalake.lake.run_history import RunRecord
from kafkalake.lake.schema_history import SchemaHistory

log = logging.getLogger(__name__)

#: {Kafka topic: {partition: offset}}
TopicOffsets = dict[str, dict[int, int]]


def failure_kind(err: BaseException) -> str:
    """The :class:`~kafkalake.core.errors.Kind` a failed run's error stands for."""
    if isinstance(err, KafkalakeError):
        return str(err.kind)
    cause = err.__cause__ or err.__context__
    if isinstance(cause, KafkalakeError):
        return str(cause.kind)
    return str(Kind.UNKNOWN)


@dataclass
class Recorder:
    """What a task learns about its run as it goes; written as one row when it ends."""

    topic: str
    history_path: str
    sla_seconds: float
    #: The entry's bronze table.
    table_path: str
    kind: str
    ti: Any
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    #: :class:`RunRecord` fields measured so far.
    values: dict[str, Any] = field(default_factory=dict)
    #: "idle" for a run that found nothing to do; None: success, unless it raised.
    outcome: str | None = None
    #: Set when the task did nothing worth a row (reported another task's work, nothing due).
    skip: bool = False
    #: The offsets the table held before the run (and where Kafka starts a partition it has none
    #: of), to find what the run read: see :meth:`track_offsets`.
    _tracked: TopicConfig | None = None
    #: Table care: the topic whose tables' files are counted again as the run ends.
    _cared: TopicConfig | None = None
    _before: TopicOffsets = field(default_factory=dict)
    #: Bronze's and the parsed table's versions before the job (None: no table yet): what they
    #: received after them is the run's rows.
    _versions: dict[str, int | None] = field(default_factory=dict)
    _starts: TopicOffsets = field(default_factory=dict)
    #: Raise a data-age SLA miss when the run ends (:mod:`kafkalake.airflow.data_age_alert`): an
    #: ingest or pre-flight of a topic on the fixed interval.
    alert_data_age: bool = False
    #: Where that alert is posted, besides the log.
    webhook_conn_id: str | None = None

    def set(self, **values: Any) -> None:
        self.values.update(values)

    def job(self, job: JobMetrics | None, duration_seconds: float | None) -> None:
        """What the job wrote to its metrics file (on a failure too: what it landed before)."""
        if duration_seconds is not None:
            self.set(duration_seconds=duration_seconds)
        if job is None:
            return
        self._landed(job)
        self.set(driver_peak_memory_bytes=job.driver_peak_memory_bytes)

    def metrics(self, metrics: RunMetrics) -> None:
        """The run's metrics as the task published them (lag after, the table's newest timestamp)."""
        lag = total(metrics.lag_after)
        self._landed(metrics)
        # Nothing waits: nothing is old. With records waiting, their age is not read here.
        self.set(lag_records=lag, lag_seconds=0.0 if lag == 0 else None)
        if metrics.duration_seconds is not None:
            self.set(duration_seconds=metrics.duration_seconds)

    def _landed(self, landed: JobMetrics | RunMetrics) -> None:
        self.set(
            **{name: getattr(landed, name) for name in ("rows", "bytes", "parsed_rows", "batches")},
            dead_letters=dict(landed.dead_letters),
            lost_offsets=landed.lost_offsets,
            newest_timestamp=_moment(landed.newest_timestamp_ms),
        )

    def track_offsets(self, topic: TopicConfig, marks: Mapping[str, Mapping[int, tuple[int, int]]]) -> None:
        """Note the table's offsets now, so the row can say which offsets the run read (from the
        table's own record of them, :mod:`kafkalake.lake.table_position`, after the run).

        ``marks``: Kafka's (earliest, end) offsets measured just before the job, per topic: where
        the job starts a partition the table holds nothing of (its earliest offset, or its end for
        ``starting_offsets: latest``).
        """
        latest = topic.starting_offsets == "latest"
        self._starts = {
            t: {p: high if latest else low for p, (low, high) in parts.items()} for t, parts in marks.items()
        }
        try:
            self._before = table_offsets(topic)
            self._tracked = topic
            paths = (topic.path, topic.parsed_path) if topic.parsed.enabled else (topic.path,)
            self._versions = {path: landing.table_version(path) for path in paths}
        except Exception as err:  # a figure of the history only: the run goes on without it
            log.warning("run history: the offsets read will not be recorded: %s", err)

    def care_before(self, topic: TopicConfig) -> None:
        """Count the topic's table files now, and again as the run ends (from the Delta logs)."""
        try:
            files, size = table_files(topic)
        except Exception as err:  # a figure of the history only
            log.warning("run history: the tables' files before care will not be recorded: %s", err)
            return
        self.set(files_before=files, table_bytes_before=size)
        self._cared = topic

    def write(self, outcome: str, failure: str | None) -> None:
        """Append the row; never raises (a warning instead). No history path: nothing written."""
        if not self.history_path:
            return
        try:
            ended = datetime.now(UTC)
            values = dict(self.values)
            if self._tracked is not None:
                after = table_offsets(self._tracked)
                values["offsets_read"] = run_history.offsets_json(
                    read_ranges(self._before, after, self._starts)
                )
                received = self._received(self._tracked)
                if "rows" in values:
                    # The job's count of the batches it ran stands; a replayed one appends nothing.
                    received.pop("batches", None)
                values.update(received)
            if self._cared is not None:
                values["files_after"], values["table_bytes_after"] = table_files(self._cared)
            newest = values.get("newest_timestamp")
            if newest is None and self.alert_data_age and self.kind in data_age_alert.ALERT_KINDS:
                # A failed run that landed nothing: the table is as old as its newest record.
                newest = values["newest_timestamp"] = self._table_newest()
            if isinstance(newest, datetime) and values.get("data_age_seconds") is None:
                values["data_age_seconds"] = max(0.0, (ended - newest).total_seconds())
            values.setdefault("duration_seconds", (ended - self.started_at).total_seconds())
            record = RunRecord(
                topic=self.topic,
                dag_id=str(getattr(self.ti, "dag_id", "") or ""),
                run_id=str(getattr(self.ti, "run_id", "") or ""),
                task_id=str(getattr(self.ti, "task_id", "") or ""),
                try_number=int(getattr(self.ti, "try_number", 1) or 1),
                kind=self.kind,
                outcome=outcome,
                failure_kind=failure,
                started_at=self.started_at,
                ended_at=ended,
                sla_seconds=self.sla_seconds,
                **values,
            )
            if self.alert_data_age:
                # Before the append: the decision compares with the rows before this one.
                data_age_alert.alert_after_run(
                    record,
                    data_age_alert.history_before(self.history_path),
                    table_path=self.table_path,
                    webhook_conn_id=self.webhook_conn_id,
                )
            run_history.append(self.history_path, record)
        except Exception as err:
            log.warning("run history: this run's row was not written to %s: %s", self.history_path, err)

    def _received(self, topic: TopicConfig) -> dict[str, int]:
        """Rows and batches bronze received, and rows the parsed table did, since :meth:`track_offsets`."""
        try:
            bronze = landing.received_after(topic.path, self._versions.get(topic.path))
            found = {"rows": bronze.rows, "batches": bronze.batches}
            if topic.parsed_path in self._versions:
                parsed = landing.received_after(topic.parsed_path, self._versions[topic.parsed_path])
                found["parsed_rows"] = parsed.rows
            return found
        except Exception as err:  # a figure of the history only: the row is written without it
            log.warning("run history: what the tables received could not be read: %s", err)
            return {}

    def _table_newest(self) -> datetime | None:
        try:
            return _moment(run_metrics_emit.table_newest_timestamp_ms(self.table_path))
        except Exception as err:  # a figure of the history only
            log.warning("run history: the table's newest record time could not be read: %s", err)
            return None


@contextmanager
def recorded(
    topic: TopicConfig | None,
    kind: str,
    ti: Any,
    *,
    name: str | None = None,
    table_path: str | None = None,
    sla_seconds: float | None = None,
    alert_data_age: bool = False,
    webhook_conn_id: str | None = None,
) -> Iterator[Recorder]:
    """A :class:`Recorder` for the task's run, whose row is written as the block ends.

    An exception (Airflow's skip aside) is recorded as a failure, with its kind, and raised on.
    ``topic``, or ``name``, ``table_path`` (bronze's) and ``sla_seconds`` (the pre-flight has no
    TopicConfig); without a table path or an SLA, nothing is written. ``alert_data_age``: check the
    row's data age against the SLA as it is written (:mod:`kafkalake.airflow.data_age_alert`), and
    post a miss to ``webhook_conn_id``.
    """
    from airflow.sdk.exceptions import AirflowSkipException

    recorder = Recorder(
        topic=topic.name if topic is not None else str(name),
        history_path=(
            topic.history_path
            if topic is not None
            else history_path(table_path)
            if table_path and sla_seconds is not None
            else ""
        ),
        sla_seconds=topic.freshness_sla.total_seconds() if topic is not None else float(sla_seconds or 0),
        table_path=topic.path if topic is not None else str(table_path or ""),
        kind=kind,
        ti=ti,
        alert_data_age=alert_data_age,
        webhook_conn_id=webhook_conn_id,
    )
    try:
        yield recorder
    except AirflowSkipException:
        raise
    except BaseException as err:
        recorder.write("failed", failure_kind(err))
        raise
    if not recorder.skip:
        recorder.write(recorder.outcome or "success", None)


def table_offsets(topic: TopicConfig) -> TopicOffsets:
    """The next offset the table needs of each partition, per Kafka topic, from its Delta log."""
    position = table_position.read_position(topic.path)
    if position is None:
        return {}
    if position.members is not None:
        return {t: dict(o) for t, o in position.members.items()}
    return {topic.name: dict(position.end)}


def read_ranges(
    before: TopicOffsets, after: TopicOffsets, starts: TopicOffsets
) -> dict[str, dict[int, tuple[int, int]]]:
    """``{topic: {partition: (from, to)}}`` the table gained between ``before`` and ``after``."""
    read: dict[str, dict[int, tuple[int, int]]] = {}
    for name, parts in after.items():
        for partition, end in parts.items():
            start = before.get(name, {}).get(partition, starts.get(name, {}).get(partition, 0))
            if end > start:
                read.setdefault(name, {})[partition] = (start, end)
    return read


def table_files(topic: TopicConfig) -> tuple[int, int]:
    """Files and bytes of the topic's tables, from their Delta logs (no data file read)."""
    files = size = 0
    for table in topic_tables(topic):
        delta = store_settings.open_delta(table.location)
        if delta is None:
            continue
        actions = delta.get_add_actions(flatten=True)
        files += actions.num_rows
        size += sum(v or 0 for v in actions.column("size_bytes").to_pylist())
    return files, size


def care_for_history(topic: TopicConfig) -> None:
    """Keep the topic's history table small (delta-rs, no JVM); a failure is only a warning."""
    try:
        done = run_history.care(topic.history_path)
    except Exception as err:
        log.warning("run history: %s not compacted: %s", topic.history_path, err)
        return
    if done:
        log.info("run history: %s", done)


def schema_version(topic: TopicConfig) -> int | None:
    """The parsed side's current schema version (a listing of its history folder)."""
    if not topic.parsed.enabled:
        return None
    versions = SchemaHistory(topic.schema_dir).versions()
    return versions[-1] if versions else None


def _moment(timestamp_ms: int | None) -> datetime | None:
    return None if timestamp_ms is None else datetime.fromtimestamp(timestamp_ms / 1000, tz=UTC)
