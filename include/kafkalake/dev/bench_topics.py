"""Benchmark: many topics with new data, each landed by its own DAG in a real scheduler.

    python -m kafkalake.dev.bench_topics                     # 20 topics of 500 events, pool of 2
    python -m kafkalake.dev.bench_topics --topics 5 --events 2000 --pool 1 --bronze-only

On the bench's broker (``.bench/kafka``), N new topics (``many-<stamp>-NN``, so every invocation has
the same backlogs) each get ``--events`` JSON events; a fresh lake and a fresh ``airflow standalone``
(scheduler, LocalExecutor, SQLite) run their DAGs with the Spark pool at ``--pool`` slots. Two
rounds, as a day goes:

- **first round**: all N DAGs unpaused at once; each schedules its latest interval's run, which
  creates, fills and registers its tables;
- **steady round**: ``--events`` more per topic, then all N DAGs triggered at once (tables exist
  and are registered: what every later run looks like).

Per round it reports the time for all N runs to go round (the first run queued → the last run's
end, by Airflow's own timestamps), each run's own time (queued → end, and first task → end), and
the JVMs each run started (task logs with a spark-submit command). Every bronze table is read back
with delta-rs and must hold exactly what Kafka holds. Results go to ``.bench/topics/results.json``.
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

from kafkalake.airflow.pools import DEFAULT_SPARK_SLOTS, pools_set_args
from kafkalake.config.catalog import load_catalog
from kafkalake.core.paths import REPO_ROOT
from kafkalake.dev import local_airflow, producer
from kafkalake.dev.bench_backlog import event_value
from kafkalake.dev.broker import LocalKafka
from kafkalake.dev.standalone_airflow import FinishedRun, StandaloneAirflow, free_port, wait_for
from kafkalake.kafka.offsets import end_offsets


@dataclass(frozen=True)
class Round:
    name: str
    #: The first run queued → the last run's end.
    wall_s: float
    #: Each run: queued → end.
    runs_s: list[float]
    #: Each run: its first task's start → its end.
    active_s: list[float]
    #: Each run: JVMs its tasks started.
    jvms: list[int]
    #: task_id → how many runs ran it (success) / skipped it.
    task_states: dict[str, dict[str, int]]

    def line(self) -> str:
        return (
            f"{self.name:<14}{self.wall_s:>16.1f}{statistics.median(self.runs_s):>14.1f}"
            f"{max(self.runs_s):>11.1f}{statistics.median(self.active_s):>15.1f}"
            f"{sum(self.jvms):>6}{statistics.mean(self.jvms):>10.2f}"
        )


def produce(bootstrap: str, topics: list[str], events: int, start: int, rng: random.Random) -> None:
    for name in topics:
        records = [
            producer.Record(f"user-{i % 1_000}".encode(), event_value(i, rng))
            for i in range(start, start + events)
        ]
        producer.produce(bootstrap, name, records)


def jvms_started(home: Path, dag_id: str, run_id: str) -> int:
    """Task tries of the run whose log shows a spark-submit command (each one a driver JVM)."""
    logs = home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}"
    return sum("Spark-Submit cmd" in log.read_text(errors="replace") for log in logs.rglob("*.log"))


def finished_runs(
    server: StandaloneAirflow, dag_ids: list[str], after: set[str]
) -> dict[str, FinishedRun] | None:
    """Each DAG's newest run not in ``after`` once all of them are over; None while any is not."""
    found: dict[str, FinishedRun] = {}
    for dag_id in dag_ids:
        runs = server.api("GET", f"/dags/{dag_id}/dagRuns")["dag_runs"]
        fresh = [run for run in runs if run["dag_run_id"] not in after]
        if not fresh:
            return None
        newest = max(fresh, key=lambda run: run.get("queued_at") or "")
        done = server.finished_run(dag_id, newest["dag_run_id"])
        if done is None:
            return None
        found[dag_id] = done
    return found


def measure_round(name: str, server: StandaloneAirflow, home: Path, runs: dict[str, FinishedRun]) -> Round:
    failed = {dag: run.task_states for dag, run in runs.items() if run.state != "success"}
    if failed:
        raise RuntimeError(f"{name}: runs failed: {failed}\n{server.output()}")
    states: dict[str, dict[str, int]] = {}
    for run in runs.values():
        for task, state in run.task_states.items():
            states.setdefault(task, {}).setdefault(str(state), 0)
            states[task][str(state)] += 1
    return Round(
        name=name,
        wall_s=(
            max(r.end_date for r in runs.values()) - min(r.queued_at for r in runs.values())
        ).total_seconds(),
        runs_s=[r.seconds for r in runs.values()],
        active_s=[(r.end_date - r.start_date).total_seconds() for r in runs.values()],
        jvms=[jvms_started(home, dag, r.run_id) for dag, r in runs.items()],
        task_states=states,
    )


