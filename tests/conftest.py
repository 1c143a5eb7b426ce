"""Session-wide fixtures: one real Kafka broker, one lake, one Airflow home for the whole run.

Everything is started lazily, so the unit tests never pay for a broker or a JVM.
"""

from __future__ import annotations

import fcntl
import logging
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# Airflow reads its home when first imported; point it away from ~/airflow before any test does.
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="kafkalake-airflow-"))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
# Test traffic stays on loopback: Spark would otherwise bind the machine's external address.
os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
# The tests' Spark jobs are short and small: C2's compilations never pay back. C1 only cut a
# two-job test's CPU time from 192 to 140 s for the same wall time (launch/spark_conf).
# C1 only also shrinks the JVM's code cache to 48 MiB, which the in-process session (hundreds of
# distinct queries over a worker's run) fills: the sweeper then flushed compiled code and C1
# compiled it again. With 256 MiB, test_reingest's first test: JVM 131.8 -> 111.0 CPU-s (sweeper
# 11.9 -> 0, C1 17.7 -> 9.4).
os.environ.setdefault(
    "KAFKALAKE_DRIVER_JAVA_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=256m"
)

from kafkalake.dev import local_airflow
from kafkalake.dev.broker import SMALL_LOAD_JAVA_OPTIONS, LocalKafka
from kafkalake.dev.s3_server import LocalS3

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
  - name: it-lost-dag
    freshness_sla: 1h
    parsed: {latest_by_key: true}
  - name: it-recreated-dag
    freshness_sla: 1h
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


#: The broker's folder under the run's base temp folder (xdist: the workers' common parent).
SHARED_BROKER_DIR = "kafka-shared"


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


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The controller (or a run without xdist) stops the workers' shared broker, if one started."""
    if hasattr(session.config, "workerinput"):
        return
    folder = session.config._tmp_path_factory.getbasetemp() / SHARED_BROKER_DIR  # type: ignore[attr-defined]
    if folder.is_dir():
        LocalKafka(folder).stop()


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


@pytest.fixture(scope="session")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("lake")


@pytest.fixture(scope="session")
def catalog_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("catalog") / "topics.yaml"
    path.write_text(INTEGRATION_CATALOG)
    return path


