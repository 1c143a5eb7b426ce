"""Benchmark: drain a Kafka backlog into bronze, against the raw read rate measured in the same run.

    make bench                       # 2,000,000 events of ~300 bytes over 6 partitions
    python -m kafkalake.dev.bench --events 200000 --out bench.json
    python -m kafkalake.dev.bench --parsed --jvm-extension off   # without kafkalake's JVM extension
    python -m kafkalake.dev.bench --format avro --skip-idle      # the parsed path on Avro vs on JSON
    python -m kafkalake.dev.bench --format protobuf --skip-idle  # ... on Protobuf vs on JSON

Everything runs on the local broker (``.bench/kafka``, port 9192 by default). The backlog is
produced once and reused by later runs with the same size; the bronze table is rebuilt each run.
Figures:

- raw read: a plain confluent-kafka consumer reads the whole backlog in batches and discards it;
- bronze drain: the real ingest job (``spark-submit jobs/ingest_topic.py``), wall time split into
  start-up (process start → first micro-batch planned in the checkpoint) and processing, peak RSS
  of the driver JVM and of the Python driver (``VmHWM`` from /proc), files written;
- formats (``--format avro | protobuf``): the same events in that format through a schema registry,
  drained with the parsed tables beside the JSON drain (:mod:`kafkalake.dev.bench_formats`),
  records/s of both;
- compaction: the topic's table care job (``jobs/maintain_table.py --force``: OPTIMIZE, VACUUM),
  its wall time and the files left;
- parked (``--parked``, with ``--parsed``): the cost of the parsed side failing, on a lake of its
  own. A first run whose parsed side fails on every batch (an expectation that fails every record):
  bronze lands everything and the parsed side parks; then, with the cause fixed, a run with nothing
  new in Kafka that catches the parsed tables up from bronze. Both runs' wall time against the
  healthy drain's, and the parsed + dead-letter rows checked against the backlog;
- idle run: the topic's DAG with nothing new, as a scheduler runs it: ``airflow standalone`` on
  the bench's lake, five runs triggered one after the other (as "Trigger DAG" does), each timed
  from queued to its last task's end by Airflow's own timestamps; the median is reported, with
  whether any task launched a JVM (``spark-submit``). The first run after unpausing is not timed.

The drain's and the compaction's job logs are kept beside the results (``drain.log``,
``optimize.log``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from deltalake import DeltaTable

from kafkalake.config.catalog import load_catalog
from kafkalake.config.tables import topic_tables
from kafkalake.config.topic import TopicConfig
from kafkalake.core.errors import EXIT_CODES, Kind
from kafkalake.core.paths import REPO_ROOT
from kafkalake.dev import bench_formats, bench_kdi, local_airflow, process_tree
from kafkalake.dev.bench_backlog import ensure_backlog, raw_read
from kafkalake.dev.bench_results import MIB, Compaction, Drain, IdleRun, Parked, report
from kafkalake.dev.broker import LocalKafka
from kafkalake.dev.schema_registry import LocalRegistry
from kafkalake.dev.standalone_airflow import StandaloneAirflow, free_port, wait_for
from kafkalake.launch import jobs, jvm_extension
from kafkalake.launch.handover import ENV_CLIENT_CONFIG_FILE, ENV_KEEP_CLIENT_CONFIG_FILE
from kafkalake.launch.spark_conf import is_short_run


def drain(
    topic: TopicConfig,
    catalog: Path,
    lake: Path,
    settings: Path,
    payload_bytes: int,
    log: Path,
    *,
    fresh: bool = True,
    exit_code: int = 0,
    short_run: bool = False,
    extra_env: dict[str, str] | None = None,
) -> Drain:
    """Run the ingest job on the whole backlog, watching its processes and its checkpoint.

    Args:
        payload_bytes: the backlog's keys and values in bytes (from the raw read), for MiB/s.
        fresh: start from an empty bronze table (else: go on from what the table holds).
        exit_code: the job's expected exit code (a parked parsed side ends the run with its kind).
        short_run: start the driver with the quick compiler, as a DAG run does for a short run.
        extra_env: more of the job's environment (the registry's settings file).
    """
    if fresh:
        # Every table of the topic: a parsed table left from an earlier run holds the offsets, and
        # the job (rightly) parses nothing it already holds.
        for table in topic_tables(topic):
            shutil.rmtree(table.location, ignore_errors=True)
        shutil.rmtree(topic.gaps_path, ignore_errors=True)
    cmd = jobs.command("ingest_topic", topic.name, catalog=catalog, lake=lake, short_run=short_run)
    # Keep the bench's own settings file: the job would delete it after reading (no secrets here).
    env = {
        **jobs.environment(catalog, lake),
        ENV_CLIENT_CONFIG_FILE: str(settings),
        ENV_KEEP_CLIENT_CONFIG_FILE: "1",
        **(extra_env or {}),
    }
    first_batch = Path(topic.checkpoint_path) / "offsets" / "0"
    peaks = {"java": 0.0, "python": 0.0}
    started = time.monotonic()
    startup = None
    cpu_before = process_tree.children_cpu_s()
    with log.open("wb") as out:
        process = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
        while process.poll() is None:
            for pid in process_tree.tree(process.pid):
                seen = process_tree.peak_rss_mib(pid)
                if seen is not None and seen[0] in peaks:
                    peaks[seen[0]] = max(peaks[seen[0]], seen[1])
            if startup is None and first_batch.exists():
                startup = time.monotonic() - started
            time.sleep(0.1)
    wall = time.monotonic() - started
    cpu = process_tree.children_cpu_s() - cpu_before
    if process.returncode != exit_code:
        raise RuntimeError(f"ingest job exited {process.returncode}, not {exit_code}:\n{_tail(log)}")
    rows, files_bytes, adds = _files(topic.path)
    batches = len([p for p in (Path(topic.checkpoint_path) / "commits").glob("[0-9]*")])
    return Drain(
        records=rows,
        bytes=payload_bytes,
        wall_s=wall,
        startup_s=startup if startup is not None else wall,
        batches=batches,
        driver_jvm_peak_rss_mib=peaks["java"],
        python_driver_peak_rss_mib=peaks["python"],
        files=adds,
        avg_file_mib=files_bytes / MIB / max(1, adds),
        cpu_s=cpu,
    )


def registry_drain(
    entry: dict[str, Any],
    workdir: Path,
    bootstrap: str,
    settings: Path,
    events: int,
    partitions: int,
    short: bool,
    fmt: str,
) -> tuple[Drain, int]:
    """The same events in ``fmt`` (avro, protobuf) through a registry, drained with the parsed
    tables (``--format``); the drain and its parsed rows."""
    registry = LocalRegistry(workdir / "registry").start()
    try:
        name = f"bench-{fmt}-{events}-p{partitions}"
        bench_formats.ensure_registry_backlog(bootstrap, registry.url, name, events, partitions, fmt)
        lake = workdir / f"lake-{fmt}"
        catalog = workdir / f"catalog-{fmt}.yaml"
        catalog.write_text(json.dumps({"topics": [bench_formats.registry_entry(entry, name, fmt)]}))
        topic = load_catalog(catalog, lake).topic(name)
        payload = raw_read(bootstrap, name).bytes
        env = bench_formats.registry_handover(workdir, registry.url)
        framed = drain(
            topic,
            catalog,
            lake,
            settings,
            payload,
            workdir / f"drain-{fmt}.log",
            short_run=short,
            extra_env=env,
        )
    finally:
        registry.stop()
    return framed, _files(topic.parsed_path)[0]


PARK_RULE = {"name": "bench_parks_every_batch", "rule": "1 = 0", "action": "fail"}


def parked(entry: dict[str, Any], workdir: Path, settings: Path, payload_bytes: int) -> Parked:
    """The parsed side parks on every batch of a whole backlog, then catches up from bronze."""
    lake = workdir / "lake-parked"
    shutil.rmtree(lake, ignore_errors=True)
    failing, fixed = workdir / "catalog-parked.yaml", workdir / "catalog-fixed.yaml"
    failing.write_text(json.dumps({"topics": [{**entry, "parsed": {"expectations": [PARK_RULE]}}]}))
    fixed.write_text(json.dumps({"topics": [{**entry, "parsed": True}]}))
    topic = load_catalog(failing, lake).topic(entry["name"])
    code = EXIT_CODES[Kind.EXPECTATION_FAILED]
    first = drain(topic, failing, lake, settings, payload_bytes, workdir / "parked.log", exit_code=code)
    then = drain(topic, fixed, lake, settings, payload_bytes, workdir / "catch-up.log", fresh=False)
    tables = [p for p in (topic.parsed_path, topic.dead_letter_path) if Path(p).exists()]
    rows = sum(DeltaTable(p).to_pyarrow_dataset().count_rows() for p in tables)
    return Parked(first.wall_s, then.wall_s, rows)


def _files(path: str) -> tuple[int, int, int]:
    """Rows, bytes and number of the table's current data files, from its Delta log."""
    adds = DeltaTable(path).get_add_actions(flatten=True)
    rows = sum(int(n) for n in adds.column("num_records").to_pylist())
    return rows, sum(int(n) for n in adds.column("size_bytes").to_pylist()), len(adds)


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-4000:]


