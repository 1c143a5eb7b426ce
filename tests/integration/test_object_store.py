"""A topic whose tables and checkpoint live on a real S3 API server (s3proxy), through Airflow.

One topic, one small backlog and as few DAG runs as the assertions need, in order: a first run
lands 300 records in every table exactly once (and table care and registration run on them), an
idle run skips without a JVM, a wrong secret key fails the next run at once and the fixed connection
then lands the second batch that waited, a re-ingest fills gaps made in bronze and the parsed table,
and the replay DAG rebuilds the parsed tables from bronze. Every table is read back with delta-rs
and the connection's storage options; the connection's secret must appear in no log.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import socket
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from kafkalake.airflow.dag_factory import REPLAY_DAG_ID
from kafkalake.config.catalog import load_catalog
from kafkalake.config.tables import topic_tables
from kafkalake.config.topic import TopicConfig
from kafkalake.core.errors import EXIT_CODES, CheckpointLockedError, Kind, StoreUnreachableError
from kafkalake.core.job_failures import parse_failure_line
from kafkalake.core.paths import ENV_CATALOG
from kafkalake.dev import local_airflow, process_tree, producer
from kafkalake.dev.broker import LocalKafka
from kafkalake.dev.producer import Record
from kafkalake.dev.s3_server import LocalS3
from kafkalake.kafka.offsets import end_offsets
from kafkalake.lake import lease_lock, registry, small_files, store_refusal_kinds, store_settings
from kafkalake.lake.checkpoint import read_checkpoint
from kafkalake.lake.lease_lock import LeaseLock
from kafkalake.launch import jobs
from kafkalake.launch.handover import ENV_CLIENT_CONFIG_FILE, ENV_KEEP_CLIENT_CONFIG_FILE

from .helpers import assert_exactly_once, kafka_spots, newest_spots, ran_on_job_host, run_to_end

pytestmark = [pytest.mark.integration, pytest.mark.objectstore]

TOPIC = "it-objectstore"
CONN_ID = "it_objectstore"
PARTITIONS = 3
#: Tasks after the ingest, each a Spark start-up when it runs: left out where not under test.
FOLLOW_UPS = "^(refresh_schema|register_table|maintain_table)$"


def events(start: int, count: int) -> list[Record]:
    """JSON events on 13 keys; every 50th is malformed (a dead letter)."""
    return [
        Record(
            f"k{i % 13}".encode(),
            b"{not json" if i % 50 == 0 else f'{{"seq": {i}, "kind": "click"}}'.encode(),
            i % PARTITIONS,
        )
        for i in range(start, start + count)
    ]


@pytest.fixture(scope="module")
def since() -> datetime:
    """A time before the module's first record (the first test asks for it before producing): a
    re-ingest from it covers the whole topic."""
    return datetime.now(UTC) - timedelta(seconds=5)


#: The end of the topic's catalog entry: care on every run (`optimize_every: 1s`), so the first
#: run does it; then the default (daily).
ENTRY_END = "    storage_conn_id: it_objectstore\n    parsed: {latest_by_key: true}\n"
CARE_EVERY_RUN = ENTRY_END + "    maintenance: {optimize_every: 1s}\n"
DAILY_CARE = ENTRY_END
#: How each topic's entry starts in the catalog's text.
ENTRY_START = "\n  - name: "


@pytest.fixture(scope="module")
def store_catalog(catalog_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The module's own catalog, which the first test changes as a user would: the integration
    catalog's entry of this topic alone, so that each DAG run parses one topic's DAG, not twenty."""
    head, *entries = catalog_file.read_text().split(ENTRY_START)
    ours = [entry for entry in entries if entry.split("\n", 1)[0] == TOPIC]
    assert len(ours) == 1
    text = head + ENTRY_START + ours[0].rstrip("\n") + "\n"
    assert text.count(CARE_EVERY_RUN) == 1
    path = tmp_path_factory.mktemp("store-catalog") / "topics.yaml"
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def topic(store_catalog: Path, lake: Path, kafka: LocalKafka, s3_server: LocalS3) -> Iterator[TopicConfig]:
    producer.create_topic(kafka.bootstrap_servers, TOPIC, partitions=PARTITIONS)
    # This process reads the tables back with the same settings the tasks use.
    store_settings.use(s3_server.storage_settings())
    yield load_catalog(store_catalog, lake).topic(TOPIC)
    store_settings.use(store_settings.StorageSettings())


