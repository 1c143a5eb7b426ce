"""Reading tables back with an independent reader (delta-rs), Kafka's own view of a topic, and one
ingest run in the test session's SparkSession."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import threading
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from deltalake import DeltaTable

from kafkalake.config.topic import TopicConfig
from kafkalake.dev.in_process import lake_topic as make_topic  # noqa: F401 (the tests' name for it)
from kafkalake.dev.producer import Record, client_settings
from kafkalake.kafka.offsets import end_offsets
from kafkalake.lake.latest_order import newest_spots  # noqa: F401 (the tests' oracle)
from kafkalake.lake.run_history import RunRecord
from kafkalake.launch import jobs
from kafkalake.launch.job_host import (
    JOB_HOST_CMD,
    host_address,
    project_variables,
    run_hosted,
    why_not_hosted,
)
from kafkalake.spark.batch_writer import BatchWriter
from kafkalake.spark.ingest_run import IngestRun

Spot = tuple[int, int]


def offsets_read_by_runs(runs: list[RunRecord]) -> Counter[tuple[str, int, int]]:
    """Every (topic, partition, offset) the history's rows say were read, counted."""
    read: Counter[tuple[str, int, int]] = Counter()
    for run in runs:
        for topic, parts in json.loads(run.offsets_read).items():
            for partition, (start, end) in parts.items():
                read.update((topic, int(partition), offset) for offset in range(start, end))
    return read


def table_version(path: Path) -> int:
    return DeltaTable(str(path)).version()


def started_a_job(output: str) -> bool:
    """Whether a DAG run's output shows a Spark job started: by spark-submit or on a job host."""
    return "Spark-Submit cmd" in output or JOB_HOST_CMD in output


def run_to_end(
    job: str,
    topic_name: str,
    *,
    catalog: Path,
    lake: Path,
    env: Mapping[str, str],
    extra_args: Sequence[str] = (),
    short_run: bool = False,
    timeout: float = 600,
) -> subprocess.CompletedProcess[str]:
    """A job that no test kills or watches, run to its end as an operator runs it: on this worker's
    job host (``env`` names it) when the host takes it, else by ``spark-submit``; ``env``: the job's
    whole environment (``jobs.environment`` and what the test adds). ``stdout``: what the job said
    (spark-submit's standard output: the Python driver's output and error); ``stderr``: the JVM's
    own log under spark-submit, empty on the host (whose lines are all in ``stdout``).

    What the host will not run (a kill point, another JVM extension setting, a cluster: the
    rules of ``launch/job_host.why_not_hosted``) goes to spark-submit, as in a DAG run."""
    built = jobs.topic_submission(
        job, topic_name, catalog=catalog, lake=lake, extra_args=extra_args, short_run=short_run
    )
    master = jobs.LOCAL_MASTER
    address = host_address(env)
    hosted_env = project_variables({**built.env, **env})
    if address is not None and not why_not_hosted(built, master, env=hosted_env):
        said: list[str] = []
        outcome = run_hosted(address, built, hosted_env, said.append, silence_timeout=timeout)
        if isinstance(outcome, int):
            ran = [JOB_HOST_CMD, address, str(built.application), *built.application_args]
            return subprocess.CompletedProcess(
                ran, outcome, stdout="".join(f"{ln}\n" for ln in said), stderr=""
            )
    return subprocess.run(built.command(master), env=env, capture_output=True, text=True, timeout=timeout)


def ran_on_job_host(done: subprocess.CompletedProcess[str]) -> bool:
    """Whether :func:`run_to_end`'s job ran on the job host (else by spark-submit)."""
    return bool(done.args) and done.args[0] == JOB_HOST_CMD


def read_rows(path: Path) -> list[dict[str, Any]]:
    return DeltaTable(str(path)).to_pyarrow_table().to_pylist()


