"""Seeded soak: SIGKILL real DAG runs at random moments, then count every offset in every table.

    python -m kafkalake.dev.soak                      # 25 kills, seed 1, at most 45 minutes
    python -m kafkalake.dev.soak --kills 5 --seed 7 --max-minutes 10

On its own broker (``.soak/kafka``, port 9292) and lake, one parsed topic with a latest-row table
and small micro-batches. Each round produces a seeded number of records (some not JSON), starts the
topic's DAG with ``airflow dags test`` (pre-flight, ingest, schema refresh, registration: a real DAG
run on a real broker) and, at a seeded random moment, SIGKILLs the whole process group: the Airflow
process and the Spark job under it, as a lost worker or the OOM killer would. A run that ends
before its moment counts as a run, not a kill. The first run goes to its end, and its length
bounds the moments, so kills land in every task. Rounds go on until the kills are done or time is up;
then one clean run, and the check: every offset Kafka holds is in bronze once, in the parsed table
or the dead letters once, and each key's newest parsed record (in the latest table's own order:
:mod:`kafkalake.lake.latest_order`, by offset within a partition, by record timestamp across) is in
the latest table. It prints the kills, runs, rows, lost and duplicated, and exits non-zero unless
every count of harm is 0. The suite runs a short one (``tests/integration/test_soak.py``, its
``KILLS`` kills on the shared broker: :func:`soak`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from deltalake import DeltaTable

from kafkalake.config.catalog import load_catalog
from kafkalake.config.topic import TopicConfig
from kafkalake.core.paths import REPO_ROOT
from kafkalake.dev import airflow_forkserver, local_airflow, producer
from kafkalake.dev.broker import LocalKafka
from kafkalake.dev.producer import Record
from kafkalake.kafka.offsets import end_offsets
from kafkalake.lake.latest_order import newest_spots
from kafkalake.launch.job_host import ENV_JOB_HOST

TOPIC = "soak"
PARTITIONS = 3


@dataclass
class Soak:
    seed: int
    kills: int = 0
    runs: int = 0
    #: Runs that ended by themselves but not well (a kill must never stop a topic for good).
    failed_runs: int = 0
    produced: int = 0
    #: Seconds into each killed run at which it was killed.
    killed_at_s: list[float] = field(default_factory=list)
    rows: int = 0
    lost: int = 0
    duplicated: int = 0
    parsed_side_mismatch: int = 0
    latest_mismatch: int = 0
    seconds: float = 0.0

    @property
    def clean(self) -> bool:
        return not (self.lost or self.duplicated or self.parsed_side_mismatch or self.latest_mismatch)


def catalog_text(topic_name: str = TOPIC) -> str:
    return json.dumps(
        {
            "topics": [
                {
                    "name": topic_name,
                    "freshness_sla": "1h",
                    "max_offsets_per_trigger": 150,
                    "parsed": {"latest_by_key": True},
                }
            ]
        }
    )


def records(rng: random.Random, start: int, count: int) -> list[Record]:
    """JSON events on 29 keys; about one in 40 is not JSON (a dead letter)."""
    return [
        Record(
            f"k{rng.randrange(29)}".encode(),
            b"{broken" if rng.random() < 0.025 else json.dumps({"n": i, "v": rng.random()}).encode(),
            i % PARTITIONS,
        )
        for i in range(start, start + count)
    ]


def dag_run(
    env: dict[str, str], dag_id: str, kill_after: float | None, log: Path
) -> tuple[float | None, int]:
    """One ``airflow dags test`` in a process group of its own (through ``env``'s fork server when
    it has one); killed (the whole group) after ``kill_after`` s unless done by then.

    Returns the moment it was killed (None when it ended by itself) and its exit code.
    """
    args = local_airflow.dags_test_args(dag_id)
    started = time.monotonic()
    run = local_airflow.start_airflow(local_airflow.dags_test_environment(env), *args, output=log)
    try:
        return None, run.wait(timeout=kill_after if kill_after is not None else 900)
    except subprocess.TimeoutExpired:
        os.killpg(run.pid, signal.SIGKILL)
        return time.monotonic() - started, run.wait(timeout=60)


def check(topic: TopicConfig, bootstrap: str, soak: Soak) -> None:
    def rows(path: str) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = DeltaTable(path).to_pyarrow_table().to_pylist()
        return found

    bronze = rows(topic.path)
    spots = Counter((r["partition"], r["offset"]) for r in bronze)
    expected = {
        (p, o)
        for p, end in end_offsets({"bootstrap.servers": bootstrap}, topic.name).items()
        for o in range(end)
    }
    soak.rows = len(bronze)
    soak.duplicated = sum(n - 1 for n in spots.values() if n > 1)
    soak.lost = len(expected - set(spots))
    parsed = rows(topic.parsed_path)
    both = Counter((r["_kafka"]["partition"], r["_kafka"]["offset"]) for r in parsed)
    both.update((r["partition"], r["offset"]) for r in rows(topic.dead_letter_path))
    soak.parsed_side_mismatch = len(set(both) ^ expected) + sum(n - 1 for n in both.values() if n > 1)
    newest = newest_spots(
        (m["key"], m["partition"], m["offset"], m["timestamp"]) for m in (r["_kafka"] for r in parsed)
    )
    latest = {
        r["_kafka"]["key"]: (r["_kafka"]["partition"], r["_kafka"]["offset"]) for r in rows(topic.latest_path)
    }
    soak.latest_mismatch = len(set(latest.items()) ^ set(newest.items()))


def soak(
    bootstrap: str,
    workdir: Path,
    *,
    kills: int,
    seed: int,
    max_minutes: float,
    topic_name: str = TOPIC,
    log_line: Any = print,
    job_host: str | None = None,
) -> Soak:
    """Kill DAG runs of a new topic ``topic_name`` on the broker at ``bootstrap`` until ``kills``
    (or ``max_minutes``), then run it to its end and count: the :class:`Soak`.

    ``job_host``: a job host's address (:mod:`kafkalake.dev.job_host`) for the final run's jobs,
    which nobody kills; every other run's jobs are spark-submits under the DAG run's process."""
    rng = random.Random(seed)
    result = Soak(seed=seed)
    for stale in ("lake", "airflow"):
        shutil.rmtree(workdir / stale, ignore_errors=True)
    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / "dag-runs.log"
    log.write_text("")
    started = time.monotonic()
    stack = contextlib.ExitStack()
    try:
        catalog = workdir / "catalog.yaml"
        catalog.write_text(catalog_text(topic_name))
        lake = workdir / "lake"
        topic = load_catalog(catalog, lake).topic(topic_name)
        producer.create_topic(bootstrap, topic_name, partitions=PARTITIONS)
        env = local_airflow.environment(
            workdir / "airflow", kafka_bootstrap=bootstrap, catalog=catalog, lake_root=lake
        )
        # The kills are of whole DAG runs, spark-submit's processes among them: never a job host's
        # (which a kill under it ends).
        env.pop(ENV_JOB_HOST, None)
        # Every Airflow command goes through a fork server that imports Airflow once; the runs it
        # may kill are children in process groups of their own (dag_run).
        server = airflow_forkserver.AirflowForkServer(env).start()
        stack.callback(server.stop)
        served = {**env, airflow_forkserver.ENV_FORKSERVER: server.socket}
        local_airflow.init_db(served)
        local_airflow.sync_dags(served)
        # A first run to its end learns how long a run lasts, so that the kills fall anywhere in
        # one (the tasks after the ingest too), not only in its first minute.
        batch = records(rng, result.produced, rng.randrange(50, 700))
        producer.produce(bootstrap, topic_name, batch)
        result.produced += len(batch)
        begun = time.monotonic()
        killed, code = dag_run(served, topic.dag_id, None, log)
        result.runs += 1
        if code != 0:
            raise RuntimeError(f"the first DAG run failed (exit {code}); see {log}")
        typical = time.monotonic() - begun
        log_line(f"run 1: ended by itself in {typical:.1f}s; kills fall in the first {typical:.0f}s of a run")
        while result.kills < kills and time.monotonic() - started < max_minutes * 60:
            batch = records(rng, result.produced, rng.randrange(50, 700))
            producer.produce(bootstrap, topic_name, batch)
            result.produced += len(batch)
            moment = rng.uniform(1.0, typical)
            begun = time.monotonic()
            killed, code = dag_run(served, topic.dag_id, moment, log)
            result.runs += 1
            if killed is None:
                # The latest length, not the longest: a run slowed by a busy machine must not
                # make every later moment fall after the run's end.
                typical = time.monotonic() - begun
                result.failed_runs += code != 0
            else:
                result.kills += 1
                result.killed_at_s.append(round(killed, 1))
            log_line(
                f"run {result.runs}: "
                + (f"killed at {killed:.1f}s" if killed else f"ended by itself, exit {code}")
            )
        # The last word: one run to its end (a leftover lock or half-written batch must not stop it).
        final = served if job_host is None else {**served, ENV_JOB_HOST: job_host}
        _, code = dag_run(final, topic.dag_id, None, log)
        result.runs += 1
        if code != 0:
            raise RuntimeError(f"the final DAG run failed (exit {code}); see {log}")
        check(topic, bootstrap, result)
    finally:
        stack.close()
        result.seconds = round(time.monotonic() - started, 1)
    return result


def summary(result: Soak, log: Path) -> str:
    return (
        f"soak seed {result.seed}: {result.kills} kills in {result.runs} DAG runs "
        f"({result.failed_runs} failed by themselves), {result.produced:,} records produced, "
        f"{result.rows:,} rows in bronze, {result.lost} lost, {result.duplicated} duplicated, "
        f"{result.parsed_side_mismatch} parsed-side and {result.latest_mismatch} latest-table mismatches, "
        f"{result.seconds:.0f} s (DAG run log: {log})"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=25)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--max-minutes", type=float, default=45.0, help="stop killing after this long")
    parser.add_argument("--port", type=int, default=9292)
    parser.add_argument("--dir", type=Path, default=REPO_ROOT / ".soak")
    args = parser.parse_args(argv)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    workdir: Path = args.dir.resolve()
    shutil.rmtree(workdir / "kafka", ignore_errors=True)
    broker = LocalKafka(workdir / "kafka", args.port, args.port + 1).start()
    try:
        result = soak(
            broker.bootstrap_servers,
            workdir,
            kills=args.kills,
            seed=args.seed,
            max_minutes=args.max_minutes,
            log_line=lambda line: print(line, flush=True),
        )
    finally:
        broker.stop()
    print(json.dumps(asdict(result), indent=2))
    print(summary(result, workdir / "dag-runs.log"))
    return 0 if result.clean and result.kills >= args.kills else 1


if __name__ == "__main__":
    sys.exit(main())