@pytest.fixture(scope="module")
def env(airflow_env: dict[str, str], s3_server: LocalS3, store_catalog: Path) -> dict[str, str]:
    """The DAG runs' environment, with the topic's storage connection (Airflow's env-var backend)."""
    return {
        **airflow_env,
        ENV_CATALOG: str(store_catalog),
        f"AIRFLOW_CONN_{CONN_ID.upper()}": s3_server.connection_uri(),
    }


def run_dag(
    env: dict[str, str], s3_server: LocalS3, dag_id: str, **kwargs: Any
) -> local_airflow.DagRunResult:
    run = local_airflow.test_dag(env, dag_id, sync=False, **kwargs)
    _access_key, secret = s3_server.credentials()
    assert secret not in run.output, "the storage secret reached a task log"
    return run


def rows(location: str) -> list[dict[str, Any]]:
    table = store_settings.open_delta(location)
    assert table is not None, f"no Delta table at {location}"
    return table.to_pyarrow_table().to_pylist()


def spot(row: dict[str, Any]) -> tuple[int, int]:
    kafka = row.get("_kafka", row)
    return kafka["partition"], kafka["offset"]


def assert_tables_agree(topic: TopicConfig, kafka: LocalKafka) -> None:
    """Bronze holds every offset Kafka has once; parsed + dead letters the same; latest each key's last."""
    assert_exactly_once(rows(topic.path), TOPIC, kafka.bootstrap_servers)
    expected = {
        (p, o)
        for p, end in end_offsets({"bootstrap.servers": kafka.bootstrap_servers}, TOPIC).items()
        for o in range(end)
    }
    parsed = rows(topic.parsed_path)
    dead = rows(topic.dead_letter_path)
    both = Counter(spot(r) for r in parsed + dead)
    assert set(both) == expected and max(both.values()) == 1
    assert {r["reason"] for r in dead} == {"malformed_json"}
    last = newest_spots(kafka_spots(parsed))
    assert {r["_kafka"]["key"]: spot(r) for r in rows(topic.latest_path)} == last


def run_ingest_job(
    kafka: LocalKafka, catalog: Path, lake: Path, handed: Path, settings: store_settings.StorageSettings
) -> subprocess.CompletedProcess[str]:
    """The ingest job run as its task runs it, handed ``settings`` in the private file ``handed``
    (which the job deletes on read)."""
    kafka_settings = handed.with_name("kafka.json")
    kafka_settings.write_text(json.dumps({"bootstrap.servers": kafka.bootstrap_servers}))
    handed.write_text(settings.to_json())
    handed.chmod(0o600)
    env = {
        **jobs.environment(catalog, lake),
        ENV_CLIENT_CONFIG_FILE: str(kafka_settings),
        ENV_KEEP_CLIENT_CONFIG_FILE: "1",
        store_settings.ENV_STORAGE_CONFIG_FILE: str(handed),
    }
    return run_to_end("ingest_topic", TOPIC, catalog=catalog, lake=lake, env=env)


def delete_rows(location: str, predicate: str) -> int:
    """Remove rows as a restore to an older copy would (delta-rs, on the store)."""
    from deltalake import DeltaTable

    # Nothing else writes meanwhile: delta-rs may then commit by copy and delete on S3.
    options = {**(store_settings.delta_options(location) or {}), "AWS_S3_ALLOW_UNSAFE_RENAME": "true"}
    table = DeltaTable(location, storage_options=options)
    append_only = table.metadata().configuration.get("delta.appendOnly") == "true"
    if append_only:
        table.alter.set_table_properties({"delta.appendOnly": "false"})
    deleted = int(table.delete(predicate)["num_deleted_rows"])
    if append_only:
        DeltaTable(location, storage_options=options).alter.set_table_properties({"delta.appendOnly": "true"})
    return deleted


