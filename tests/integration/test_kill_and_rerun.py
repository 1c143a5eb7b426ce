"""SIGKILL the ingest job in the middle of a micro-batch, and at each named kill point between its
commits, then run it again: every offset lands once in every table, and every table reads. And two
ingest jobs of one topic at once: the second is turned away, nothing lands twice."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

from kafkalake.config.catalog import load_catalog
from kafkalake.config.topic import TopicConfig
from kafkalake.core import kill_points
from kafkalake.core.errors import EXIT_CODES, Kind
from kafkalake.dev import producer
from kafkalake.dev.broker import LocalKafka
from kafkalake.dev.producer import Record
from kafkalake.dev.standalone_airflow import wait_for
from kafkalake.kafka.offsets import decide, end_offsets
from kafkalake.lake.checkpoint import read_checkpoint
from kafkalake.launch import jobs, jvm_extension
from kafkalake.launch.handover import ENV_CLIENT_CONFIG_FILE, ENV_KEEP_CLIENT_CONFIG_FILE
from kafkalake.launch.spark_conf import DELTA_EXTENSION

from .helpers import assert_exactly_once, newest_spots, ran_on_job_host, read_rows, run_to_end

pytestmark = pytest.mark.integration

TOPIC = "it-killed"  # max_offsets_per_trigger: 500 in the test catalog
# Seven micro-batches: the first run is killed in batch 2, the rerun in batch 5 or later, and the
# third run finishes what is left; one batch to spare if the first kill comes a batch late.
EVENTS = 3_500


@pytest.fixture(scope="module")
def topic(catalog_file: Path, lake: Path, kafka: LocalKafka) -> TopicConfig:
    config = load_catalog(catalog_file, lake).topic(TOPIC)
    producer.create_topic(kafka.bootstrap_servers, TOPIC, partitions=3)
    # Every 50th value is not JSON: the dead-letter table is written from the same batches.
    records = [
        Record(str(i).encode(), f'{{"n": {i}}}'.encode() if i % 50 else b"not json", i % 3)
        for i in range(EVENTS)
    ]
    producer.produce(kafka.bootstrap_servers, TOPIC, records)
    return config


def job_env(catalog: Path, lake: Path, settings: Path) -> dict[str, str]:
    """The ingest job's environment, its Kafka settings in the hand-written file ``settings``."""
    return {
        **jobs.environment(catalog, lake),
        ENV_CLIENT_CONFIG_FILE: str(settings),
        ENV_KEEP_CLIENT_CONFIG_FILE: "1",  # one hand-written file serves every run
    }


