"""The bench's figures (:mod:`kafkalake.dev.bench`): what each stage measured, and the table it prints."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from kafkalake.dev.bench_kdi import KdiRun

MIB = 1024 * 1024


@dataclass(frozen=True)
class RawRead:
    records: int
    bytes: int
    seconds: float
    #: CPU-seconds of the reading process (librdkafka's threads included).
    cpu_s: float = 0.0

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds

    @property
    def mib_per_s(self) -> float:
        return self.bytes / MIB / self.seconds


@dataclass(frozen=True)
class Drain:
    records: int
    bytes: int
    wall_s: float
    startup_s: float
    batches: int
    driver_jvm_peak_rss_mib: float
    python_driver_peak_rss_mib: float
    files: int
    avg_file_mib: float
    #: CPU-seconds of the job: spark-submit, the driver JVM (Spark's tasks run in it) and the
    #: Python driver.
    cpu_s: float = 0.0

    @property
    def processing_s(self) -> float:
        return self.wall_s - self.startup_s

    @property
    def records_per_s(self) -> float:
        return self.records / self.wall_s

    @property
    def mib_per_s(self) -> float:
        return self.bytes / MIB / self.wall_s


@dataclass(frozen=True)
class Compaction:
    wall_s: float
    files: int
    avg_file_mib: float


@dataclass(frozen=True)
class IdleRun:
    #: Each timed run, queued → end of its last task.
    runs_s: list[float]
    #: Each timed run, its first task's start → its last task's end.
    tasks_s: list[float]
    jvm_launched: bool
    task_states: dict[str, str]
    #: The last run's tasks, start → end of each.
    task_seconds: dict[str, float]

    @property
    def wall_s(self) -> float:
        return statistics.median(self.runs_s)

    @property
    def run_s(self) -> float:
        return statistics.median(self.tasks_s)


@dataclass(frozen=True)
class Parked:
    #: The run whose parsed side failed on every batch: bronze only, then a failed catch-up.
    parked_wall_s: float
    #: The next run, cause fixed, nothing new in Kafka: the catch-up from bronze.
    catch_up_wall_s: float
    #: Parsed + dead-letter rows after the catch-up (must equal the backlog).
    parsed_side_rows: int


def report(
    raw: RawRead,
    bronze: Drain,
    compaction: Compaction | None,
    idle: IdleRun | None,
    park: Parked | None = None,
    kdi: KdiRun | None = None,
    jvm_extension: str = "on",
) -> str:
    """The figures as a table; ``jvm_extension``: whether the jobs ran with kafkalake's JVM
    extension (``on``) or without it (``off``, KAFKALAKE_JVM_EXTENSION)."""
    ratio = bronze.records_per_s / raw.records_per_s
    processing_ratio = bronze.records / bronze.processing_s / raw.records_per_s
    lines = [
        f"{'measure':<34}{'raw read':>14}{'bronze drain':>16}",
        f"{'kafkalake JVM extension':<34}{'':>14}{jvm_extension:>16}",
        f"{'records':<34}{raw.records:>14,}{bronze.records:>16,}",
        f"{'records/s':<34}{raw.records_per_s:>14,.0f}{bronze.records_per_s:>16,.0f}",
        f"{'MiB/s (payload)':<34}{raw.mib_per_s:>14,.1f}{bronze.mib_per_s:>16,.1f}",
        f"{'wall s':<34}{raw.seconds:>14.1f}{bronze.wall_s:>16.1f}",
        f"{'  start-up s':<34}{'':>14}{bronze.startup_s:>16.1f}",
        f"{'  processing s':<34}{'':>14}{bronze.processing_s:>16.1f}",
        f"{'micro-batches':<34}{'':>14}{bronze.batches:>16}",
        f"{'driver JVM peak RSS MiB':<34}{'':>14}{bronze.driver_jvm_peak_rss_mib:>16,.0f}",
        f"{'Python driver peak RSS MiB':<34}{'':>14}{bronze.python_driver_peak_rss_mib:>16,.0f}",
        f"{'files written / avg MiB':<34}{'':>14}{f'{bronze.files} / {bronze.avg_file_mib:.1f}':>16}",
        f"{'ratio bronze / raw (records/s)':<34}{'':>14}{ratio:>16.0%}",
        f"{'  processing only':<34}{'':>14}{processing_ratio:>16.0%}",
        f"{'CPU-seconds':<34}{raw.cpu_s:>14.1f}{bronze.cpu_s:>16.1f}",
        f"{'records per CPU-second':<34}{per_cpu(raw.records, raw.cpu_s):>14,.0f}"
        f"{per_cpu(bronze.records, bronze.cpu_s):>16,.0f}",
    ]
    if kdi is not None:
        lines += _kdi_lines(raw, bronze, kdi)
    if compaction is not None:
        lines += [
            f"{'table care (OPTIMIZE, VACUUM) s':<34}{'':>14}{compaction.wall_s:>16.1f}",
            f"{'  files after / avg MiB':<34}{'':>14}"
            f"{f'{compaction.files} / {compaction.avg_file_mib:.1f}':>16}",
        ]
    if park is not None:
        both = park.parked_wall_s + park.catch_up_wall_s
        lines += [
            f"{'parked: bronze-only run s':<34}{'':>14}{park.parked_wall_s:>16.1f}",
            f"{'  then the catch-up run s':<34}{'':>14}{park.catch_up_wall_s:>16.1f}",
            f"{'  both / the healthy drain':<34}{'':>14}{both / bronze.wall_s:>16.2f}",
            f"{'  parsed + dead letters rows':<34}{'':>14}{park.parsed_side_rows:>16,}",
        ]
    if idle is not None:
        lines += [
            f"{'idle run (scheduler), median s':<34}{'':>14}{idle.wall_s:>16.1f}",
            f"{'  runs: queued → end s':<34}{'':>14}{' / '.join(f'{s:.1f}' for s in idle.runs_s):>16}",
            f"{'  first task start → end s':<34}{'':>14}{idle.run_s:>16.1f}",
            *(f"{f'    {task} s':<34}{'':>14}{took:>16.1f}" for task, took in idle.task_seconds.items()),
            f"{'  JVM launched':<34}{'':>14}{'yes' if idle.jvm_launched else 'no':>16}",
        ]
    return "\n".join(lines)


def per_cpu(records: int, cpu_s: float) -> float:
    return records / cpu_s if cpu_s > 0 else 0.0


def _kdi_lines(raw: RawRead, ours: Drain, kdi: KdiRun) -> list[str]:
    """kafka-delta-ingest beside our drain of the same backlog."""
    return [
        "",
        f"{'kafka-delta-ingest':<34}{'':>14}{'':>16}",
        f"{'  records / distinct offsets':<34}{'':>14}{f'{kdi.records:,} / {kdi.distinct_offsets:,}':>16}",
        f"{'  wall s (first commit s)':<34}{'':>14}{f'{kdi.wall_s:.1f} ({kdi.first_commit_s:.1f})':>16}",
        f"{'  records/s':<34}{'':>14}{kdi.records_per_s:>16,.0f}",
        f"{'  ratio to the raw read':<34}{'':>14}{kdi.records_per_s / raw.records_per_s:>16.0%}",
        f"{'  CPU-seconds':<34}{'':>14}{kdi.cpu_s:>16.1f}",
        f"{'  records per CPU-second':<34}{'':>14}{kdi.records_per_cpu_s:>16,.0f}",
        f"{'  files / avg MiB':<34}{'':>14}{f'{kdi.files} / {kdi.avg_file_mib:.1f}':>16}",
        f"{'  allowed_latency s (flush clock)':<34}{'':>14}{kdi.allowed_latency_s:>16}",
        f"{'ours / kafka-delta-ingest, rec/s':<34}{'':>14}{ours.records_per_s / kdi.records_per_s:>16.2f}",
        f"{'  per CPU-second':<34}{'':>14}{per_cpu(ours.records, ours.cpu_s) / kdi.records_per_cpu_s:>16.2f}",
    ]