def compact(topic: TopicConfig, catalog: Path, lake: Path, log: Path) -> Compaction:
    """The topic's table care job, forced: what OPTIMIZE leaves of the drain's files."""
    cmd = jobs.command("maintain_table", topic.name, catalog=catalog, lake=lake, extra_args=["--force"])
    started = time.monotonic()
    with log.open("wb") as out:
        done = subprocess.run(cmd, env=jobs.environment(catalog, lake), stdout=out, stderr=subprocess.STDOUT)
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise RuntimeError(f"table care job failed ({done.returncode}):\n{_tail(log)}")
    _rows, files_bytes, files = _files(topic.path)
    return Compaction(wall, files, files_bytes / MIB / max(1, files))


def idle_run(workdir: Path, bootstrap: str, catalog: Path, lake: Path, dag_id: str, runs: int = 5) -> IdleRun:
    """Time idle runs of the DAG in a real ``airflow standalone`` (scheduler, LocalExecutor)."""
    home = workdir / "airflow-standalone"
    env = local_airflow.environment(home, kafka_bootstrap=bootstrap, catalog=catalog, lake_root=lake)
    port = free_port()
    env = local_airflow.standalone_environment(env, port=port, log_server_ports=(free_port(), free_port()))
    local_airflow.init_db(env)
    server = StandaloneAirflow(f"http://127.0.0.1:{port}", home, env, workdir / "airflow.log")
    server.start()
    try:
        wait_for(server.healthy, what="airflow standalone to be healthy", timeout=600, every=2)
        wait_for(lambda: server.dags_parsed(dag_id), what=f"{dag_id} to be parsed", timeout=300, every=2)
        server.api("PATCH", f"/dags/{dag_id}", json={"is_paused": False})
        # Unpausing schedules the latest interval's run: let it finish, untimed (first task processes).
        wait_for(lambda: _scheduled_run_done(server, dag_id), what="the scheduled run", timeout=600, every=1)
        timed = [server.trigger_and_wait(dag_id, timeout=600) for _ in range(runs)]
    finally:
        server.stop()
    for run in timed:
        if run.state != "success":
            raise RuntimeError(f"idle run {run.run_id} ended {run.state}: {run.task_states}")
    # Every Spark job goes through spark-submit, whose operator logs its command line.
    jvm = any(_ran_spark_submit(home, dag_id, run.run_id) for run in timed)
    return IdleRun(
        runs_s=[run.seconds for run in timed],
        tasks_s=[(run.end_date - run.start_date).total_seconds() for run in timed],
        jvm_launched=jvm,
        task_states=timed[-1].task_states,
        task_seconds=timed[-1].task_seconds,
    )