def start_ingest(
    topic: TopicConfig, catalog: Path, lake: Path, settings: Path, started: list[subprocess.Popen[bytes]]
) -> subprocess.Popen[bytes]:
    """The ingest job by spark-submit, in a process group of its own: a test kills or freezes it."""
    cmd = jobs.command("ingest_topic", topic.name, catalog=catalog, lake=lake)
    process = subprocess.Popen(
        cmd,
        env=job_env(catalog, lake, settings),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # its own group, so the JVM dies with it
    started.append(process)
    return process


def parsed_side_matches(topic: TopicConfig, rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """The parsed and dead-letter rows, once it is checked that together they hold bronze's offsets
    once each."""
    parsed = read_rows(Path(topic.parsed_path))
    dead = read_rows(Path(topic.dead_letter_path))
    landed = [(r["_kafka"]["partition"], r["_kafka"]["offset"]) for r in parsed]
    landed += [(r["partition"], r["offset"]) for r in dead]
    assert sorted(landed) == sorted((r["partition"], r["offset"]) for r in rows)
    return parsed, dead


def descendants(pid: int) -> list[str]:
    """The pids of a process's children, grandchildren and so on (from /proc)."""
    children: dict[str, list[str]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(fields[1], []).append(stat.parent.name)
    found, todo = [], [str(pid)]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def batch_in_flight(checkpoint: Path, at_least: int) -> int | None:
    """A batch id >= at_least whose offsets are planned but whose commit is not yet written."""
    planned = {int(p.name) for p in (checkpoint / "offsets").glob("[0-9]*") if p.name.isdigit()}
    committed = {int(p.name) for p in (checkpoint / "commits").glob("[0-9]*") if p.name.isdigit()}
    in_flight = [b for b in planned - committed if b >= at_least]
    return min(in_flight) if in_flight else None


def kill_mid_batch(process: subprocess.Popen[bytes], checkpoint: Path, at_least: int) -> int:
    wait_for(
        lambda: batch_in_flight(checkpoint, at_least) is not None or process.poll() is not None,
        what=f"micro-batch {at_least} to start",
        timeout=300,
        every=0.05,  # the kill must land inside the batch
    )
    batch = batch_in_flight(checkpoint, at_least)
    assert process.poll() is None and batch is not None, "the job finished before it could be killed"
    os.killpg(process.pid, signal.SIGKILL)  # driver JVM and its Python together, no clean-up
    process.wait(timeout=30)
    return batch


def test_sigkill_mid_batch_then_rerun_lands_every_offset_once(topic, catalog_file, lake, kafka, tmp_path):
    checkpoint = Path(topic.checkpoint_path)
    settings = tmp_path / "kafka.json"
    settings.write_text(json.dumps({"bootstrap.servers": kafka.bootstrap_servers}))
    started: list[subprocess.Popen[bytes]] = []
    try:
        first = start_ingest(topic, catalog_file, lake, settings, started)
        killed_at = kill_mid_batch(first, checkpoint, at_least=2)

        partial = read_rows(Path(topic.path))
        assert 0 < len(partial) < EVENTS
        assert len({(r["partition"], r["offset"]) for r in partial}) == len(partial), "duplicates after kill"
        state = read_checkpoint(checkpoint, TOPIC)
        assert state is not None and state.unfinished_batch
        decision = decide(state, end_offsets({"bootstrap.servers": kafka.bootstrap_servers}, TOPIC))
        assert decision.run and "interrupted" in decision.reason

        # Kill the rerun too, a few batches further on: recovery itself must survive a crash.
        second = start_ingest(topic, catalog_file, lake, settings, started)
        kill_mid_batch(second, checkpoint, at_least=killed_at + 3)

        # Nobody kills or watches the third: it may run on the job host (helpers.run_to_end).
        third = run_to_end(
            "ingest_topic",
            topic.name,
            catalog=catalog_file,
            lake=lake,
            env=job_env(catalog_file, lake, settings),
        )
        assert third.returncode == 0, third.stdout[-3000:]
    finally:
        for process in started:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)

    rows = read_rows(Path(topic.path))
    assert len(rows) == EVENTS
    assert_exactly_once(rows, TOPIC, kafka.bootstrap_servers)
    assert sorted(int(r["key"]) for r in rows) == list(range(EVENTS))
    state = read_checkpoint(checkpoint, TOPIC)
    assert state is not None and not state.unfinished_batch
    # The parsed and dead-letter tables are written from the same batches: each offset once there.
    parsed, dead = parsed_side_matches(topic, rows)
    assert sorted(r["n"] for r in parsed) == [n for n in range(EVENTS) if n % 50]
    assert sorted(int(r["key"]) for r in dead) == list(range(0, EVENTS, 50))
    assert {r["reason"] for r in dead} == {"malformed_json"}


KILL_TOPIC = "it-kill-points"  # parsed, latest_by_key, max_offsets_per_trigger: 300 in the test catalog
KILL_TOPIC_OFF = "it-kill-points-off"  # the same settings, for the run without the JVM extension


def json_or_broken(i: int, run: int) -> bytes:
    """Every 41st value is not JSON: a dead letter, written from the same batches."""
    return f'{{"n": {i}, "run": {run}}}'.encode() if i % 41 else b"{"


def run_ingest_job(
    topic: TopicConfig, catalog: Path, lake: Path, settings: Path, kill_at: str | None
) -> subprocess.CompletedProcess[str]:
    """The ingest job, built as the launch layer builds it for this process's environment, on the
    job host when it takes it (helpers.run_to_end): a run killed at a named point dies between its
    calls into the JVM, and the host settles the JVM before the next run."""
    env = job_env(catalog, lake, settings)
    if kill_at is not None:
        # The second micro-batch of the run: the first one's commits are complete by then.
        env |= {kill_points.ENV_KILL_AT: kill_at, kill_points.ENV_KILL_AFTER: "1"}
    return run_to_end("ingest_topic", topic.name, catalog=catalog, lake=lake, env=env)


def test_sigkill_at_each_commit_point_then_rerun_every_table_holds_each_offset_once(
    catalog_file, lake, kafka, tmp_path, monkeypatch
):
    monkeypatch.delenv(jvm_extension.ENV_JVM_EXTENSION, raising=False)  # on, the default
    points = ["ingest:before_bronze_commit", "ingest:after_bronze_commit", "ingest:after_parsed_commits"]
    runs = kill_at_points_then_rerun(KILL_TOPIC, points, catalog_file, lake, kafka, tmp_path)
    assert all("kafkalake's JVM extension is on" in run.stdout for run in runs)
    # Each killed run on the worker's job host, and the host went on to the next: a job that kills
    # itself leaves nothing in the JVM (dev/job_host settles it).
    assert all(ran_on_job_host(run) for run in runs)


def test_without_the_jvm_extension_a_kill_after_bronze_commit_then_rerun_holds_each_offset_once(
    catalog_file, lake, kafka, tmp_path, monkeypatch
):
    """KAFKALAKE_JVM_EXTENSION=off, where the launch layer reads it: the job's settings leave the
    extension's class out, its jars leave the jar out, and the job writes with Delta's public writer
    and parses with Spark's built-ins. Killed once its bronze commit landed, its rerun replays the
    batch: Delta skips bronze's write, the parsed side lands once."""
    monkeypatch.setenv(jvm_extension.ENV_JVM_EXTENSION, "off")
    cmd = jobs.command("ingest_topic", KILL_TOPIC_OFF, catalog=catalog_file, lake=lake)
    assert not any(jvm_extension.is_extension_jar(Path(j)) for j in cmd[cmd.index("--jars") + 1].split(","))
    assert f"spark.sql.extensions={DELTA_EXTENSION}" in cmd
    runs = kill_at_points_then_rerun(
        KILL_TOPIC_OFF, ["ingest:after_bronze_commit"], catalog_file, lake, kafka, tmp_path
    )
    # What the job's session loaded: Delta's extension alone, in a JVM of its own (the job host's
    # has kafkalake's: a static setting of the job differs, so spark-submit ran both).
    for run in runs:
        off = "kafkalake's JVM extension is off: Spark's and Delta's public APIs only"
        assert f"{off} (spark.sql.extensions={DELTA_EXTENSION})" in run.stdout, run.stdout[-3000:]
        assert not ran_on_job_host(run)


def kill_at_points_then_rerun(
    name: str, points: list[str], catalog_file: Path, lake: Path, kafka: LocalKafka, tmp_path: Path
) -> list[subprocess.CompletedProcess[str]]:
    """Runs killed at each of ``points`` in turn, then one to the end: every table holds each offset
    once, and the latest table each key's last parsed record. The runs."""
    topic = load_catalog(catalog_file, lake).topic(name)
    producer.create_topic(kafka.bootstrap_servers, name, partitions=2)
    settings = tmp_path / "kafka.json"
    settings.write_text(json.dumps({"bootstrap.servers": kafka.bootstrap_servers}))
    produced = 0
    runs = []
    for number, point in enumerate(points):
        # 600 new records a run: two micro-batches of 300, killed in the second (a rerun first
        # replays the batch the run before was killed in, then is killed in the next one).
        records = [
            Record(
                f"k{i % 37}".encode(), f'{{"n": {i}, "run": {number}}}'.encode() if i % 41 else b"{", i % 2
            )
            for i in range(produced, produced + 600)
        ]
        producer.produce(kafka.bootstrap_servers, name, records)
        produced += len(records)
        killed = run_ingest_job(topic, catalog_file, lake, settings, point)
        runs.append(killed)
        code = killed.returncode
        assert code in (137, -signal.SIGKILL), f"the job was not killed at {point} (exit {code})"
    last = run_ingest_job(topic, catalog_file, lake, settings, None)
    runs.append(last)
    assert last.returncode == 0, last.stdout[-3000:]

    rows = read_rows(Path(topic.path))  # delta-rs: every table must open outside Spark too
    assert len(rows) == produced
    assert_exactly_once(rows, name, kafka.bootstrap_servers)
    parsed, dead = parsed_side_matches(topic, rows)
    assert len(dead) == sum(1 for i in range(produced) if i % 41 == 0)
    # The latest table holds each key's last parsed record, whatever was replayed.
    latest = read_rows(Path(topic.latest_path))
    valid = {(r["_kafka"]["partition"], r["_kafka"]["offset"]) for r in parsed}
    expected = newest_spots(
        (r["key"], r["partition"], r["offset"], r["kafka_timestamp"])
        for r in rows
        if (r["partition"], r["offset"]) in valid
    )
    assert {r["_kafka"]["key"]: (r["_kafka"]["partition"], r["_kafka"]["offset"]) for r in latest} == expected
    return runs


CONCURRENT_TOPIC = "it-concurrent"  # parsed, latest_by_key, max_offsets_per_trigger: 500


def test_a_second_ingest_of_the_same_topic_meanwhile_is_turned_away_and_nothing_lands_twice(
    catalog_file, lake, kafka, tmp_path
):
    """Two drivers on one topic (a job started by hand beside the DAG's, a driver Airflow lost):
    the first is frozen (SIGSTOP) in the middle of a micro-batch, holding its lock, while the
    second runs from start to end; then the first goes on."""
    topic = load_catalog(catalog_file, lake).topic(CONCURRENT_TOPIC)
    producer.create_topic(kafka.bootstrap_servers, CONCURRENT_TOPIC, partitions=2)
    records = [Record(f"k{i % 29}".encode(), json_or_broken(i, 0), i % 2) for i in range(1_000)]
    producer.produce(kafka.bootstrap_servers, CONCURRENT_TOPIC, records)
    settings = tmp_path / "kafka.json"
    settings.write_text(json.dumps({"bootstrap.servers": kafka.bootstrap_servers}))
    checkpoint = Path(topic.checkpoint_path)
    started: list[subprocess.Popen[bytes]] = []
    try:
        first = start_ingest(topic, catalog_file, lake, settings, started)
        wait_for(
            lambda: batch_in_flight(checkpoint, 1) is not None or first.poll() is not None,
            what="the first job's second micro-batch",
            timeout=300,
            every=0.05,
        )
        os.killpg(first.pid, signal.SIGSTOP)
        assert first.poll() is None, "the first job ended before the second could meet it"
        env = job_env(catalog_file, lake, settings)
        second = run_to_end("ingest_topic", topic.name, catalog=catalog_file, lake=lake, env=env)
        os.killpg(first.pid, signal.SIGCONT)

        assert second.returncode == EXIT_CODES[Kind.CHECKPOINT_LOCKED], second.stdout[-3000:]
        assert "KAFKALAKE_FAILURE kind=checkpoint_locked" in second.stdout
        # It names the holder: the first job's Python driver, a child of its spark-submit.
        holder = re.search(r"in use by another run: pid (\d+)", second.stdout)
        assert holder is not None, second.stdout[-2000:]
        assert f"/{holder.group(1)}\n" in "".join(f"/{p}\n" for p in descendants(first.pid))
        assert first.wait(timeout=600) == 0
    finally:
        for process in started:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGCONT)
                os.killpg(process.pid, signal.SIGKILL)

    rows = read_rows(Path(topic.path))
    assert_exactly_once(rows, CONCURRENT_TOPIC, kafka.bootstrap_servers)
    _parsed, dead = parsed_side_matches(topic, rows)
    assert len(dead) == sum(1 for i in range(len(records)) if i % 41 == 0)
    state = read_checkpoint(checkpoint, CONCURRENT_TOPIC)
    assert state is not None and not state.unfinished_batch
    assert sum(state.committed.values()) == len(records)
