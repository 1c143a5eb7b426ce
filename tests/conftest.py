"""What the whole suite shares: its Airflow home, one lake folder, the shared broker's stop, and the
xdist scheduler that hands out the modules longest first.

The integration tests' fixtures (the broker, the S3 server, the Airflow environment, the Spark
session) are in tests/integration/conftest.py, so the unit tests never load them. Under xdist the
controller loads only this file: what it must do (stop the workers' shared broker, schedule) is here.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# Airflow reads its home when first imported; point it away from ~/airflow before any test does.
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="kafkalake-airflow-"))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")

from kafkalake.dev import test_cpu
from kafkalake.dev.broker import LocalKafka
from kafkalake.dev.process_tree import tree_cpu_s

#: The broker's folder under the run's base temp folder (xdist: the workers' common parent). The
#: ``kafka`` fixture (tests/integration/conftest.py) starts it; the controller stops it here.
SHARED_BROKER_DIR = "kafka-shared"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """With KAFKALAKE_TEST_CPU_DIR set: the CPU-seconds of this worker's process tree over each
    test, set-up and tear-down included (kafkalake.dev.test_cpu)."""
    folder = os.environ.get(test_cpu.ENV_TEST_CPU_DIR)
    if not folder:
        yield
        return
    started, cpu = time.monotonic(), tree_cpu_s(os.getpid())
    yield
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    test_cpu.record(
        Path(folder), worker, item.nodeid, tree_cpu_s(os.getpid()) - cpu, time.monotonic() - started
    )


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The controller (or a run without xdist) stops the workers' shared broker, if one started."""
    if hasattr(session.config, "workerinput"):
        return
    folder = session.config._tmp_path_factory.getbasetemp() / SHARED_BROKER_DIR  # type: ignore[attr-defined]
    if folder.is_dir():
        LocalKafka(folder).stop()


@pytest.fixture(scope="session")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The lake root of the run: the integration tests' tables, and the unit tests' topic paths."""
    return tmp_path_factory.mktemp("lake")


#: Modules that use the in-process SparkSession (the ``spark`` fixture), in three work units: each
#: worker that runs one of them starts a session of its own (a JVM, ~1 GiB, its own JIT and code
#: generation warm-up), and with modules handed out one by one all four workers did (five sessions in
#: a full run, ~520 CPU-s between them). Two units of about equal length (module times of a full
#: run, 2026-11-25) kept it to two; test_families is a third (below).
SHARED_SESSION = {
    "tests/integration/test_reingest.py": "spark session 1",
    "tests/integration/test_parsed_tables.py": "spark session 1",
    "tests/integration/test_table_settings.py": "spark session 1",
    "tests/integration/test_parsing_properties.py": "spark session 1",
    "tests/integration/test_parsing.py": "spark session 1",
    "tests/integration/test_transactions.py": "spark session 1",
    "tests/integration/test_full_refresh.py": "spark session 1",
    "tests/integration/test_field_names.py": "spark session 1",
    "tests/integration/test_cdc.py": "spark session 1",
    "tests/integration/test_table_care.py": "spark session 2",
    "tests/integration/test_lost_state.py": "spark session 2",
    "tests/integration/test_replay.py": "spark session 2",
    "tests/integration/test_json_functions.py": "spark session 2",
    "tests/integration/test_protobuf_decode.py": "spark session 2",
    "tests/integration/test_idempotent_append.py": "spark session 2",
    "tests/integration/test_local_file_system.py": "spark session 2",
    "tests/integration/test_ingest_properties.py": "spark session 2",
    "tests/integration/test_schema_registry.py": "spark session 2",
    "tests/integration/test_registry_protobuf.py": "spark session 2",
    "tests/integration/test_registry_keys.py": "spark session 2",
    # A unit of its own: in session 2's it would make that worker's the suite's longest (module times
    # of d324181: families 942 s before its runs moved in-process, session 2's modules ~1,700 s).
    # Its own session (one JVM more, ~1 GiB) still costs less than the six spark-submits it replaced
    # (the module alone, cgroup CPU-s: 286 with them, 247-256 with the session).
    "tests/integration/test_families.py": "spark session 3",
}

#: Modules that use one server started on first use (tests/integration/airflow_server.py): one
#: work unit for xdist, so one worker runs them one after the other and the server starts once.
SHARED_SERVER = {
    "tests/integration/test_airflow_ui.py": "airflow standalone",
    "tests/integration/test_deadline_alert.py": "airflow standalone",
    "tests/integration/test_freshness_view.py": "airflow standalone",
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
    "tests/integration/test_cdc.py",
    "tests/integration/test_table_care.py",
    "tests/integration/test_lost_state.py",
    "tests/integration/test_replay.py",
    "tests/integration/test_json_functions.py",
    "tests/integration/test_protobuf_decode.py",
    "tests/integration/test_idempotent_append.py",
    "tests/integration/test_local_file_system.py",
    "tests/integration/test_ingest_properties.py",
    "tests/integration/test_schema_registry.py",
    "tests/integration/test_registry_protobuf.py",
    "tests/integration/test_registry_keys.py",
    "tests/integration/test_families.py",
    "tests/integration/test_object_store.py",
    "tests/integration/test_soak.py",
    "tests/integration/test_retries.py",
    "tests/integration/test_kill_and_rerun.py",
    # Its own airflow standalone and a few minutes of watcher events (3m SLA: a quiet minute and more).
    "tests/integration/test_freshness_schedule.py",
    "tests/integration/test_disk_full.py",
    "tests/integration/test_ingest_dag.py",
    # One worker runs these three: they share one `airflow standalone` (SHARED_SERVER).
    "tests/integration/test_airflow_ui.py",
    "tests/integration/test_deadline_alert.py",
    "tests/integration/test_freshness_view.py",
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
