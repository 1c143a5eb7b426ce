"""The metrics of one run of a topic's DAG: what they are, how they are computed, how they read.

The ingest job measures what it landed (:class:`JobMetrics`) and hands it to its Airflow task as a
JSON file named by :data:`ENV_METRICS_FILE`. The task adds what only it sees (the lag before and
after the job, the whole job's duration, the age of the newest record) into :class:`RunMetrics`,
which becomes a log summary, an XCom value and Airflow metrics (:func:`metric_points`).

Everything here is pure: no Airflow, no Spark, no Kafka, no clock.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from kafkalake.core.durations import format_duration

#: Environment variable naming the file the ingest job writes its :class:`JobMetrics` to.
ENV_METRICS_FILE = "KAFKALAKE_METRICS_FILE"
#: XCom key of a run's metrics, on ``ingest`` (a run that landed) or ``check_new_offsets`` (idle).
XCOM_KEY = "run_metrics"
#: First segment of every metric name.
METRIC_ROOT = "kafkalake"
#: Longest topic segment of a metric name. Airflow refuses StatsD names over 250 characters and
#: OpenTelemetry names whose ``<otel_prefix>.<name>`` is over 255; this leaves room for both.
MAX_TOPIC_SEGMENT = 180
#: Partitions listed one by one in the log summary; the rest are counted.
SUMMARY_PARTITIONS = 12

#: {partition: records}
PartitionLag = dict[int, int]


@dataclass(frozen=True)
class JobMetrics:
    """What the ingest job landed in one run, summed over its micro-batches."""

    batches: int
    #: Records landed in bronze.
    rows: int
    #: Bytes of the Kafka keys and values landed (null counts 0): what was read, not Parquet's size.
    bytes: int
    #: Records that became rows of the parsed table (0 for a bronze-only topic).
    parsed_rows: int
    #: Dead letters by reason.
    dead_letters: dict[str, int]
    #: Newest Kafka timestamp among the landed records, in ms since the epoch; None if none landed.
    newest_timestamp_ms: int | None
    #: Python start to stream started (Spark session, table and checkpoint checks), seconds.
    startup_seconds: float
    #: Stream started to stream done: reading Kafka and writing every table, seconds.
    processing_seconds: float
    #: Follow-up tasks the job did in its own Spark application after the stream (one JVM per run),
    #: each with its summary line: {"refresh_schema": "..."}. Their Airflow tasks only report them.
    follow_ups: dict[str, str] = field(default_factory=dict)
    #: How the start position was rebuilt from the tables when the checkpoint could not be trusted
    #: (missing, corrupt, older or newer than the table); "" when it was not.
    recovered: str = ""
    #: Offsets Kafka deleted before the job read them (``fail_on_data_loss: false``), recorded in the
    #: topic's gaps table.
    lost_offsets: int = 0
    #: A family's members read for the first time this run (from ``starting_offsets``), and those
    #: Kafka no longer has (deleted: their rows stay in the table); None for a single topic.
    new_members: list[str] | None = None
    missing_members: list[str] | None = None
    #: The driver JVM's peak resident memory (Linux's VmHWM of the job's parent process, the JVM
    #: spark-submit started: the driver, and in ``local[*]`` the executors too), read as the job
    #: ends; None where it cannot be read.
    driver_peak_memory_bytes: int | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str, source: str = "metrics file") -> JobMetrics:
        """Parse and check what the job wrote; a ValueError names the source and the field."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"{source}: not JSON: {err}") from err
        if not isinstance(data, dict):
            raise ValueError(f"{source}: expected a JSON object")

        def number(name: str, kind: type, optional: bool = False) -> Any:
            value = data.get(name)
            if value is None and optional:
                return None
            if isinstance(value, bool) or not isinstance(value, (int, float) if kind is float else int):
                raise ValueError(f"{source}: field {name!r}: expected a number, not {value!r}")
            return kind(value)

        dead = data.get("dead_letters")
        if not isinstance(dead, dict) or not all(
            isinstance(k, str) and isinstance(v, int) for k, v in dead.items()
        ):
            raise ValueError(f"{source}: field 'dead_letters': expected {{reason: count}}, not {dead!r}")
        return cls(
            batches=number("batches", int),
            rows=number("rows", int),
            bytes=number("bytes", int),
            parsed_rows=number("parsed_rows", int),
            dead_letters=dict(sorted(dead.items())),
            newest_timestamp_ms=number("newest_timestamp_ms", int, optional=True),
            startup_seconds=number("startup_seconds", float),
            processing_seconds=number("processing_seconds", float),
            follow_ups=_follow_ups(data.get("follow_ups"), source),
            recovered=str(data.get("recovered") or ""),
            lost_offsets=number("lost_offsets", int, optional=True) or 0,
            new_members=_names(data.get("new_members"), "new_members", source),
            missing_members=_names(data.get("missing_members"), "missing_members", source),
            driver_peak_memory_bytes=number("driver_peak_memory_bytes", int, optional=True),
        )