def check_tables(catalog: Path, lake: Path, topics: list[str], bootstrap: str) -> None:
    loaded = load_catalog(catalog, lake)
    for name in topics:
        held = sum(end_offsets({"bootstrap.servers": bootstrap}, name).values())
        rows = DeltaTable(loaded.topic(name).path).to_pyarrow_dataset().count_rows()
        if rows != held:
            raise RuntimeError(f"bronze of {name} holds {rows} rows, Kafka {held}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=20)
    parser.add_argument("--events", type=int, default=500, help="new events per topic per round")
    parser.add_argument(
        "--pool",
        type=int,
        default=DEFAULT_SPARK_SLOTS,
        help="slots of the Spark pool (default: its default size)",
    )
    parser.add_argument("--bronze-only", action="store_true", help="no parsed tables (default: parsed JSON)")
    parser.add_argument("--port", type=int, default=9192)
    parser.add_argument("--dir", type=Path, default=REPO_ROOT / ".bench")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds a round may take")
    args = parser.parse_args(argv)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

    root: Path = args.dir.resolve()
    workdir = root / "topics"
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    broker = LocalKafka(root / "kafka", args.port, args.port + 1, heap="1G").start()
    stamp = time.strftime("%H%M%S")
    topics = [f"many-{stamp}-{i:02d}" for i in range(1, args.topics + 1)]
    catalog, lake = workdir / "catalog.yaml", workdir / "lake"
    entries = [{"name": t, "freshness_sla": "3h", "parsed": not args.bronze_only} for t in topics]
    catalog.write_text(json.dumps({"topics": entries}))
    dag_ids = [load_catalog(catalog, lake).topic(t).dag_id for t in topics]
    rng = random.Random(7)
    for name in topics:
        producer.create_topic(broker.bootstrap_servers, name, 2)
    produce(broker.bootstrap_servers, topics, args.events, 0, rng)

    home = workdir / "airflow"
    env = local_airflow.environment(
        home, kafka_bootstrap=broker.bootstrap_servers, catalog=catalog, lake_root=lake
    )
    port = free_port()
    env = local_airflow.standalone_environment(env, port=port, log_server_ports=(free_port(), free_port()))
    local_airflow.init_db(env)
    local_airflow.run_airflow(env, *pools_set_args(args.pool))
    server = StandaloneAirflow(f"http://127.0.0.1:{port}", home, env, workdir / "airflow.log")
    server.start()
    rounds: list[Round] = []
    try:
        wait_for(server.healthy, what="airflow standalone to be healthy", timeout=600, every=2)
        wait_for(lambda: server.dags_parsed(*dag_ids), what="the DAGs to be parsed", timeout=600, every=2)
        print(f"{len(topics)} topics, {args.events} events each, pool {args.pool}: first round", flush=True)
        for dag_id in dag_ids:  # each schedules its latest interval's run
            server.api("PATCH", f"/dags/{dag_id}", json={"is_paused": False})
        first = wait_for(
            lambda: finished_runs(server, dag_ids, set()),
            what="the first round",
            timeout=args.timeout,
            every=2,
        )
        rounds.append(measure_round("first round", server, home, first))
        check_tables(catalog, lake, topics, broker.bootstrap_servers)
        print(rounds[-1].line(), flush=True)

        produce(broker.bootstrap_servers, topics, args.events, args.events, rng)
        print("steady round", flush=True)
        for dag_id in dag_ids:
            server.api("POST", f"/dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": {}})
        earlier = {run.run_id for run in first.values()}
        steady = wait_for(
            lambda: finished_runs(server, dag_ids, earlier),
            what="the steady round",
            timeout=args.timeout,
            every=2,
        )
        rounds.append(measure_round("steady round", server, home, steady))
        check_tables(catalog, lake, topics, broker.bootstrap_servers)
    finally:
        server.stop()

    print(
        f"{'':<14}{'all go round s':>16}{'run median s':>14}{'run max s':>11}{'active median s':>15}"
        f"{'JVMs':>6}{'JVMs/run':>10}"
    )
    for done in rounds:
        print(done.line())
        print(f"{'':<14}tasks: {json.dumps(done.task_states)}")
    results: dict[str, Any] = {
        "topics": args.topics,
        "events_per_topic_per_round": args.events,
        "pool": args.pool,
        "parsed": not args.bronze_only,
        "cores": os.cpu_count(),
        "rounds": [asdict(done) for done in rounds],
    }
    out = workdir / "results.json"
    out.write_text(json.dumps(results, indent=2))
    print(f"results written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
