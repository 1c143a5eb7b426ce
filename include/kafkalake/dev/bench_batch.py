"""Benchmark: what one ingest run of a small parsed topic costs a warm Spark session.

    python -m kafkalake.dev.bench_batch                       # 10 runs of 1,000 records each
    python -m kafkalake.dev.bench_batch --runs 12 --conf spark.sql.shuffle.partitions=1
    KAFKALAKE_DRIVER_JAVA_OPTIONS="-XX:+UseSerialGC" python -m kafkalake.dev.bench_batch

What the test suite's in-process tests are made of (docs/benchmarks.md#the-test-suites-time), and
a small production run's floor: on its own broker and lake, one session with the jobs' settings
(:func:`kafkalake.launch.spark_conf.base_conf`, the driver options of
``KAFKALAKE_DRIVER_JAVA_OPTIONS``, then ``--conf``) lands ``--runs`` new topics of ``--records``
JSON records each (2 partitions, parsed, a latest-row table), one :class:`IngestRun` each, as the
ingest job runs it. It prints each run's wall time, the session JVM's CPU-seconds and its Spark
jobs and tasks, then the median and the sum over the runs after ``--warm-up``.

Compare settings in interleaved invocations (A B A B): two invocations of the same settings differ
by up to ~10%, as much as most single settings buy.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kafkalake.config.parsed import ParsedConfig
from kafkalake.dev.broker import SMALL_LOAD_JAVA_OPTIONS, LocalKafka
from kafkalake.dev.in_process import lake_topic, local_session
from kafkalake.dev.process_tree import tree_cpu_s
from kafkalake.dev.producer import Record, create_topic, produce
from kafkalake.launch.jars import jar_files
from kafkalake.launch.spark_conf import base_conf
from kafkalake.spark.ingest_run import IngestRun


@dataclass(frozen=True)
class RunFigures:
    wall_s: float
    jvm_cpu_s: float
    jobs: int | None
    tasks: int | None


def settings(pairs: Sequence[str]) -> dict[str, str]:
    """``--conf`` values (``key=value``) as settings; a pair without ``=`` or a key is refused."""
    conf = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--conf {pair!r}: expected key=value, e.g. spark.sql.shuffle.partitions=1")
        conf[key.strip()] = value
    return conf


def summary(runs: Sequence[RunFigures], warm_up: int) -> str:
    """The median and sum of the JVM's CPU-seconds and the median wall time after ``warm_up`` runs."""
    counted = runs[warm_up:]
    if not counted:
        return f"no run after the {warm_up} warm-up run(s): ask for more --runs"
    cpu = [r.jvm_cpu_s for r in counted]
    wall = [r.wall_s for r in counted]
    return (
        f"runs {warm_up + 1}-{len(runs)}: JVM CPU-s median {statistics.median(cpu):.2f}, "
        f"sum {sum(cpu):.1f}; wall median {statistics.median(wall):.2f} s"
    )


def records(count: int) -> list[Record]:
    """JSON values over 50 keys (a latest-row table keeps one row per key), both partitions."""
    return [
        Record(f"k{i % 50}".encode(), json.dumps({"id": i, "amount": i, "cur": "EUR"}).encode(), i % 2)
        for i in range(count)
    ]


class JobCounter:
    """Spark jobs and their tasks since the last call, from the application's status store (a
    Spark-private API: None where it moved)."""

    def __init__(self, spark: Any) -> None:
        self.context = spark.sparkContext
        self.seen = self._jobs() or {}

    def _jobs(self) -> dict[int, int] | None:
        try:
            convert = self.context._jvm.scala.jdk.javaapi.CollectionConverters
            listed = convert.asJava(self.context._jsc.sc().statusStore().jobsList(None))
            return {int(job.jobId()): int(job.numTasks()) for job in listed}
        except Exception:
            return None

    def since(self) -> tuple[int | None, int | None]:
        jobs = self._jobs()
        if jobs is None:
            return None, None
        new = {job: tasks for job, tasks in jobs.items() if job not in self.seen}
        self.seen = jobs
        return len(new), sum(new.values())


def session(lake: Path, extra: dict[str, str]) -> Any:
    conf = {**base_conf(lake), "spark.jars": ",".join(str(p) for p in jar_files("spark")), **extra}
    return local_session("kafkalake-bench-batch", conf)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="topics, one ingest run each")
    parser.add_argument("--records", type=int, default=1_000, help="records of each topic")
    parser.add_argument("--warm-up", type=int, default=2, help="first runs left out of the summary")
    parser.add_argument("--conf", action="append", default=[], help="a Spark setting, key=value")
    args = parser.parse_args(argv)
    try:
        extra = settings(args.conf)
    except ValueError as err:
        parser.error(str(err))
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    work = Path(tempfile.mkdtemp(prefix="kafkalake-bench-batch-"))
    broker = LocalKafka(work / "kafka", java_options=SMALL_LOAD_JAVA_OPTIONS).start()
    try:
        bootstrap = broker.bootstrap_servers
        spark = session(work / "lake", extra)
        jvm = spark.sparkContext._gateway.proc.pid
        counter = JobCounter(spark)
        runs = []
        for i in range(args.runs):
            name = f"bench-batch-{i}"
            create_topic(bootstrap, name, partitions=2)
            produce(bootstrap, name, records(args.records))
            topic = lake_topic(work / "lake", name, ParsedConfig(latest_by_key=True))
            cpu, started = tree_cpu_s(jvm), time.monotonic()
            run = IngestRun(spark, topic, {"bootstrap.servers": bootstrap})
            if (failure := run.land()) is not None:
                raise SystemExit(f"run {i} failed: {failure}")
            jobs, tasks = counter.since()
            runs.append(RunFigures(time.monotonic() - started, tree_cpu_s(jvm) - cpu, jobs, tasks))
            print(f"run {i}: {runs[-1].wall_s:.1f} s, JVM {runs[-1].jvm_cpu_s:.2f} CPU-s, "
                  f"{jobs} jobs, {tasks} tasks", flush=True)  # fmt: skip
        print(summary(runs, args.warm_up), flush=True)
        spark.stop()
    finally:
        broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
