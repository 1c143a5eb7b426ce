"""The test suite's job host (dev/job_host) stands in for spark-submit: what it runs lands as a
spark-submit's run would, what it cannot stand in for it refuses (the job then goes to spark-submit),
a job that kills itself at a named point leaves nothing behind in it, and a job whose task went
away ends it."""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
from pathlib import Path

import pytest

from kafkalake.config.catalog import load_catalog
from kafkalake.config.topic import TopicConfig
from kafkalake.core import kill_points
from kafkalake.dev import job_host as hosting
from kafkalake.dev import producer
from kafkalake.dev.broker import LocalKafka
from kafkalake.launch import handover
from kafkalake.launch.job_host import request as job_host_request
from kafkalake.launch.job_host import run_hosted, socket_path
from kafkalake.launch.submit import Submission, submission

from .helpers import assert_exactly_once, read_rows

pytestmark = pytest.mark.integration

TOPIC = "it-hosted"
SLEEPS = Path(__file__).resolve().parents[1] / "fixtures" / "jobs" / "sleeps.py"
S3A_STATE = SLEEPS.with_name("s3a_state.py")
KILLS_ITSELF = SLEEPS.with_name("kills_itself.py")
JVM_STATE = SLEEPS.with_name("jvm_state.py")


def ingest(
    address: str, topic: TopicConfig, catalog: Path, lake: Path, bootstrap: str, lines: list[str]
) -> int | str:
    with handover.config_file({"bootstrap.servers": bootstrap}) as settings:
        built = submission("ingest_topic", topic, catalog=catalog, lake=lake, kafka_settings=settings)
        return run_hosted(address, built, built.env, lines.append)


def sleeper() -> Submission:
    return Submission(application=SLEEPS, application_args=(), conf={}, jars=(), env={}, name="sleeps")


def test_a_job_meets_no_s3a_settings_or_file_system_the_job_before_it_left(job_host: str):
    """A job on an object store sets its endpoint and credentials on the JVM's one Hadoop
    configuration, and S3A caches a file system per bucket with them: the next job on the host must
    reach its store with its own settings, never the last job's."""
    said: list[list[str]] = []
    for secret in ("first-secret", "second-secret"):
        lines: list[str] = []
        probe = Submission(S3A_STATE, (secret,), conf={}, jars=(), env={}, name="s3a-state")
        assert run_hosted(job_host, probe, {}, lines.append) == 0, "\n".join(lines)
        said.append(lines)

    def found(lines: list[str], prefix: str) -> str:
        return next(line for line in lines if line.startswith(prefix)).removeprefix(prefix)

    settings = [json.loads(found(lines, "settings found: ")) for lines in said]
    # As at the host's start (Hadoop's defaults), whatever job ran before the first.
    assert settings[1] == settings[0] and "fs.s3a.secret.key" not in settings[1], settings[1]
    stores = [found(lines, "file system: ") for lines in said]
    assert stores[0] != stores[1], "the second job was handed the first job's cached S3A file system"


def test_hosted_ingests_land_each_record_once_and_a_second_job_meanwhile_is_refused(
    job_host: str, kafka: LocalKafka, catalog_file: Path, lake: Path
):
    topic = load_catalog(catalog_file, lake).topic(TOPIC)
    producer.create_topic(kafka.bootstrap_servers, TOPIC, partitions=2)
    producer.produce(kafka.bootstrap_servers, TOPIC, producer.sample_orders(60, seed=11))
    lines: list[str] = []
    meanwhile: list[int | str] = []

    def second() -> None:
        while not any("took the run lock" in line for line in lines):
            time.sleep(0.05)
        meanwhile.append(run_hosted(job_host, sleeper(), {}, print))

    other = threading.Thread(target=second, daemon=True)
    other.start()
    assert ingest(job_host, topic, catalog_file, lake, kafka.bootstrap_servers, lines) == 0, "\n".join(lines)
    other.join(60)
    assert meanwhile == ["busy with another job"]
    assert any("done: 1 micro-batches, 60 rows to bronze" in line for line in lines), "\n".join(lines)
    assert_exactly_once(read_rows(Path(topic.path)), TOPIC, kafka.bootstrap_servers)

    # A second run in the same JVM reads on from the first's checkpoint.
    producer.produce(kafka.bootstrap_servers, TOPIC, producer.sample_orders(25, seed=12))
    lines.clear()
    assert ingest(job_host, topic, catalog_file, lake, kafka.bootstrap_servers, lines) == 0, "\n".join(lines)
    rows = read_rows(Path(topic.path))
    assert len(rows) == 85
    assert_exactly_once(rows, TOPIC, kafka.bootstrap_servers)