def test_first_run_lands_every_table_once_on_the_store_with_care_and_registration(
    env, s3_server, kafka, topic, lake, since, store_catalog
):
    producer.produce(kafka.bootstrap_servers, TOPIC, events(0, 300))

    run = run_dag(env, s3_server, topic.dag_id)

    assert run.task_states == {
        "check_new_offsets": "success",
        "ingest": "success",
        "refresh_schema": "success",
        "register_table": "success",
        # optimize_every 1s: due as soon as the tables exist, so care runs on them in this run.
        "maintain_table": "success",
    }
    assert "first run: no checkpoint yet" in run.output
    # The care was due: the ingest job did it in its own Spark application, its task only reports.
    assert re.search(r"done in the ingest job's Spark application \(no JVM started\): .*OPTIMIZE", run.output)
    assert_tables_agree(topic, kafka)
    # The checkpoint, the schema history and the registration records are where they belong.
    state = read_checkpoint(topic.checkpoint_path, TOPIC)
    assert state is not None and sum(state.committed.values()) == 300
    assert "000001.json" in small_files.names(topic.schema_dir)
    assert not Path("s3a:").exists(), "something wrote an s3a:// location to a local relative path"
    records = registry.registry_dir(lake)
    assert all(registry.is_recorded(records, table) for table in topic_tables(topic))
    for table in topic_tables(topic):
        history = store_settings.open_delta(table.location).history()  # type: ignore[union-attr]
        operations = {commit["operation"] for commit in history}
        assert {"OPTIMIZE", "VACUUM END"} <= operations or table.kind == "latest", (table.name, operations)

    # From here on the catalog asks for the default care (daily), as a user's would: the module's
    # later runs land, re-ingest and replay without a care pass each (~15 s a run on the store).
    store_catalog.write_text(store_catalog.read_text().replace(CARE_EVERY_RUN, DAILY_CARE))
    assert (
        load_catalog(store_catalog, lake).topic(TOPIC).maintenance.optimize_every
        != topic.maintenance.optimize_every
    )


def test_an_idle_run_reads_the_store_and_skips_the_spark_job(env, s3_server, topic):
    run = run_dag(env, s3_server, topic.dag_id, mark_success="^maintain_table$")

    assert run.task_states["check_new_offsets"] == "success"
    assert run.task_states["ingest"] == "skipped"
    assert "skipping the Spark job: the table already holds every offset Kafka has" in run.output


def test_a_wrong_secret_fails_the_run_at_once_naming_the_connection(
    env, s3_server, kafka, store_catalog, lake, topic, tmp_path
):
    """A stranger's typo in the storage connection's secret key: the pre-flight fails the run at once
    with ``authentication_failed`` naming the connection (no three retries as ``unknown``), the
    ingest job reports the same kind where it meets the store, the secret shows nowhere. The
    records it produced wait for the next test's run, with the right connection."""
    producer.produce(kafka.bootstrap_servers, TOPIC, events(300, 150))
    wrong = "wrong-" + uuid.uuid4().hex
    connection = {**s3_server.connection(), "password": wrong}
    bad_env = {**env, f"AIRFLOW_CONN_{CONN_ID.upper()}": json.dumps(connection)}

    with pytest.raises(local_airflow.DagRunError) as raised:
        local_airflow.test_dag(bad_env, topic.dag_id, sync=False)
    run = raised.value.result
    assert run is not None
    assert run.task_states["check_new_offsets"] == "failed"
    assert run.task_states["ingest"] in ("upstream_failed", None)
    assert "[authentication_failed]" in run.output
    assert "the object store refused the credentials of connection 'it_objectstore'" in run.output
    assert local_airflow.task_tries(Path(env["AIRFLOW_HOME"]), topic.dag_id, "check_new_offsets") == (
        "failed",
        1,
    ), "retried: the policy should fail it at once"
    assert wrong not in run.output

    # The job run with the same settings (a retried ingest task after the key was changed) meets
    # the refusal at its first read of the store, and reports it as its kind and exit code.
    handed = tmp_path / "store_settings.json"
    done = run_ingest_job(
        kafka, store_catalog, lake, handed, dataclasses.replace(store_settings.current(), secret_key=wrong)
    )
    output = done.stdout + done.stderr
    assert done.returncode == EXIT_CODES[Kind.AUTHENTICATION_FAILED], output[-3000:]
    reported = parse_failure_line(output)
    assert reported is not None and reported.kind is Kind.AUTHENTICATION_FAILED, output[-3000:]
    assert "the object store refused the credentials of connection 'it_objectstore'" in reported.message
    assert wrong not in output and not handed.exists()
    # On the job host, after DAG runs that reached the store with the right secret. The job meets
    # the refusal on its Python side first; that the JVM's S3A state is reset between jobs is
    # test_job_host's test.
    assert ran_on_job_host(done)


