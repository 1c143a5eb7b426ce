"""Benchmark: what a job run costs under spark-submit against the same job on a warm job host.

    python -m kafkalake.dev.bench_warm                 # 3 spark-submit and 6 hosted ingests of 500 records
    python -m kafkalake.dev.bench_warm --runs 2 --records 100

The lever for the test suite's time (issue 42, docs/benchmarks.md#the-test-suites-time): its DAG
runs start a few hundred driver JVMs. On its own broker and a fresh lake, one topic (2 partitions,
parsed, latest by key) is ingested ``--runs`` times as a DAG's task runs it without a host
(``spark-submit`` of ``jobs/ingest_topic.py``, follow-ups included, the suite's C1-only JVM
options), then ``2 x --runs`` times through a job host (:mod:`kafkalake.dev.job_host`), the same
submission handed over as the operators hand it; each run after ``--records`` new records. It
prints each run's wall time and CPU-seconds: spark-submit's process tree (launcher, driver JVM,
Python driver), or the host's (its Python, its JVM, the job's forked process, pyspark's workers).
The host's own start is printed apart.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from kafkalake.config.catalog import load_catalog
from kafkalake.core.paths import ENV_CATALOG, ENV_LAKE_ROOT
from kafkalake.dev import job_host
from kafkalake.dev.broker import SMALL_LOAD_JAVA_OPTIONS, LocalKafka
from kafkalake.dev.process_tree import children_cpu_s, tree_cpu_s
from kafkalake.dev.producer import create_topic, produce, sample_orders
from kafkalake.launch.handover import config_file
from kafkalake.launch.job_host import run_hosted, socket_path
from kafkalake.launch.spark_conf import ENV_DRIVER_JAVA_OPTIONS, SHORT_RUN_JAVA_OPTIONS
from kafkalake.launch.submit import submission

TOPIC = "bench-warm"
CATALOG = f"""\
topics:
  - name: {TOPIC}
    freshness_sla: 1h
    max_offsets_per_trigger: 500
    parsed: {{latest_by_key: true}}
"""


def cold_run(bootstrap: str) -> int:
    return subprocess.run(
        [sys.executable, "-m", "kafkalake.cli.run_job", "ingest_topic", "--topic", TOPIC,
         "--bootstrap-servers", bootstrap],
        capture_output=True, check=False,
    ).returncode  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="spark-submit runs; twice as many hosted ones")
    parser.add_argument("--records", type=int, default=500, help="new records before each run")
    args = parser.parse_args(argv)
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    # C1 only, as the test suite's jobs run (tests/integration/conftest.py).
    os.environ.setdefault(ENV_DRIVER_JAVA_OPTIONS, SHORT_RUN_JAVA_OPTIONS)
    work = Path(tempfile.mkdtemp(prefix="kafkalake-bench-warm-"))
    catalog, lake = work / "topics.yaml", work / "lake"
    catalog.write_text(CATALOG)
    os.environ[ENV_CATALOG], os.environ[ENV_LAKE_ROOT] = str(catalog), str(lake)
    broker = LocalKafka(work / "kafka", java_options=SMALL_LOAD_JAVA_OPTIONS).start()
    seed = 0
    try:
        bootstrap = broker.bootstrap_servers
        create_topic(bootstrap, TOPIC, partitions=2)

        def more() -> None:
            nonlocal seed
            seed += 1
            produce(bootstrap, TOPIC, sample_orders(args.records, seed=seed))

        for i in range(args.runs):
            more()
            cpu, started = children_cpu_s(), time.monotonic()
            code = cold_run(bootstrap)
            print(f"spark-submit {i}: exit {code}, {time.monotonic() - started:.1f} s, "
                  f"{children_cpu_s() - cpu:.1f} CPU-s", flush=True)  # fmt: skip
        started = time.monotonic()
        with job_host.running(work / "host", lake) as host:
            print(
                f"host start: {time.monotonic() - started:.1f} s, {tree_cpu_s(host.pid):.1f} CPU-s",
                flush=True,
            )
            hosted(host.pid, work, catalog, lake, bootstrap, more, 2 * args.runs)
    finally:
        broker.stop()
    return 0


def hosted(
    host: int, work: Path, catalog: Path, lake: Path, bootstrap: str, more: Callable[[], None], runs: int
) -> None:
    topic = load_catalog(catalog, lake).topic(TOPIC)
    for i in range(runs):
        more()
        cpu, started = tree_cpu_s(host), time.monotonic()
        with config_file({"bootstrap.servers": bootstrap}) as settings:
            built = submission("ingest_topic", topic, catalog=catalog, lake=lake, kafka_settings=settings)
            with (work / "hosted.log").open("a") as out:
                outcome = run_hosted(
                    str(socket_path(work / "host")), built, built.env, lambda line: print(line, file=out)
                )
        print(f"hosted {i}: {outcome}, {time.monotonic() - started:.1f} s, "
              f"{tree_cpu_s(host) - cpu:.1f} CPU-s", flush=True)  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
