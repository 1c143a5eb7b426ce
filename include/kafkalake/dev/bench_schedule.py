"""Benchmark: the fixed interval (SLA / 3) against ``schedule: freshness``, on a bursty day.

    python -m kafkalake.dev.bench_schedule                       # 5 topics, a 30-minute day, SLA 3m
    python -m kafkalake.dev.bench_schedule --minutes 4 --topics 2 --rate 0.2   # a tiny smoke run

A day compressed into ``--minutes`` is replayed twice on the bench's broker, once per schedule, each
time on new topics, a fresh lake and a fresh ``airflow standalone`` (scheduler, triggerer, SQLite),
with every DAG unpaused at the start: the same records at the same moments. The topics' shapes:

- ``burst``: quiet, then bursts of many records (a batch job upstream, a sale);
- ``trickle``: a record every few seconds;
- ``quiet``: a handful of records early on, then nothing.

Topics go round these shapes (5 topics: burst, trickle, quiet, burst, trickle). After the day, each
table must hold what Kafka holds (waiting for the runs to land it). Per schedule it reports: DAG
runs, runs that started a Spark job for the ingest, JVM-seconds (the summed time of every task that
started a JVM: ingest, schema refresh, registration, table care), the records' data age at landing
(bronze's ``ingested_at`` minus ``kafka_timestamp``: median and max) and SLA misses (records that
landed older than the SLA). Results go to ``.bench/schedule/results.json``.

The day is compressed, its sizes are not: a burst of 1,000 small records is about 11 KB in bronze,
where a real day's burst is many files of the default ``file_bytes`` (128 MiB), so rule 4 of
kafkalake.config.freshness (a file's worth waits: run now) would never fire and every burst would
wait for the budget (SLA - expected run - margin). So the freshness topics' ``file_bytes`` (the
catalog field) is scaled to the day: a burst is ``--burst-files`` files' worth (its records' bytes in
bronze / burst files), said in the output and in results.json. ``--burst-files 0`` keeps the default.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from deltalake import DeltaTable

from kafkalake.config.catalog import load_catalog
from kafkalake.core.paths import REPO_ROOT
from kafkalake.dev import local_airflow, producer
from kafkalake.dev.broker import LocalKafka
from kafkalake.dev.standalone_airflow import StandaloneAirflow, free_port, wait_for
from kafkalake.kafka.offsets import end_offsets

SHAPES = ("burst", "trickle", "quiet")
#: What one of the replay's records takes in bronze, as the watcher sizes what waits (the table's bytes
#: per row): 10.3 to 12.5 in the 1,000-record commits of the 2026-12-01 23:18 run. Its JSON value alone
#: is 34 bytes; sized by that, a burst meant to be 3 files' worth was about one (docs/benchmarks.md).
BRONZE_RECORD_BYTES = 10
#: Tasks that start a Spark application (the pre-flight does not).
JVM_TASKS = ("ingest", "refresh_schema", "register_table", "maintain_table")


@dataclass(frozen=True)
class Produce:
    at_s: float
    topic: int
    count: int


def burst_records(rate: float) -> int:
    return max(1, int(2000 * rate))


def scaled_file_bytes(rate: float, burst_files: float) -> int | None:
    """The freshness topics' ``file_bytes``: a burst is ``burst_files`` files' worth, as a real
    day's burst is many; None (the catalog's default) when ``burst_files`` is 0."""
    if burst_files <= 0:
        return None
    return max(1, int(burst_records(rate) * BRONZE_RECORD_BYTES / burst_files))


def catalog_entries(
    topics: list[str], schedule: str, sla: str, file_bytes: int | None
) -> list[dict[str, Any]]:
    """The bench's catalog: bronze only, one schedule for every topic; ``file_bytes`` on freshness
    topics only (the interval refuses it)."""
    mode: str | dict[str, Any] = "interval"
    if schedule == "freshness":
        mode = "freshness" if file_bytes is None else {"mode": "freshness", "file_bytes": file_bytes}
    return [{"name": t, "freshness_sla": sla, "parsed": False, "schedule": mode} for t in topics]


def day(topics: int, seconds: float, rate: float, seed: int = 7) -> list[Produce]:
    """The records of a compressed day: (seconds from its start, topic index, records), in time order.

    ``rate`` scales every shape (records per second of a trickle; a burst holds 200 x rate x 10).
    """
    rng = random.Random(seed)
    plan: list[Produce] = []
    for index in range(topics):
        shape = SHAPES[index % len(SHAPES)]
        if shape == "burst":
            for _ in range(3):
                plan.append(Produce(rng.uniform(0.05, 0.9) * seconds, index, burst_records(rate)))
        elif shape == "trickle":
            gap = 1 / max(rate, 1e-3)
            t = rng.uniform(0, gap)
            while t < seconds:
                plan.append(Produce(t, index, 1))
                t += gap * rng.uniform(0.5, 1.5)
        else:
            plan.extend(Produce(rng.uniform(0, 0.1) * seconds, index, 1) for _ in range(3))
    return sorted(plan, key=lambda p: p.at_s)


@dataclass(frozen=True)
class Outcome:
    schedule: str
    topic: str
    shape: str
    runs: int
    ingest_runs: int
    jvm_seconds: float
    records: int
    age_median_s: float | None
    age_max_s: float | None
    sla_misses: int


def replay(plan: list[Produce], bootstrap: str, topics: list[str], started: float) -> None:
    for step in plan:
        wait = started + step.at_s - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        records = [
            producer.Record(None, json.dumps({"t": time.time(), "i": i}).encode()) for i in range(step.count)
        ]
        producer.produce(bootstrap, topics[step.topic], records)


def landed(catalog: Path, lake: Path, topics: list[str], bootstrap: str) -> bool:
    loaded = load_catalog(catalog, lake)
    for name in topics:
        held = sum(end_offsets({"bootstrap.servers": bootstrap}, name).values())
        path = loaded.topic(name).path
        if held and not (Path(path) / "_delta_log").exists():
            return False
        if held and DeltaTable(path).to_pyarrow_dataset().count_rows() < held:
            return False
    return True


def outcome(
    schedule: str, server: StandaloneAirflow, path: str, topic: str, shape: str, dag_id: str, sla_s: float
) -> Outcome:
    runs = server.query("SELECT COUNT(*) FROM dag_run WHERE dag_id = :d", d=dag_id)[0][0]
    tasks = server.query(
        "SELECT task_id, state, duration FROM task_instance WHERE dag_id = :d AND state = 'success'", d=dag_id
    )
    ingest_runs = sum(1 for task, _s, _d in tasks if task == "ingest")
    jvm_seconds = sum(float(d or 0) for task, _s, d in tasks if task in JVM_TASKS)
    ages: list[float] = []
    if (Path(path) / "_delta_log").exists():
        table = DeltaTable(path).to_pyarrow_table(columns=["kafka_timestamp", "ingested_at"]).to_pylist()
        ages = [(r["ingested_at"] - r["kafka_timestamp"]).total_seconds() for r in table]
    return Outcome(
        schedule=schedule,
        topic=topic,
        shape=shape,
        runs=int(runs),
        ingest_runs=ingest_runs,
        jvm_seconds=round(jvm_seconds, 1),
        records=len(ages),
        age_median_s=round(statistics.median(ages), 1) if ages else None,
        age_max_s=round(max(ages), 1) if ages else None,
        sla_misses=sum(1 for a in ages if a > sla_s),
    )


def run_schedule(
    schedule: str, args: argparse.Namespace, broker: LocalKafka, workdir: Path, plan: list[Produce]
) -> list[Outcome]:
    folder = workdir / schedule
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    stamp = time.strftime("%H%M%S")
    topics = [f"day-{schedule}-{stamp}-{i}" for i in range(args.topics)]
    file_bytes = scaled_file_bytes(args.rate, args.burst_files)
    entries = catalog_entries(topics, schedule, args.sla, file_bytes)
    catalog, lake = folder / "catalog.yaml", folder / "lake"
    catalog.write_text(json.dumps({"topics": entries}))
    loaded = load_catalog(catalog, lake, strict=True)
    for name in topics:
        producer.create_topic(broker.bootstrap_servers, name, 2)
    home = folder / "airflow"
    env = local_airflow.environment(
        home, kafka_bootstrap=broker.bootstrap_servers, catalog=catalog, lake_root=lake
    )
    port = free_port()
    env = local_airflow.standalone_environment(env, port=port, log_server_ports=(free_port(), free_port()))
    env["KAFKALAKE_STRICT"] = "1"
    local_airflow.init_db(env)
    server = StandaloneAirflow(f"http://127.0.0.1:{port}", home, env, folder / "airflow.log")
    dag_ids = [loaded.topic(t).dag_id for t in topics]
    server.start()
    try:
        wait_for(server.healthy, what="airflow standalone to be healthy", timeout=600, every=2)
        wait_for(lambda: server.dags_parsed(*dag_ids), what="the DAGs to be parsed", timeout=600, every=2)
        for dag_id in dag_ids:
            server.api("PATCH", f"/dags/{dag_id}", json={"is_paused": False})
        print(f"{schedule}: replaying a {args.minutes}-minute day on {len(topics)} topics", flush=True)
        if schedule == "freshness":
            print(f"freshness: {file_bytes_note(args)}", flush=True)
        replay(plan, broker.bootstrap_servers, topics, time.monotonic())
        wait_for(
            lambda: landed(catalog, lake, topics, broker.bootstrap_servers),
            what=f"{schedule}: every record to land",
            timeout=args.drain_minutes * 60,
            every=5,
        )
        sla_s = loaded.topic(topics[0]).freshness_sla.total_seconds()
        return [
            outcome(schedule, server, loaded.topic(t).path, t, SHAPES[i % len(SHAPES)], dag_ids[i], sla_s)
            for i, t in enumerate(topics)
        ]
    finally:
        server.stop()


def file_bytes_note(args: argparse.Namespace) -> str:
    size = scaled_file_bytes(args.rate, args.burst_files)
    if size is None:
        return "file_bytes is the catalog's default (128 MiB): no burst of this day is a file's worth"
    burst = burst_records(args.rate)
    return (
        f"file_bytes {size:,} (scaled to the compressed day: a burst of {burst:,} records, "
        f"about {burst * BRONZE_RECORD_BYTES:,} bytes in bronze, is {args.burst_files:g} files' worth, "
        "as a real day's burst is many files of the default 128 MiB)"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=5)
    parser.add_argument("--minutes", type=float, default=30, help="length of the compressed day")
    parser.add_argument("--sla", default="3m", help="every topic's freshness_sla")
    parser.add_argument(
        "--rate", type=float, default=0.5, help="trickle records per second; bursts scale with it"
    )
    parser.add_argument(
        "--drain-minutes", type=float, default=15, help="how long the last records may take to land"
    )
    parser.add_argument(
        "--burst-files",
        type=float,
        default=2,
        help="a burst's size in files of the freshness topics' file_bytes (0: the default 128 MiB)",
    )
    parser.add_argument("--schedules", default="interval,freshness")
    parser.add_argument("--port", type=int, default=9192)
    parser.add_argument("--dir", type=Path, default=REPO_ROOT / ".bench")
    args = parser.parse_args(argv)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    root: Path = args.dir.resolve()
    workdir = root / "schedule"
    workdir.mkdir(parents=True, exist_ok=True)
    broker = LocalKafka(root / "kafka", args.port, args.port + 1, heap="1G").start()
    plan = day(args.topics, args.minutes * 60, args.rate)
    outcomes: list[Outcome] = []
    try:
        for schedule in args.schedules.split(","):
            outcomes.extend(run_schedule(schedule, args, broker, workdir, plan))
    finally:
        broker.stop()

    header = (
        "schedule",
        "shape",
        "runs",
        "JVM runs",
        "JVM-s",
        "records",
        "age med s",
        "age max s",
        "SLA misses",
    )
    widths = (11, 9, 6, 10, 8, 9, 11, 11, 12)
    print(
        "".join(
            f"{h:<{w}}" if i < 2 else f"{h:>{w}}" for i, (h, w) in enumerate(zip(header, widths, strict=True))
        )
    )
    for o in outcomes:
        cells = (
            o.schedule,
            o.shape,
            o.runs,
            o.ingest_runs,
            round(o.jvm_seconds),
            o.records,
            o.age_median_s,
            o.age_max_s,
            o.sla_misses,
        )
        print(
            "".join(
                f"{'-' if c is None else c:<{w}}" if i < 2 else f"{'-' if c is None else c:>{w}}"
                for i, (c, w) in enumerate(zip(cells, widths, strict=True))
            )
        )
    results = {
        "args": {k: str(v) for k, v in vars(args).items()},
        "cores": os.cpu_count(),
        "freshness_file_bytes": scaled_file_bytes(args.rate, args.burst_files),
        "freshness_file_bytes_note": file_bytes_note(args),
        "topics": [asdict(o) for o in outcomes],
    }
    out = workdir / "results.json"
    out.write_text(json.dumps(results, indent=2))
    if "freshness" in args.schedules.split(","):
        print(f"freshness: {file_bytes_note(args)}")
    print(f"results written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