def test_a_store_that_does_not_answer_is_store_unreachable_and_retried(
    kafka, store_catalog, lake, topic, tmp_path
):
    """The store's endpoint down (nothing listens there): the pre-flight's readers and the job say
    the object store did not answer, as a transient kind that retries, never "Kafka did not answer"."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    before = store_settings.current()
    down = dataclasses.replace(before, endpoint=f"http://127.0.0.1:{port}")
    store_settings.use(down)
    try:
        for read in (
            lambda: store_settings.open_delta(topic.path),
            lambda: read_checkpoint(topic.checkpoint_path, TOPIC),
        ):
            with pytest.raises(
                StoreUnreachableError, match=rf"the object store at 127\.0\.0\.1:{port} did not answer"
            ):
                with store_refusal_kinds.named(TOPIC, CONN_ID):
                    read()
    finally:
        store_settings.use(before)
    done = run_ingest_job(kafka, store_catalog, lake, tmp_path / "store_settings.json", down)
    output = done.stdout + done.stderr
    assert done.returncode == EXIT_CODES[Kind.STORE_UNREACHABLE], output[-3000:]
    reported = parse_failure_line(output)
    assert reported is not None and reported.kind is Kind.STORE_UNREACHABLE and reported.retryable
    assert f"the object store at 127.0.0.1:{port} did not answer" in reported.message, reported.message
    assert ran_on_job_host(done)  # after jobs that reached the store that answers


def test_the_batch_that_waited_lands_once_with_the_fixed_connection(env, s3_server, kafka, topic):
    """The records the wrong secret kept out (produced by the test before): every offset once."""
    run = run_dag(env, s3_server, topic.dag_id, mark_success="^maintain_table$")

    assert run.task_states["ingest"] == "success"
    assert_tables_agree(topic, kafka)


def test_reingest_fills_gaps_in_the_stores_tables(env, s3_server, kafka, topic, since):
    assert delete_rows(topic.path, "partition = 0 AND offset < 20") == 20
    assert delete_rows(topic.parsed_path, "_kafka.partition = 1 AND _kafka.offset < 10") == 10

    run = run_dag(
        env,
        s3_server,
        topic.dag_id,
        mark_success=FOLLOW_UPS,
        conf={"reingest_from": since.isoformat(), "confirm_reingest": True},
    )

    assert run.task_states["ingest"] == "success"
    assert "re-ingest window: 450 records" in run.output
    assert_tables_agree(topic, kafka)


def test_the_replay_dag_rebuilds_the_parsed_tables_on_the_store(env, s3_server, kafka, topic):
    bronze_version = store_settings.open_delta(topic.path).version()  # type: ignore[union-attr]

    run = run_dag(env, s3_server, REPLAY_DAG_ID, conf={"topic": TOPIC})

    assert run.task_states == {"replay": "success"}
    assert "re-parsed 450 records of bronze version" in run.output
    assert store_settings.open_delta(topic.path).version() == bronze_version  # type: ignore[union-attr]
    assert_tables_agree(topic, kafka)


def test_the_lock_object_on_the_real_server(s3_server, topic):
    """The lease lock's conditional PUTs as s3proxy answers them: one holder, a stalled holder's
    lease taken over once it ran out (on the server's clock), a release handing it on at once."""
    location = f"s3a://{s3_server.bucket}/it-lease/{uuid.uuid4().hex}/checkpoint.lock"
    first = LeaseLock(location, lease=5)
    first.take()
    with pytest.raises(CheckpointLockedError, match=f"pid {os.getpid()} on host "):
        LeaseLock(location, lease=5).take()
    first._stop.set()  # frozen: no more renewals
    time.sleep(lease_lock.takeover_after(5) + 1.5)  # Last-Modified counts whole seconds
    second = LeaseLock(location, lease=5)
    second.take()
    assert first.renew_once() is False and first.lost is not None
    with pytest.raises(CheckpointLockedError):
        LeaseLock(location, lease=5).take()
    second.release()
    third = LeaseLock(location, lease=5)
    third.take()  # released: no wait for the lease
    third.release()


def hand_job_env(kafka: LocalKafka, catalog: Path, lake: Path, folder: Path, lease: str) -> dict[str, str]:
    """A hand-run ingest job's environment: its own Kafka and storage settings files (which the job
    reads and deletes, as from its task) in ``folder``, and its run lock's lease."""
    folder.mkdir()
    kafka_settings = folder / "kafka.json"
    kafka_settings.write_text(json.dumps({"bootstrap.servers": kafka.bootstrap_servers}))
    handed = folder / "store_settings.json"
    handed.write_text(store_settings.current().to_json())
    handed.chmod(0o600)
    return {
        **jobs.environment(catalog, lake),
        ENV_CLIENT_CONFIG_FILE: str(kafka_settings),
        ENV_KEEP_CLIENT_CONFIG_FILE: "1",
        store_settings.ENV_STORAGE_CONFIG_FILE: str(handed),
        lease_lock.ENV_LEASE_SECONDS: lease,
    }


def test_a_second_ingest_on_the_store_meanwhile_is_turned_away(kafka, store_catalog, lake, topic, tmp_path):
    """Two drivers on one s3a topic (a job started by hand beside the DAG's): the first is frozen
    (SIGSTOP) while it holds the lock object; the second is refused with checkpoint_locked, naming
    the first's driver; the first then lands everything once."""
    producer.produce(kafka.bootstrap_servers, TOPIC, events(450, 200))

    def job_env(name: str) -> dict[str, str]:
        # The frozen holder must not lose its lease while the second job starts its JVM.
        return hand_job_env(kafka, store_catalog, lake, tmp_path / name, lease="900")

    cmd = jobs.command("ingest_topic", TOPIC, catalog=store_catalog, lake=lake)
    lock = lease_lock.LeaseLock(topic.checkpoint_path + ".lock", lease=900)
    before = lock.client.get_object(Bucket=lock.bucket, Key=lock.key)["ETag"]
    first = subprocess.Popen(
        cmd,
        env=job_env("first"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:

        def holder() -> lease_lock.Holder | None:
            found = lock.client.get_object(Bucket=lock.bucket, Key=lock.key)
            if found["ETag"] == before:
                return None
            held = lease_lock.Holder.parse(found["Body"].read())
            return held if held is not None and not held.released else None

        deadline = time.monotonic() + 300
        while holder() is None:
            assert first.poll() is None, (
                f"the first job ended (exit {first.returncode}) before taking the lock"
            )
            assert time.monotonic() < deadline, "the first job never took the lock"
            time.sleep(0.1)
        os.killpg(first.pid, signal.SIGSTOP)
        second = run_to_end("ingest_topic", TOPIC, catalog=store_catalog, lake=lake, env=job_env("second"))
        os.killpg(first.pid, signal.SIGCONT)

        assert second.returncode == EXIT_CODES[Kind.CHECKPOINT_LOCKED], second.stdout[-3000:]
        held = holder()
        assert held is not None
        assert f"in use by another run: pid {held.pid} on host" in second.stdout
        assert first.wait(timeout=600) == 0
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGCONT)
            os.killpg(first.pid, signal.SIGKILL)
    released = lease_lock.Holder.parse(
        lock.client.get_object(Bucket=lock.bucket, Key=lock.key)["Body"].read()
    )
    assert released is not None and released.released
    assert_tables_agree(topic, kafka)


def store_objects(topic: TopicConfig, client: Any) -> dict[str, str]:
    """Every object of the topic's tables and checkpoint, with its ETag (the lock object aside)."""
    found: dict[str, str] = {}
    for table in topic_tables(topic):
        bucket, prefix = lease_lock.bucket_and_key(table.location)
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/"):
            found |= {o["Key"]: o["ETag"] for o in page.get("Contents", []) if not o["Key"].endswith(".lock")}
    return found


def test_a_holder_frozen_past_its_lease_writes_nothing_after_the_takeover(
    kafka, store_catalog, lake, topic, tmp_path
):
    """The fence: a driver freezes (SIGSTOP, as a long GC pause or a suspended VM would) right
    before its bronze commit, holding the lock with an 8 s lease. A second driver takes the lock
    over once the lease and its margin ran out, and lands everything. The first then wakes up in
    the middle of its batch: it must stop with checkpoint_locked and write not one object (table
    file, log entry, checkpoint file) after the takeover."""
    producer.produce(kafka.bootstrap_servers, TOPIC, events(650, 120))

    def job_env(name: str, **extra: str) -> dict[str, str]:
        return {**hand_job_env(kafka, store_catalog, lake, tmp_path / name, lease="8"), **extra}

    cmd = jobs.command("ingest_topic", TOPIC, catalog=store_catalog, lake=lake)
    first = subprocess.Popen(
        cmd,
        env=job_env(
            "first",
            KAFKALAKE_KILL_AT="ingest:before_bronze_commit",
            KAFKALAKE_KILL_SIGNAL="SIGSTOP",
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    client = small_files.s3_client()
    try:
        deadline = time.monotonic() + 300
        while not any(stopped(pid) for pid in process_tree.tree(first.pid)):
            assert first.poll() is None, f"the first job ended (exit {first.returncode}) before its commit"
            assert time.monotonic() < deadline, "the first job never reached its bronze commit"
            time.sleep(0.1)
        # Its last renewal was at most a sixth of the lease before it froze; whole seconds on the server.
        time.sleep(lease_lock.takeover_after(8) + 1.5)
        second = run_to_end("ingest_topic", TOPIC, catalog=store_catalog, lake=lake, env=job_env("second"))
        assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
        assert "taking it over" in second.stdout + second.stderr
        assert_tables_agree(topic, kafka)
        after_takeover = store_objects(topic, client)

        os.killpg(first.pid, signal.SIGCONT)
        output, _ = first.communicate(timeout=600)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGCONT)
            os.killpg(first.pid, signal.SIGKILL)
    assert first.returncode == EXIT_CODES[Kind.CHECKPOINT_LOCKED], output[-3000:]
    assert "past half its 8 s lease" in output or "taken over by another run" in output, output[-3000:]
    assert store_objects(topic, client) == after_takeover
    assert_tables_agree(topic, kafka)


def stopped(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"
    except (OSError, IndexError):
        return False


def test_create_text_on_the_store_never_overwrites(s3_server, topic):
    """The schema history's versions are claimed by name: the second claim fails, the first stays."""
    location = f"s3a://{s3_server.bucket}/it-create/{uuid.uuid4().hex}/000001.json"
    small_files.create_text(location, "first")
    with pytest.raises(FileExistsError, match=r"000001\.json"):
        small_files.create_text(location, "second")
    assert small_files.read_text(location) == "first"
