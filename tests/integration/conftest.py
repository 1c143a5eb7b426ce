"""Fixtures of the integration tests: one real Kafka broker, an S3 API server, one Airflow
environment and one in-process Spark session for the whole run, and the catalog of their topics.

Everything is started lazily, on the first test that asks. The lake folder and the stop of the
shared broker are in tests/conftest.py (the xdist controller loads only that file).
"""

from __future__ import annotations

import fcntl
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kafkalake.launch.submit import ENV_LAUNCHER_OPTS, LAUNCHER_JAVA_OPTIONS

from .jvm_options import C1_ONLY, INTERPRETED, SERIAL_GC

# Test traffic stays on loopback: Spark would otherwise bind the machine's external address.
os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
# The tests' Spark JVMs: C1 only, the serial collector, and Spark's expressions interpreted
# (.jvm_options says why).
os.environ.setdefault("KAFKALAKE_DRIVER_JAVA_OPTIONS", f"{C1_ONLY} {SERIAL_GC} {INTERPRETED}")
# spark-submit's launcher JVM as the jobs' (launch/submit): the in-process sessions and job hosts
# start theirs through PySpark, from this environment.
os.environ.setdefault(ENV_LAUNCHER_OPTS, LAUNCHER_JAVA_OPTIONS)

from conftest import SHARED_BROKER_DIR

from kafkalake.dev import job_host as hosting
from kafkalake.dev import local_airflow
from kafkalake.dev.broker import SMALL_LOAD_JAVA_OPTIONS, LocalKafka
from kafkalake.dev.in_process import local_session
from kafkalake.dev.s3_server import LocalS3
from kafkalake.dev.schema_registry import LocalRegistry
from kafkalake.kafka import schema_registry
from kafkalake.launch.job_host import ENV_JOB_HOST, socket_path

from . import airflow_server as servers
from .airflow_server import airflow_server, deployed_airflow_server
from .helpers import COMPILED, session_settings

__all__ = ["airflow_server", "deployed_airflow_server"]

# py4j logs every connection it closes at INFO, the last ones from __del__ at interpreter exit,
# when the stream a log handler set up during the run writes to is closed: each run with a Spark
# session ended in a "--- Logging error ---" trace.
logging.getLogger("py4j").setLevel(logging.WARNING)

#: The bucket of the object-store tests (tests/integration/test_object_store.py).
S3_BUCKET = "kafkalake-it"

#: Topics the integration tests use; each test owns its topic, so tests never see each other's data.
INTEGRATION_CATALOG = """\
topics:
  - name: it-events
    freshness_sla: 6h
    parsed: {latest_by_key: true}
  - name: it-killed
    freshness_sla: 1h
    max_offsets_per_trigger: 500
  - name: it-concurrent
    freshness_sla: 1h
    max_offsets_per_trigger: 500
    parsed: {latest_by_key: true}
  - name: it-kill-points
    freshness_sla: 1h
    max_offsets_per_trigger: 300
    parsed: {latest_by_key: true}
  - name: it-kill-points-off
    freshness_sla: 1h
    max_offsets_per_trigger: 300
    parsed: {latest_by_key: true}
  - name: it-lost-dag
    freshness_sla: 1h
    parsed: {latest_by_key: true}
  - name: it-recreated-dag
    freshness_sla: 1h
  - name: it-hosted
    freshness_sla: 1h
    parsed: false
  - topic_pattern: "it-fam-[a-z]+"
    table: it_family
    freshness_sla: 1h
    max_offsets_per_trigger: 10
    parsed: false
  - topic_pattern: 'it-route\\.(.*)'
    table_per_topic: 'it_route_\\1'
    freshness_sla: 1h
    parsed: false
  - topics: [it-pfam-a, it-pfam-b]
    table: it_pfamily
    freshness_sla: 1h
    max_offsets_per_trigger: 10
    parsed: {latest_by_key: true}
  - name: it-cdc.public.customers
    freshness_sla: 1h
    table: it_cdc_customers
    format: debezium
    max_offsets_per_trigger: 4
  - name: it-kill-care
    freshness_sla: 1h
    max_offsets_per_trigger: 250
    parsed: {latest_by_key: true}
    maintenance: {optimize_every: 1s, vacuum_retain: 0h, allow_vacuum_retain_below_7d: true}
  - name: it-cluster
    freshness_sla: 30m
  - name: it-retry
    freshness_sla: 3m
    max_offsets_per_trigger: 500
  - name: it-expired
    freshness_sla: 3m
  - name: it-retry-killed
    freshness_sla: 3m
    max_offsets_per_trigger: 500
  - name: it-assets
    freshness_sla: 1h
    priority: 5
  - name: it-replay-dag
    freshness_sla: 6h
  - name: it-reingest
    freshness_sla: 6h
    max_offsets_per_trigger: 500
    parsed: {latest_by_key: true}
  - name: it-awkward
    freshness_sla: 6h
    parsed: {latest_by_key: {changelog: true}}
  - name: it-care
    freshness_sla: 6h
    maintenance:
      optimize_every: 1s
      properties: {delta.logRetentionDuration: "interval 30 days"}
  - name: it-objectstore
    freshness_sla: 6h
    path: s3a://kafkalake-it/raw/it_objectstore
    storage_conn_id: it_objectstore
    parsed: {latest_by_key: true}
    maintenance: {optimize_every: 1s}
"""


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Iterator[LocalKafka]:
    """One broker for the whole run, shared by xdist's workers: the first to ask starts it, the
    others find it running (its pid file), and the controller stops it when the run ends
    (:func:`pytest_sessionfinish`). Tests never share a topic, so they never see each other's
    records. Each broker idles at ~1.2 CPU-s a minute and takes ~6 CPU-s to start: three of them
    cost a CPU-bound suite ~2 minutes of CPU. A test that stops its broker (an outage) starts one
    of its own (``private_kafka``)."""
    run_folder = tmp_path_factory.getbasetemp()
    if worker_id != "master":  # a worker's base temp folder is inside the controller's
        run_folder = run_folder.parent
    folder = run_folder / SHARED_BROKER_DIR
    folder.mkdir(exist_ok=True)
    with (folder.parent / f"{SHARED_BROKER_DIR}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one worker starts it; the others wait, then find it
        broker = LocalKafka(folder, java_options=SMALL_LOAD_JAVA_OPTIONS).start()
    yield broker


@pytest.fixture
def private_kafka(tmp_path: Path) -> Iterator[LocalKafka]:
    """A broker of the test's own, for a test that stops it: the shared one serves the others."""
    broker = LocalKafka(tmp_path / "kafka", java_options=SMALL_LOAD_JAVA_OPTIONS).start()
    yield broker
    broker.stop()


@pytest.fixture(scope="module")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalS3]:
    """A real S3 API server (s3proxy) on loopback, started only for the module that uses it
    (test_object_store.py) and stopped after it, not left running for the rest of the session."""
    server = LocalS3(tmp_path_factory.mktemp("s3"), bucket=S3_BUCKET).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRegistry]:
    """A schema registry (Apicurio, in memory) for the module that asks (test_schema_registry,
    test_registry_keys, test_registry_protobuf), stopped after it, as s3_server is: each test
    registers under subjects of its own. It starts in 3-4 s.

    The jobs' process-wide registry settings point at it for the module (the ingest job reads them
    from the file its task hands over; the tests run the job's code in-process)."""
    server = LocalRegistry(tmp_path_factory.mktemp("registry")).start()
    schema_registry.use(schema_registry.RegistrySettings(url=server.url, conn_id="it_registry"))
    yield server
    schema_registry.use(schema_registry.RegistrySettings())
    server.stop()