def _names(value: Any, name: str, source: str) -> list[str] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{source}: field {name!r}: expected a list of topic names, not {value!r}")
    return list(value)


def _follow_ups(value: Any, source: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ValueError(f"{source}: field 'follow_ups': expected {{task: summary}}, not {value!r}")
    return dict(value)


@dataclass(frozen=True)
class RunMetrics:
    """One DAG run's metrics, as logged, pushed to XCom and sent to Airflow's metrics backend."""

    topic: str
    #: False for an idle run: nothing new in Kafka, no Spark job.
    ingested: bool
    rows: int = 0
    bytes: int = 0
    batches: int = 0
    parsed_rows: int = 0
    dead_letters: dict[str, int] = field(default_factory=dict)
    #: Records in Kafka not yet in the table, per partition, before and after the job (None: unknown).
    lag_before: PartitionLag | None = None
    lag_after: PartitionLag | None = None
    #: Newest Kafka timestamp the table holds (ms since the epoch), and its age when measured.
    newest_timestamp_ms: int | None = None
    freshness_seconds: float | None = None
    #: The whole spark-submit (JVM start included), and the job's own split of it.
    duration_seconds: float | None = None
    startup_seconds: float | None = None
    processing_seconds: float | None = None
    #: How the start position was rebuilt from the tables, when the checkpoint could not be trusted.
    recovered: str = ""
    #: Offsets Kafka deleted before they were read (``fail_on_data_loss: false``): never silent.
    lost_offsets: int = 0
    #: A family's members read for the first time, and those gone from Kafka (None: a single topic).
    new_members: list[str] | None = None
    missing_members: list[str] | None = None

    @property
    def dead_letter_count(self) -> int:
        return sum(self.dead_letters.values())

    def as_xcom(self) -> dict[str, Any]:
        """A small JSON-safe dict (partitions as string keys); no settings, no secrets."""
        data = asdict(self)
        for name in ("lag_before", "lag_after"):
            lag = data[name]
            data[name] = None if lag is None else {str(p): n for p, n in sorted(lag.items())}
        data["lag"] = total(self.lag_after)
        data["dead_letter_count"] = self.dead_letter_count
        data["newest_timestamp"] = iso_utc(self.newest_timestamp_ms)
        return data

    def summary(self) -> str:
        """A few lines for the task log."""
        if self.ingested:
            dead = ", ".join(f"{r}={n}" for r, n in sorted(self.dead_letters.items()))
            landed = (
                f"{self.rows:,} rows ({human_bytes(self.bytes)} of keys and values) in "
                f"{self.batches:,} micro-batches, {self.parsed_rows:,} parsed, "
                f"{self.dead_letter_count:,} dead letters{f' ({dead})' if dead else ''}"
            )
        else:
            landed = "nothing: no new offsets in Kafka, no Spark job (idle run)"
        lines = [
            f"run metrics of topic {self.topic}",
            f"  landed:    {landed}",
            f"  lag:       {lag_text(self.lag_before, self.lag_after)}",
            f"  freshness: {freshness_text(self.newest_timestamp_ms, self.freshness_seconds)}",
        ]
        if self.duration_seconds is not None:
            split = ""
            if self.startup_seconds is not None and self.processing_seconds is not None:
                split = (
                    f" (job start-up {self.startup_seconds:.1f} s,"
                    f" processing {self.processing_seconds:.1f} s)"
                )
            lines.append(f"  duration:  {self.duration_seconds:.1f} s of spark-submit{split}")
        if self.recovered:
            lines.append(f"  position:  {self.recovered}")
        if self.new_members:
            lines.append(
                f"  members:   new, read from the entry's starting_offsets: {', '.join(self.new_members)}"
            )
        if self.missing_members:
            gone = ", ".join(self.missing_members)
            lines.append(f"  members:   NOT IN KAFKA (deleted; their rows stay in the table): {gone}")
        if self.lost_offsets:
            lines.append(
                f"  LOST:      {self.lost_offsets:,} offsets Kafka deleted before they were read "
                "(fail_on_data_loss is false; each range is in the topic's gaps table)"
            )
        return "\n".join(lines)


def partition_lag(
    end_offsets: Mapping[int, int],
    committed: Mapping[int, int] | None,
    earliest_offsets: Mapping[int, int],
    starting_offsets: str = "earliest",
) -> PartitionLag:
    """Records Kafka holds that the table does not, per partition.

    ``committed`` is what the checkpoint says the table holds (None before the first run). Records
    Kafka already deleted are not counted: they can no longer be landed. Without a checkpoint the
    first run starts at ``starting_offsets``: from ``earliest`` everything is waiting, from
    ``latest`` nothing is. A partition the checkpoint does not know is read from its start.
    """
    lag: PartitionLag = {}
    for partition, end in sorted(end_offsets.items()):
        earliest = earliest_offsets.get(partition, 0)
        if committed is None:
            start = end if starting_offsets == "latest" else earliest
        else:
            start = max(committed.get(partition, 0), earliest)
        lag[partition] = max(0, end - start)
    return lag


def family_lag(per_member: Mapping[str, Mapping[int, int]]) -> PartitionLag:
    """A family's lag as one topic's reads: per partition number, summed over its members (each
    member's own is in the pre-flight's log)."""
    lag: PartitionLag = {}
    for parts in per_member.values():
        for partition, records in parts.items():
            lag[partition] = lag.get(partition, 0) + records
    return dict(sorted(lag.items()))


def freshness_seconds(newest_timestamp_ms: int | None, now: datetime) -> float | None:
    """Age of the newest landed record at ``now``; a timestamp ahead of the clock counts as age 0."""
    if newest_timestamp_ms is None:
        return None
    return max(0.0, now.timestamp() - newest_timestamp_ms / 1000)


def newest_timestamp(*candidates: int | None) -> int | None:
    """The newest of the known timestamps (ms), None when none is known."""
    known = [c for c in candidates if c is not None]
    return max(known) if known else None


def ingest_metrics(
    topic: str,
    job: JobMetrics,
    *,
    lag_before: PartitionLag | None,
    lag_after: PartitionLag | None,
    table_newest_ms: int | None,
    duration_seconds: float,
    now: datetime,
) -> RunMetrics:
    """The metrics of a run whose ingest job ran; ``table_newest_ms`` covers runs that landed nothing."""
    newest = newest_timestamp(job.newest_timestamp_ms, table_newest_ms)
    return RunMetrics(
        topic=topic,
        ingested=True,
        rows=job.rows,
        bytes=job.bytes,
        batches=job.batches,
        parsed_rows=job.parsed_rows,
        dead_letters=dict(job.dead_letters),
        lag_before=lag_before,
        lag_after=lag_after,
        newest_timestamp_ms=newest,
        freshness_seconds=freshness_seconds(newest, now),
        duration_seconds=duration_seconds,
        startup_seconds=job.startup_seconds,
        processing_seconds=job.processing_seconds,
        recovered=job.recovered,
        lost_offsets=job.lost_offsets,
        new_members=job.new_members,
        missing_members=job.missing_members,
    )


def idle_metrics(topic: str, lag: PartitionLag, table_newest_ms: int | None, now: datetime) -> RunMetrics:
    """The metrics of a run that found nothing new: zero landed, the lag as it stands, and the age
    of the newest record, which keeps growing while a topic receives nothing (a stalled producer)."""
    return RunMetrics(
        topic=topic,
        ingested=False,
        lag_before=lag,
        lag_after=lag,
        newest_timestamp_ms=table_newest_ms,
        freshness_seconds=freshness_seconds(table_newest_ms, now),
    )


# ---------------------------------------------------------------------------------------------
# metric names and values


@dataclass(frozen=True)
class MetricPoint:
    """One value for Airflow's metrics layer (``Stats.gauge`` or ``Stats.timing``)."""

    kind: Literal["gauge", "timing"]
    name: str
    #: Gauges: the value; timings: seconds.
    value: float
    tags: dict[str, str]


# A topic whose segment could also be another topic's: `a__b` (as `a.b` is), `a_.b` (as `a._b`
# is), or a character outside Kafka's own set. Without these, underscores in a segment read back
# one way only (a lone `_` is `_`, a run of 2k is k dots), so two topics never share a series.
_AMBIGUOUS = re.compile(r"__|_\.|\._|[^A-Za-z0-9._-]")


def topic_segment(topic: str) -> str:
    """The topic as one segment of a metric name, never the same for two topics.

    Kafka topic names use only characters Airflow allows in metric names (letters, digits, ``.``,
    ``_``, ``-``), but a ``.`` would split the name into more StatsD levels: it becomes ``__``, as
    Airflow does for task ids in its own names. A name that could then read as another (``a__b``
    beside ``a.b``), or an overlong one, ends with a hash of the topic.
    """
    segment = "".join(
        c if c.isascii() and (c.isalnum() or c in "_-") else "_" for c in topic.replace(".", "__")
    )
    digest = hashlib.sha1(topic.encode()).hexdigest()[:8]
    if len(segment) > MAX_TOPIC_SEGMENT:
        return f"{segment[: MAX_TOPIC_SEGMENT - 9]}-{digest}"
    return f"{segment}-{digest}" if _AMBIGUOUS.search(topic) else segment


def metric_name(topic: str, metric: str) -> str:
    """``kafkalake.<topic>.<metric>``; Airflow adds its prefix (``statsd_prefix``/``otel_prefix``)."""
    return f"{METRIC_ROOT}.{topic_segment(topic)}.{metric}"


def metric_points(metrics: RunMetrics) -> list[MetricPoint]:
    """Every metric of a run, in a stable order. Unknown values are left out, never sent as 0."""
    tags = {"topic": metrics.topic}

    def gauge(metric: str, value: float | None, **extra: str) -> list[MetricPoint]:
        if value is None:
            return []
        return [MetricPoint("gauge", metric_name(metrics.topic, metric), value, {**tags, **extra})]

    points = [
        *gauge("rows", metrics.rows),
        *gauge("bytes", metrics.bytes),
        *gauge("batches", metrics.batches),
        *gauge("dead_letters", metrics.dead_letter_count),
        *gauge("lost_offsets", metrics.lost_offsets if metrics.ingested else None),
        *gauge("lag", total(metrics.lag_after)),
        *gauge("lag_before", total(metrics.lag_before)),
        *gauge("new_members", None if metrics.new_members is None else len(metrics.new_members)),
        *gauge("missing_members", None if metrics.missing_members is None else len(metrics.missing_members)),
    ]
    for partition, lag in sorted((metrics.lag_after or {}).items()):
        points += gauge(f"partition_lag.{partition}", lag, partition=str(partition))
    points += gauge("freshness_seconds", metrics.freshness_seconds)
    for metric, seconds in (
        ("duration", metrics.duration_seconds),
        ("startup", metrics.startup_seconds),
        ("processing", metrics.processing_seconds),
    ):
        if seconds is not None:
            points.append(MetricPoint("timing", metric_name(metrics.topic, metric), seconds, dict(tags)))
    return points


# ---------------------------------------------------------------------------------------------
# text


def total(lag: Mapping[int, int] | None) -> int | None:
    return None if lag is None else sum(lag.values())


def lag_text(before: Mapping[int, int] | None, after: Mapping[int, int] | None) -> str:
    """``1,200 → 0 records (partition 0: 700 → 0, 2: 500 → 0)``, partitions with any lag only."""

    def count(lag: Mapping[int, int] | None, partition: int | None = None) -> str:
        if lag is None:
            return "unknown"
        return f"{(total(lag) if partition is None else lag.get(partition, 0)):,}"

    text = f"{count(before)} → {count(after)} records"
    lagging = sorted(
        p for p in {*(before or {}), *(after or {})} if (before or {}).get(p) or (after or {}).get(p)
    )
    if lagging:
        shown = ", ".join(
            f"{p}: {count(before, p)} → {count(after, p)}" for p in lagging[:SUMMARY_PARTITIONS]
        )
        more = len(lagging) - SUMMARY_PARTITIONS
        text += f" (partition {shown}{f', and {more} more' if more > 0 else ''})"
    return text


def freshness_text(newest_timestamp_ms: int | None, age_seconds: float | None) -> str:
    if newest_timestamp_ms is None or age_seconds is None:
        return "no record landed yet"
    age = format_duration(timedelta(seconds=age_seconds))
    return f"newest Kafka timestamp landed {iso_utc(newest_timestamp_ms)}, {age} old"


def iso_utc(timestamp_ms: int | None) -> str | None:
    if timestamp_ms is None:
        return None
    return datetime.fromtimestamp(timestamp_ms / 1000, tz=UTC).isoformat(timespec="milliseconds")


def human_bytes(count: int) -> str:
    units = ("B", "KiB", "MiB", "GiB", "TiB")
    size, unit = float(count), 0
    while size >= 1024 and unit < len(units) - 1:
        size, unit = size / 1024, unit + 1
    return f"{count:,} B" if unit == 0 else f"{size:,.1f} {units[unit]}"