def test_a_job_that_fails_under_the_host_exits_with_its_kind_and_says_so(
    job_host: str, kafka: LocalKafka, catalog_file: Path, lake: Path
):
    topic = load_catalog(catalog_file, lake).topic(TOPIC)
    with handover.config_file({"bootstrap.servers": kafka.bootstrap_servers}) as settings:
        built = submission("ingest_topic", topic, catalog=catalog_file, lake=lake, kafka_settings=settings)
    lines: list[str] = []
    # The hand-over file is gone (the block above removed it): the job's own argument check answers.
    assert run_hosted(job_host, built, built.env, lines.append) == 78, "\n".join(lines)
    assert any(line.startswith("KAFKALAKE_FAILURE kind=bad_config") for line in lines), "\n".join(lines)


def test_what_the_host_cannot_stand_in_for_is_refused_by_reason(job_host: str, catalog_file: Path, tmp_path):
    topic = load_catalog(catalog_file, tmp_path / "lake").topic(TOPIC)
    hive = submission(
        "ingest_topic", topic, catalog=catalog_file, lake=tmp_path / "lake",
        conf={"spark.sql.catalogImplementation": "hive"},
    )  # fmt: skip
    assert run_hosted(job_host, hive, hive.env, print) == (
        "static setting spark.sql.catalogImplementation differs from the host's"
    )
    jars = Submission(SLEEPS, (), {}, (tmp_path / "hadoop-aws.jar",), {}, "sleeps")
    assert run_hosted(job_host, jars, {}, print) == f"the host lacks jar {tmp_path / 'hadoop-aws.jar'}"


def test_a_job_killed_at_a_named_point_leaves_no_stream_job_or_cache_and_the_host_goes_on(
    job_host: str, tmp_path
):
    """Killed (SIGKILL, by itself) inside its stream's second batch, which had cached its rows: the
    host ends the stream and its Spark jobs, drops the cache, and takes the next job."""
    killer = Submission(KILLS_ITSELF, (str(tmp_path / "checkpoint"),), {}, (), {}, "kills-itself")
    kill = {kill_points.ENV_KILL_AT: "ingest:after_bronze_commit", kill_points.ENV_KILL_AFTER: "1"}
    lines: list[str] = []
    assert run_hosted(job_host, killer, kill, lines.append) == -signal.SIGKILL, "\n".join(lines[-40:])
    assert (tmp_path / "checkpoint" / "commits" / "0").is_file()  # the first batch ended well
    assert not (tmp_path / "checkpoint" / "commits" / "1").exists()  # the second was killed

    said: list[str] = []
    assert run_hosted(job_host, Submission(JVM_STATE, (), {}, (), {}, "jvm-state"), {}, said.append) == 0
    assert {"streams 0", "cached 0", "running 0"} <= set(said), said[-20:]


def test_a_task_that_goes_away_takes_its_job_and_the_host_with_it(tmp_path, lake: Path):
    """Its own host (the worker's must go on): the task's end kills the job's process, as a killed
    spark-submit takes its driver, and the host stops taking jobs."""
    folder = Path("/tmp") / f"kl-host-{os.getpid()}"
    with hosting.running(folder, lake) as host:
        address = socket_path(folder)
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(str(address))
        wanted = job_host_request(sleeper(), {"KAFKALAKE_MARK": "m1"})
        conn.sendall(json.dumps(wanted).encode() + b"\n")
        # The host's own lines (py4j's) may come first: the job's is the one that names its pid.
        conn.settimeout(60)
        first = next(line.decode() for line in conn.makefile("rb") if line.startswith(b"> job pid "))
        assert first.rstrip().endswith("KAFKALAKE_MARK=m1"), first
        pid = int(first.split()[3])
        assert pid not in (host.pid, os.getpid())
        conn.close()
        deadline = time.monotonic() + 60
        while host.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert host.returncode == 0, "the host went on after a job it could not finish"
        assert not address.exists()
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
