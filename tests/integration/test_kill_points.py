"""SIGKILL the table care job inside OPTIMIZE and inside VACUUM, and the registration job between
two tables' registrations, then run each again: every table keeps each offset once and reads in
delta-rs, and the rerun finishes the work. (The ingest's own commit points: test_kill_and_rerun.py;
a replay's: test_replay.py; a re-ingest's: test_reingest.py.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from deltalake import DeltaTable

from kafkalake.config.catalog import load_catalog
from kafkalake.config.tables import topic_tables
from kafkalake.config.topic import TopicConfig
from kafkalake.core import kill_points
from kafkalake.dev import producer
from kafkalake.dev.broker import LocalKafka
from kafkalake.dev.producer import Record
from kafkalake.lake.registry import is_recorded, registry_dir
from kafkalake.launch import jobs
from kafkalake.launch.handover import ENV_CLIENT_CONFIG_FILE, ENV_KEEP_CLIENT_CONFIG_FILE
from kafkalake.launch.spark_conf import ENV_DRIVER_JAVA_OPTIONS

from .helpers import assert_exactly_once, read_rows, run_to_end

pytestmark = pytest.mark.integration

TOPIC = "it-kill-care"  # parsed, latest, 250 offsets a batch, OPTIMIZE due always, VACUUM retains 0h
EVENTS = 500
KILLED = (137, -signal.SIGKILL)


@pytest.fixture(scope="module")
def topic(
    catalog_file: Path, lake: Path, kafka: LocalKafka, tmp_path_factory: pytest.TempPathFactory
) -> TopicConfig:
    """The topic landed by one ingest run: two micro-batches (of two partitions), so several small
    files in every table but the latest-row one for OPTIMIZE to compact."""
    config = load_catalog(catalog_file, lake).topic(TOPIC)
    producer.create_topic(kafka.bootstrap_servers, TOPIC, partitions=2)
    records = [
        Record(f"k{i % 13}".encode(), f'{{"n": {i}}}'.encode() if i % 31 else b"[", i % 2)
        for i in range(EVENTS)
    ]
    producer.produce(kafka.bootstrap_servers, TOPIC, records)
    settings = tmp_path_factory.mktemp("kill-care") / "kafka.json"
    settings.write_text(json.dumps({"bootstrap.servers": kafka.bootstrap_servers}))
    env = {**jobs.environment(catalog_file, lake), ENV_CLIENT_CONFIG_FILE: str(settings)}
    env[ENV_KEEP_CLIENT_CONFIG_FILE] = "1"
    # Land only: the care is due at once (1s), and the ingest would otherwise do it in its session.
    done = run_to_end(
        "ingest_topic", TOPIC, catalog=catalog_file, lake=lake, env=env, extra_args=["--no-follow-ups"]
    )
    assert done.returncode == 0, done.stdout[-4000:]
    assert len(DeltaTable(config.path).file_uris()) >= 4
    return config


def data_files(path: str) -> set[str]:
    return {p.name for p in Path(path).glob("*.parquet")}


def assert_every_table_holds_each_offset_once(topic: TopicConfig, bootstrap: str) -> None:
    bronze = read_rows(Path(topic.path))  # delta-rs: each table must open outside Spark
    assert len(bronze) == EVENTS
    assert_exactly_once(bronze, TOPIC, bootstrap)
    parsed = read_rows(Path(topic.parsed_path))
    dead = read_rows(Path(topic.dead_letter_path))
    both = Counter((r["_kafka"]["partition"], r["_kafka"]["offset"]) for r in parsed)
    both.update((r["partition"], r["offset"]) for r in dead)
    assert set(both) == {(r["partition"], r["offset"]) for r in bronze} and max(both.values()) == 1
    assert len(dead) == len(range(0, EVENTS, 31))
    latest = read_rows(Path(topic.latest_path))
    assert sorted(r["_kafka"]["key"] for r in latest) == sorted(
        {f"k{i % 13}".encode() for i in range(EVENTS)}
    )


def run_job(
    job: str,
    catalog: Path,
    lake: Path,
    *,
    kill_when: Callable[[], bool] | None = None,
    env: dict[str, str] | None = None,
    args: tuple[str, ...] = (),
) -> int:
    """Run a job to its end, or SIGKILL it (driver and JVM together) the moment ``kill_when`` holds."""
    cmd = jobs.command(job, TOPIC, catalog=catalog, lake=lake, extra_args=args)
    process = subprocess.Popen(
        cmd,
        env={**jobs.environment(catalog, lake), **(env or {})},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 600
    try:
        while process.poll() is None and time.monotonic() < deadline:
            if kill_when is not None and kill_when():
                os.killpg(process.pid, signal.SIGKILL)
                break
            time.sleep(0.02)
        return process.wait(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)


def test_table_care_killed_inside_optimize_and_inside_vacuum_then_run_again(topic, catalog_file, lake, kafka):
    before = data_files(topic.path)

    # Inside OPTIMIZE: the moment its first compacted file appears, before (or as) it commits.
    code = run_job(
        "maintain_table",
        catalog_file,
        lake,
        args=("--force",),
        kill_when=lambda: bool(data_files(topic.path) - before),
    )
    assert code in KILLED, f"the job ended ({code}) before OPTIMIZE wrote a file"
    assert_every_table_holds_each_offset_once(topic, kafka.bootstrap_servers)

    # Inside VACUUM (retain 0 h): the moment the first replaced file is deleted.
    written = data_files(topic.path)
    assert len(written) > len(before)
    code = run_job(
        "maintain_table",
        catalog_file,
        lake,
        args=("--force",),
        kill_when=lambda: len(data_files(topic.path)) < len(written),
    )
    assert code in KILLED, f"the job ended ({code}) before VACUUM deleted a file"
    assert_every_table_holds_each_offset_once(topic, kafka.bootstrap_servers)

    # Run again, whole: every table compacted to what its log references, nothing else on disk.
    again = run_to_end(
        "maintain_table",
        TOPIC,
        catalog=catalog_file,
        lake=lake,
        env=jobs.environment(catalog_file, lake),
        extra_args=["--force"],
    )
    assert again.returncode == 0, again.stdout[-4000:]
    assert_every_table_holds_each_offset_once(topic, kafka.bootstrap_servers)
    for table in topic_tables(topic):
        live = {Path(uri).name for uri in DeltaTable(table.location).file_uris()}
        assert len(live) == 1, f"{table.kind}: {len(live)} files after OPTIMIZE"
        assert data_files(table.location) == live, f"{table.kind}: VACUUM left unreferenced files"


def test_registration_killed_between_two_tables_then_run_again(
    topic, catalog_file, lake, kafka, tmp_path, monkeypatch
):
    registry = registry_dir(lake)
    tables = topic_tables(topic)
    # The runs' JVMs get a temp folder of their own, to see what Hive's session leaves there.
    temp = tmp_path / "jvm-temp"
    temp.mkdir()
    options = os.environ.get(ENV_DRIVER_JAVA_OPTIONS, "")
    monkeypatch.setenv(ENV_DRIVER_JAVA_OPTIONS, f"{options} -Djava.io.tmpdir={temp}")
    # The first CREATE TABLE passes, the second is killed: one table registered, three not.
    kill = {kill_points.ENV_KILL_AT: "register:before_create", kill_points.ENV_KILL_AFTER: "1"}
    assert run_job("register_table", catalog_file, lake, env=kill) in KILLED
    assert [is_recorded(registry, t) for t in tables].count(True) <= 1

    assert run_job("register_table", catalog_file, lake) == 0
    assert all(is_recorded(registry, t) for t in tables)
    # One shared folder for Hive's downloads, not an empty `<session id>_resources` per run.
    assert sorted(p.name for p in temp.glob("*_resources")) == []
    assert (temp / "kafkalake-hive-resources").is_dir()
    assert_every_table_holds_each_offset_once(topic, kafka.bootstrap_servers)