def _scheduled_run_done(server: StandaloneAirflow, dag_id: str) -> bool:
    runs = server.api("GET", f"/dags/{dag_id}/dagRuns")["dag_runs"]
    return bool(runs) and all(run["state"] in ("success", "failed") for run in runs)


def _ran_spark_submit(home: Path, dag_id: str, run_id: str) -> bool:
    logs = home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}"
    return any("Spark-Submit cmd" in log.read_text(errors="replace") for log in logs.rglob("*.log"))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Benchmark the bronze drain against a raw Kafka read.")
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument(
        "--max-offsets-per-trigger",
        type=int,
        default=None,
        help="records per micro-batch (default: the catalog's, which depends on --parsed)",
    )
    parser.add_argument("--port", type=int, default=9192)
    parser.add_argument("--dir", type=Path, default=REPO_ROOT / ".bench")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / ".bench" / "results.json")
    parser.add_argument("--skip-idle", action="store_true", help="leave out the idle DAG run")
    parser.add_argument("--skip-optimize", action="store_true", help="leave out the table care job")
    parser.add_argument(
        "--parsed",
        action="store_true",
        help="also write the parsed and dead-letter tables (default: bronze only, as before they existed)",
    )
    parser.add_argument(
        "--format",
        choices=("json", *bench_formats.FORMATS),
        default="json",
        help="avro, protobuf: also the same events in that format through a schema registry (Apicurio, "
        "started here), drained with the parsed tables beside the JSON drain; implies --parsed",
    )
    parser.add_argument(
        "--parked",
        action="store_true",
        help="with --parsed: also time a run whose parsed side parks on every batch, then its catch-up",
    )
    parser.add_argument(
        "--drop-rule",
        metavar="SQL",
        help='with --parsed: a `drop` expectation with this rule, e.g. "amount < 499.99": the records '
        "that break it are dead letters, so the batches that hold one take the checked path",
    )
    parser.add_argument(
        "--spark-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting for the drain, on top of the project's (repeatable)",
    )
    parser.add_argument(
        "--with-kdi",
        type=Path,
        metavar="PATH",
        help="also drain the backlog with this kafka-delta-ingest binary (built by you: "
        "cargo build --release --features s3), into a table of its own, and compare",
    )
    parser.add_argument(
        "--kdi-latency",
        type=int,
        default=5,
        metavar="SECONDS",
        help="kafka-delta-ingest's --allowed_latency: it writes a file at least this often (default 5)",
    )
    parser.add_argument(
        "--jvm-extension",
        choices=jvm_extension.SWITCH_VALUES,
        default=None,
        help=f"run the jobs with kafkalake's JVM extension or without it ({jvm_extension.ENV_JVM_EXTENSION}; "
        "default: the environment's, else on)",
    )
    args = parser.parse_args(argv)
    if args.format in bench_formats.FORMATS:
        args.parsed = True
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # The launch layer reads the switch for every job the bench starts (and the idle run's Airflow).
    if args.jvm_extension is not None:
        os.environ[jvm_extension.ENV_JVM_EXTENSION] = args.jvm_extension
    extension = "on" if jvm_extension.enabled() else "off"
    if args.with_kdi is not None and not os.access(args.with_kdi, os.X_OK):
        parser.error(f"--with-kdi: {args.with_kdi} is not an executable file")

    workdir: Path = args.dir.resolve()
    broker = LocalKafka(workdir / "kafka", args.port, args.port + 1, heap="2G").start()
    name = f"bench-{args.events}-p{args.partitions}"
    catalog = workdir / "catalog.yaml"
    # The same backlog either way; each table set has its own lake, so its own checkpoint.
    lake = workdir / ("lake-parsed" if args.parsed else "lake")
    if args.parked and not args.parsed:
        parser.error("--parked needs --parsed")
    spark_conf = dict(item.split("=", 1) for item in args.spark_conf)
    entry: dict[str, Any] = {"name": name, "freshness_sla": "1h", "spark_conf": spark_conf}
    if args.max_offsets_per_trigger is not None:
        entry["max_offsets_per_trigger"] = args.max_offsets_per_trigger
    if args.drop_rule and not args.parsed:
        parser.error("--drop-rule needs --parsed")
    parsed: bool | dict[str, Any] = bool(args.parsed)
    if args.drop_rule:
        parsed = {"expectations": [{"name": "bench_drop", "rule": args.drop_rule, "action": "drop"}]}
    catalog.write_text(json.dumps({"topics": [{**entry, "parsed": parsed}]}))
    topic = load_catalog(catalog, lake).topic(name)
    ensure_backlog(broker.bootstrap_servers, name, args.events, args.partitions)

    raw = raw_read(broker.bootstrap_servers, name)
    print(f"raw read: {raw.records:,} records in {raw.seconds:.1f}s", flush=True)
    settings = workdir / "kafka-client.json"
    settings.write_text(json.dumps({"bootstrap.servers": broker.bootstrap_servers}))
    # As a DAG run of this backlog would start its driver (table care is the bench's own step).
    short = is_short_run(raw.records, care_due=False)
    print(f"driver's compiler: {'quick only (a short run)' if short else 'tiered (a long run)'}", flush=True)
    print(f"kafkalake's JVM extension: {extension}", flush=True)
    bronze = drain(topic, catalog, lake, settings, raw.bytes, workdir / "drain.log", short_run=short)
    if bronze.records != raw.records:
        raise RuntimeError(f"bronze holds {bronze.records:,} rows, the topic {raw.records:,}")
    print(f"bronze drain: {bronze.records:,} rows in {bronze.wall_s:.1f}s", flush=True)
    formats = None
    if args.format in bench_formats.FORMATS:
        fmt = args.format
        json_rows = _files(topic.parsed_path)[0]
        framed, framed_rows = registry_drain(
            entry, workdir, broker.bootstrap_servers, settings, args.events, args.partitions, short, fmt
        )
        for name_, rows in (("json", json_rows), (fmt, framed_rows)):
            if rows != raw.records:
                raise RuntimeError(f"the {name_} parsed table holds {rows:,} rows, the topic {raw.records:,}")
        formats = {
            "json": {**asdict(bronze), "records_per_s": bronze.records_per_s, "parsed_rows": json_rows},
            fmt: {**asdict(framed), "records_per_s": framed.records_per_s, "parsed_rows": framed_rows},
            f"ratio_{fmt}_to_json": framed.records_per_s / bronze.records_per_s,
        }
        print(
            f"parsed path, same events: json {bronze.records_per_s:,.0f} records/s ({bronze.wall_s:.1f}s), "
            f"{fmt} {framed.records_per_s:,.0f} records/s ({framed.wall_s:.1f}s): "
            f"{fmt}/json {framed.records_per_s / bronze.records_per_s:.2f}; processing only (after the "
            f"first batch was planned): json {bronze.records / bronze.processing_s:,.0f}, {fmt} "
            f"{framed.records / framed.processing_s:,.0f} records/s",
            flush=True,
        )
    park = parked(entry, workdir, settings, raw.bytes) if args.parked else None
    if park is not None:
        if park.parsed_side_rows != raw.records:
            raise RuntimeError(f"the parsed side holds {park.parsed_side_rows:,} rows, not {raw.records:,}")
        print(f"parked run {park.parked_wall_s:.1f}s, catch-up run {park.catch_up_wall_s:.1f}s", flush=True)
    kdi = None
    if args.with_kdi is not None:
        kdi = bench_kdi.run(
            args.with_kdi.resolve(),
            broker.bootstrap_servers,
            name,
            raw.records,
            workdir,
            allowed_latency=args.kdi_latency,
        )
        if kdi.records != raw.records or kdi.distinct_offsets != raw.records:
            raise RuntimeError(
                f"kafka-delta-ingest's table holds {kdi.records:,} rows ({kdi.distinct_offsets:,} distinct "
                f"offsets), the topic {raw.records:,}"
            )
        print(f"kafka-delta-ingest: {kdi.records:,} rows in {kdi.wall_s:.1f}s", flush=True)
    compaction = None
    if not args.skip_optimize:
        compaction = compact(topic, catalog, lake, workdir / "optimize.log")
        print(f"table care: {compaction.files} files left in {compaction.wall_s:.1f}s", flush=True)

    idle = None
    if not args.skip_idle:
        idle = idle_run(workdir, broker.bootstrap_servers, catalog, lake, topic.dag_id)

    print(report(raw, bronze, compaction, idle, park, kdi, jvm_extension=extension))
    results: dict[str, Any] = {
        "events": args.events,
        "jvm_extension": extension,
        "partitions": args.partitions,
        "max_offsets_per_trigger": topic.max_offsets_per_trigger,
        "spark_conf": spark_conf,
        "short_run": short,
        "cores": os.cpu_count(),
        "raw_read": {**asdict(raw), "records_per_s": raw.records_per_s, "mib_per_s": raw.mib_per_s},
        "bronze_drain": {
            **asdict(bronze),
            "processing_s": bronze.processing_s,
            "records_per_s": bronze.records_per_s,
        },
        "ratio_bronze_to_raw": bronze.records_per_s / raw.records_per_s,
        "table_care": asdict(compaction) if compaction else None,
        "idle_run": {**asdict(idle), "wall_s": idle.wall_s, "run_s": idle.run_s} if idle else None,
        "parked": asdict(park) if park else None,
        "formats": formats,
        "kafka_delta_ingest": {
            **asdict(kdi),
            "records_per_s": kdi.records_per_s,
            "records_per_cpu_s": kdi.records_per_cpu_s,
        }
        if kdi
        else None,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(f"results written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