@pytest.fixture(scope="session")
def airflow_env(
    tmp_path_factory: pytest.TempPathFactory, kafka: LocalKafka, lake: Path, catalog_file: Path
) -> Iterator[dict[str, str]]:
    """A migrated SQLite metadata DB and the environment `airflow dags test` runs in.

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
    from pyspark.sql import SparkSession

    from kafkalake.launch.jars import jar_files
    from kafkalake.launch.spark_conf import base_conf

    conf = {
        **base_conf(tmp_path_factory.mktemp("spark-lake")),
        "spark.jars": ",".join(str(p) for p in jar_files("spark")),
        # Generated classes by their code; the default 100 is too few for a session that runs
        # every in-process test's queries, and an evicted one is compiled (janino, then C1) again.
        # test_reingest's first test, JVM CPU-s: 102.5 and 100.6 at 100; 96.6 and 91.3 at 2000.
        "spark.sql.codegen.cache.maxEntries": "2000",
    }
    builder = SparkSession.builder.master("local[2]").appName("kafkalake-tests")
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    yield session
    session.stop()


#: Modules that use the in-process SparkSession (the ``spark`` fixture), in two work units: each
#: worker that runs one of them starts a session of its own (a JVM, ~1 GiB, its own JIT and code
#: generation warm-up), and with modules handed out one by one all four workers did (five sessions in
#: a full run, ~520 CPU-s between them). Two units of about equal length (module times of a full
#: run, 2026-11-25) keep it to two.
SHARED_SESSION = {
    "tests/integration/test_reingest.py": "spark session 1",
    "tests/integration/test_parsed_tables.py": "spark session 1",
    "tests/integration/test_table_settings.py": "spark session 1",
    "tests/integration/test_parsing_properties.py": "spark session 1",
    "tests/integration/test_parsing.py": "spark session 1",
    "tests/integration/test_transactions.py": "spark session 1",
    "tests/integration/test_full_refresh.py": "spark session 1",
    "tests/integration/test_field_names.py": "spark session 1",
    "tests/integration/test_table_care.py": "spark session 2",
    "tests/integration/test_lost_state.py": "spark session 2",
    "tests/integration/test_replay.py": "spark session 2",
    "tests/integration/test_json_functions.py": "spark session 2",
    "tests/integration/test_idempotent_append.py": "spark session 2",
}

#: Modules that use one server started on first use (tests/integration/airflow_server.py): one
#: work unit for xdist, so one worker runs them one after the other and the server starts once.
SHARED_SERVER = {
    "tests/integration/test_airflow_ui.py": "airflow standalone",
    "tests/integration/test_deadline_alert.py": "airflow standalone",
    "tests/integration/test_deployed_airflow.py": "airflow deployed",
    "tests/integration/test_backfill.py": "airflow deployed",
}

#: Test modules longest first (module times of a full run, -n 4, 2026-11-25: 1,207 s), the two
#: in-process Spark units first of all (~630 and ~690 s of module time each): modules are handed
#: out in this order (see pytest_xdist_make_scheduler), so the long ones start at once and the
#: short ones (and the unit tests) fill the workers' gaps at the end instead of a long module
#: starting last. A module not listed keeps its place after these.
LONGEST_FIRST = (
    # SHARED_SESSION's units, each one after the other.
    "tests/integration/test_reingest.py",
    "tests/integration/test_parsed_tables.py",
    "tests/integration/test_table_settings.py",
    "tests/integration/test_parsing_properties.py",
    "tests/integration/test_parsing.py",
    "tests/integration/test_transactions.py",
    "tests/integration/test_full_refresh.py",
    "tests/integration/test_field_names.py",
    "tests/integration/test_table_care.py",
    "tests/integration/test_lost_state.py",
    "tests/integration/test_replay.py",
    "tests/integration/test_json_functions.py",
    "tests/integration/test_idempotent_append.py",
    "tests/integration/test_object_store.py",
    "tests/integration/test_retries.py",
    "tests/integration/test_kill_and_rerun.py",
    "tests/integration/test_disk_full.py",
    "tests/integration/test_ingest_dag.py",
    # One worker runs these two: they share one `airflow standalone` (SHARED_SERVER).
    "tests/integration/test_airflow_ui.py",
    "tests/integration/test_deadline_alert.py",
    "tests/integration/test_kill_points.py",
    # And these two the deployed Airflow (PostgreSQL).
    "tests/integration/test_deployed_airflow.py",
    "tests/integration/test_backfill.py",
    "tests/integration/test_secured_kafka.py",
    "tests/integration/test_awkward_records.py",
    "tests/integration/test_spark_cluster.py",
    "tests/integration/test_shared_metastore.py",
    "tests/integration/test_assets.py",
)


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def work_unit(nodeid: str) -> str:
    """What xdist hands to one worker as a whole: a module, or the modules of a shared server or
    of a shared Spark session."""
    module = module_of(nodeid)
    return SHARED_SERVER.get(module) or SHARED_SESSION.get(module, module)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    # A stable sort: the tests of one module keep their order (they share module-scoped state).
    items.sort(key=lambda item: rank.get(module_of(item.nodeid), len(rank)))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's file scheduling, with the modules of a shared server as one unit, in LONGEST_FIRST
    order: xdist's default reorders units by their number of tests, which started the
    one-test modules that take minutes (the browser tests, the cluster) last."""
    from xdist.scheduler import LoadScopeScheduling

    class ModulesInOrder(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    config.option.loadscopereorder = False
    return ModulesInOrder(config, log)
