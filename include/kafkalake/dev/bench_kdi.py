"""The bench's kafka-delta-ingest stage: the same backlog through a binary the user built.

kafka-delta-ingest (delta-io/kafka-delta-ingest, Rust, librdkafka + delta-rs) writes JSON records
into a Delta table whose schema must exist before it starts: it reads the table's schema and maps
each record's keys onto its columns. So the stage creates that table with delta-rs (the bench
event's fields, typed, plus the Kafka partition, offset and timestamp through kafka-delta-ingest's
own transforms: what our parsed table holds), runs the binary on a consumer group of its own, and
stops it once the table holds the whole backlog.

Why not its ``--ends_at_latest_offsets``: it stops the moment it has *consumed* the last offset of
every partition, and rows still in its buffers then are never written (the run loop returns on
the cancellation before it flushes). Its table would miss the tail. So the stage runs it as a
daemon, as it is deployed, and watches the table instead.

kafka-delta-ingest flushes a file when ``min_bytes_per_file`` is reached or every
``allowed_latency`` seconds (a clock, reset at each flush). The last file therefore waits up to that
long after the last record came in: its wall time includes that wait, and the report says the
setting. CPU-seconds are the process's own (``/proc/<pid>/stat``, every thread), read just before
it is stopped.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from deltalake import DeltaTable, Field, Schema

from kafkalake.dev.process_tree import stat_fields

#: The bench event's fields (:func:`kafkalake.dev.bench_backlog.event_value`) as typed columns, then what
#: kafka-delta-ingest's transforms add (``kafka.timestamp`` comes as microseconds).
EVENT_COLUMNS = (
    ("event_id", "string"),
    ("user_id", "string"),
    ("session", "string"),
    ("type", "string"),
    ("page", "string"),
    ("amount", "double"),
    ("currency", "string"),
    ("ua", "string"),
    ("ts", "long"),
)
KAFKA_COLUMNS = (
    ("kafka_partition", "integer", "kafka.partition"),
    ("kafka_offset", "long", "kafka.offset"),
    ("kafka_timestamp", "timestamp", "kafka.timestamp"),
)


@dataclass(frozen=True)
class KdiRun:
    records: int
    #: Distinct (partition, offset) pairs in the table: equal to ``records`` when nothing doubled.
    distinct_offsets: int
    wall_s: float
    #: Process start → its first Delta commit.
    first_commit_s: float
    cpu_s: float
    files: int
    avg_file_mib: float
    allowed_latency_s: int

    @property
    def records_per_s(self) -> float:
        return self.records / self.wall_s

    @property
    def records_per_cpu_s(self) -> float:
        return self.records / self.cpu_s


def create_table(path: Path) -> None:
    """The empty table kafka-delta-ingest writes into (it needs the schema up front)."""
    fields = [Field(name, kind, nullable=True) for name, kind in EVENT_COLUMNS]
    fields += [Field(name, kind, nullable=True) for name, kind, _source in KAFKA_COLUMNS]
    DeltaTable.create(str(path), schema=Schema(fields), name="kdi_bench")


def command(binary: Path, bootstrap: str, topic: str, table: Path, allowed_latency: int) -> list[str]:
    transforms = [f"{name}: {source}" for name, _kind, source in KAFKA_COLUMNS]
    return [
        str(binary),
        "ingest",
        topic,
        str(table),
        "--kafka",
        bootstrap,
        # A group of its own each run: kafka-delta-ingest keeps its offsets in the table's log, a
        # fresh table starts from the earliest offset.
        "--consumer_group",
        f"kafkalake-bench-kdi-{uuid.uuid4().hex[:8]}",
        "--app_id",
        "kafkalake-bench",
        "--auto_offset_reset",
        "earliest",
        "--allowed_latency",
        str(allowed_latency),
        *[arg for t in transforms for arg in ("--transform", t)],
    ]


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process, all its threads, from ``/proc/<pid>/stat``."""
    _, fields = stat_fields(pid)
    utime, stime = int(fields[11]), int(fields[12])
    return (utime + stime) / os.sysconf("SC_CLK_TCK")


def _table_state(table: Path) -> tuple[int, int, int, int]:
    """Rows, version, data files and their bytes, from the table's log."""
    dt = DeltaTable(str(table))
    adds = dt.get_add_actions(flatten=True)
    rows = sum(int(n) for n in adds.column("num_records").to_pylist()) if len(adds) else 0
    size = sum(int(n) for n in adds.column("size_bytes").to_pylist()) if len(adds) else 0
    return rows, dt.version(), len(adds), size


def _distinct_offsets(table: Path) -> int:
    rows = DeltaTable(str(table)).to_pyarrow_table(columns=["kafka_partition", "kafka_offset"])
    return len(rows.group_by(["kafka_partition", "kafka_offset"]).aggregate([]))


def run(
    binary: Path,
    bootstrap: str,
    topic: str,
    events: int,
    workdir: Path,
    *,
    allowed_latency: int = 5,
    timeout: float = 1800,
) -> KdiRun:
    """Drain the backlog into a fresh table with kafka-delta-ingest; stop it once all is there."""
    if not os.access(binary, os.X_OK):
        raise FileNotFoundError(f"--with-kdi: {binary} is not an executable file")
    table = workdir / "lake-kdi" / "events"
    shutil.rmtree(table.parent, ignore_errors=True)
    create_table(table)
    log = workdir / "kdi.log"
    env = {**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "info")}
    started = time.monotonic()
    first_commit = None
    with log.open("wb") as out:
        process = subprocess.Popen(
            command(binary, bootstrap, topic, table, allowed_latency),
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            rows = version = 0
            while rows < events:
                if process.poll() is not None:
                    raise RuntimeError(
                        f"kafka-delta-ingest exited {process.returncode} with {rows:,} of {events:,} rows "
                        f"written; its log: {log}"
                    )
                if time.monotonic() - started > timeout:
                    raise TimeoutError(
                        f"kafka-delta-ingest wrote {rows:,} of {events:,} rows in {timeout:.0f}s"
                    )
                time.sleep(0.2)
                rows, version, _files, _size = _table_state(table)
                if first_commit is None and version > 0:
                    first_commit = time.monotonic() - started
            wall = time.monotonic() - started
            cpu = cpu_seconds(process.pid)
        finally:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
    rows, _version, files, size = _table_state(table)
    return KdiRun(
        records=rows,
        distinct_offsets=_distinct_offsets(table),
        wall_s=wall,
        first_commit_s=first_commit if first_commit is not None else wall,
        cpu_s=cpu,
        files=files,
        avg_file_mib=size / (1024 * 1024) / max(1, files),
        allowed_latency_s=allowed_latency,
    )