def assert_exactly_once(rows: list[dict[str, Any]], topic: str, bootstrap: str | Mapping[str, str]) -> None:
    """Every offset Kafka holds for the topic is in the table once: no duplicate, no gap.

    ``bootstrap``: the brokers, or the whole client settings of a secured cluster.
    """
    spots = Counter((r["partition"], r["offset"]) for r in rows if r["topic"] == topic)
    duplicates = {spot: n for spot, n in spots.items() if n > 1}
    assert not duplicates, f"{len(duplicates)} offsets landed more than once, e.g. {list(duplicates)[:5]}"
    expected = {
        (p, o) for p, end in end_offsets(client_settings(bootstrap), topic).items() for o in range(end)
    }
    missing = expected - set(spots)
    assert not missing, f"{len(missing)} offsets missing, e.g. {sorted(missing)[:5]}"
    assert set(spots) == expected
    assert len(rows) == len(expected)


def kafka_spots(rows: list[dict[str, Any]]) -> list[tuple[Any, int, int, Any]]:
    """(key, partition, offset, timestamp) of parsed rows, from their ``_kafka`` column."""
    return [(k["key"], k["partition"], k["offset"], k["timestamp"]) for k in (r["_kafka"] for r in rows)]


def headers_of(row: dict[str, Any]) -> list[tuple[str, bytes | None]]:
    return [(h["key"], h["value"]) for h in row["headers"] or []]


def assert_contents(rows: list[dict[str, Any]], produced: dict[Spot, Record]) -> None:
    """Key, value and headers of every produced record come back byte for byte."""
    by_spot = {(r["partition"], r["offset"]): r for r in rows}
    for spot, record in produced.items():
        row = by_spot[spot]
        assert row["key"] == record.key, f"key at {spot}"
        assert row["value"] == record.value, f"value at {spot}"
        assert headers_of(row) == list(record.headers), f"headers at {spot}"


#: Spark's own defaults for compiling expressions and whole stages. The suite's Spark JVMs interpret
#: them (tests/integration/conftest.py, INTERPRETED); a module that tests generated code sets these.
COMPILED = {"spark.sql.codegen.factoryMode": "FALLBACK", "spark.sql.codegen.wholeStage": "true"}


@contextlib.contextmanager
def session_settings(spark: Any, settings: Mapping[str, str]) -> Iterator[None]:
    """The shared session with ``settings`` for the block, then each as it was before (set or not)."""
    before = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def run_ingest(spark: Any, topic: TopicConfig, bootstrap: str, topic_id: str | None = None) -> BatchWriter:
    """One availableNow run of the topic's stream: the ingest job's own run, in the tests' session.

    Raises what stopped the run; a parsed side that could not catch up from bronze raises why.
    """
    run = IngestRun(spark, topic, {"bootstrap.servers": bootstrap}, topic_id=topic_id)
    if run.land() is not None:
        assert run.catch_up_error is not None
        raise run.catch_up_error
    return run.writer


class StatsdReceiver:
    """A StatsD server for one test module: a UDP socket on loopback that keeps what it receives."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        # Airflow sends its own metrics too: room for a whole DAG run's worth between two reads.
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.setblocking(False)
        self.port: int = self.sock.getsockname()[1]

    def drain(self) -> list[str]:
        """Every metric line received since the last call (``name:value|type``)."""
        lines = []
        while True:
            try:
                data = self.sock.recv(65536)
            except BlockingIOError:
                return lines
            lines += data.decode().splitlines()

    def close(self) -> None:
        self.sock.close()


def metric_values(lines: list[str], prefix: str) -> dict[tuple[str, str], float]:
    """``{(name without prefix, type): last value}`` of the lines whose name starts with ``prefix``."""
    values = {}
    for line in lines:
        name, _, rest = line.partition(":")
        if name.startswith(prefix):
            value, _, kind = rest.partition("|")
            values[(name[len(prefix) :], kind)] = float(value)
    return values


class PsWatcher:
    """Every command line on the machine, sampled while a run goes on (what `ps` shows anyone)."""

    def __init__(self) -> None:
        self.lines: set[str] = set()
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            out = subprocess.run(["ps", "-eww", "-o", "args="], capture_output=True, text=True, check=False)
            self.lines.update(out.stdout.splitlines())
            self.samples += 1
            self._stop.wait(0.3)

    def __enter__(self) -> PsWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def files_containing(root: Path, needle: str) -> list[Path]:
    found = []
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            try:
                if needle.encode() in path.read_bytes():
                    found.append(path)
            except OSError:
                continue
    return found