@pytest.fixture(scope="session")
def catalog_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("catalog") / "topics.yaml"
    path.write_text(INTEGRATION_CATALOG)
    return path


@pytest.fixture(scope="session", autouse=True)
def job_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """This worker's job host (dev/job_host): a warm Spark application that runs the DAG runs'
    jobs instead of a spark-submit each (~27 -> ~8 CPU-s for a short ingest, dev/bench_warm).

    Named in this worker's environment, so every Airflow environment a test builds from it has it.
    What it cannot stand in for goes to spark-submit (launch/job_host: kill points, clusters, object
    stores, the metastore's jobs); so do the runs of a test that drops it from its environment
    (one JVM per run measured, what ps shows, the soak's kills)."""
    folder = tmp_path_factory.mktemp("job-host")
    # A lake of its own: the jobs it runs serve any lake (the metastore's settings are no bar), and
    # a module's own `lake` fixture is not the session's.
    with hosting.running(folder, folder / "lake"):
        address = str(socket_path(folder))
        os.environ[ENV_JOB_HOST] = address
        yield address
        os.environ.pop(ENV_JOB_HOST, None)


@pytest.fixture(scope="session")
def airflow_env(
    tmp_path_factory: pytest.TempPathFactory, kafka: LocalKafka, lake: Path, catalog_file: Path, job_host: str
) -> Iterator[dict[str, str]]:
    """A migrated SQLite metadata DB and the environment `airflow dags test` runs in (this worker's
    job host among it).

    Its Airflow commands go through a fork server that imported Airflow once (an idle
    `dags test`: 10.5 -> 4.6 CPU-s); an environment that configures Airflow otherwise is run as a
    process of its own (dev/airflow_forkserver)."""
    env = local_airflow.environment(
        tmp_path_factory.mktemp("airflow-home"),
        kafka_bootstrap=kafka.bootstrap_servers,
        catalog=catalog_file,
        lake_root=lake,
    )
    env["KAFKALAKE_STRICT"] = "1"
    with local_airflow.served_home(env) as served:
        yield served


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One in-process SparkSession for the whole run, with the jobs' own settings and jars."""
    from kafkalake.launch.jars import jar_files
    from kafkalake.launch.spark_conf import base_conf

    conf = {
        **base_conf(tmp_path_factory.mktemp("spark-lake")),
        # Spark's Avro functions too: test_schema_registry's topics are in a registry's format.
        "spark.jars": ",".join(str(p) for p in [*jar_files("spark"), *jar_files("avro")]),
        # Generated classes by their code; the default 100 is too few for a session that runs
        # every in-process test's queries, and an evicted one is compiled (janino, then C1) again.
        # test_reingest's first test, JVM CPU-s: 102.5 and 100.6 at 100; 96.6 and 91.3 at 2000.
        "spark.sql.codegen.cache.maxEntries": "2000",
    }
    # Python UDFs (format: protobuf) in this venv's Python, as the jobs' PYSPARK_PYTHON has it
    # (the driver's SparkContext reads it when it starts, and names it to the workers).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = local_session("kafkalake-tests", conf)
    yield session
    session.stop()


@pytest.fixture(scope="module")
def compiled(spark: Any) -> Iterator[None]:
    """The shared session compiling expressions as Spark's defaults have it (helpers.COMPILED) for a
    module that tests generated code; the suite's other modules run it interpreted (INTERPRETED)."""
    with session_settings(spark, COMPILED):
        yield


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Iterator[None]:
    """Keep each phase's report on the test item, so fixtures can tell a failed test (screenshots)."""
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Stop a shared Airflow server once the next test on this worker does not use it."""
    servers.stop_unless_needed(nextitem)


def pytest_sessionfinish() -> None:
    """A server still running when the session ends early (an interrupt, -x) is stopped too."""
    servers.stop_unless_needed(None)
