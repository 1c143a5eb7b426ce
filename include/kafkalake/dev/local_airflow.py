"""Run the project's DAGs through a real, local Airflow: the demo's and the tests' way in.

Airflow keeps its SQLite metadata DB under ``AIRFLOW_HOME``; each DAG run goes through
``airflow dags test``, which runs every task in order, for real, in one process.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from kafkalake.airflow.pools import DEFAULT_SPARK_SLOTS, SPARK_POOL, pools_set_args
from kafkalake.airflow.sla_alerts import ENV_DEADLINE_ALERTS
from kafkalake.core.paths import ENV_CATALOG, ENV_LAKE_ROOT, REPO_ROOT
from kafkalake.dev import airflow_forkserver

#: Airflow's plugins folder: the freshness view's entry file (include/airflow_plugins/).
PLUGINS_FOLDER = REPO_ROOT / "include" / "airflow_plugins"
#: Where Airflow finds its SQLAlchemy connect arguments (an import path), in the environment.
SQLITE_CONNECT_ARGS_KEY = "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS"


class DagRunError(RuntimeError):
    def __init__(self, message: str, result: DagRunResult | None = None) -> None:
        super().__init__(message)
        #: The failed run, with its whole output, when it got as far as running.
        self.result = result


@dataclass(frozen=True)
class DagRunResult:
    dag_id: str
    run_id: str
    state: str
    task_states: dict[str, str]
    output: str


def java_home() -> str | None:
    java = shutil.which("java")
    return str(Path(java).resolve().parents[1]) if java else None


def environment(
    airflow_home: Path,
    *,
    kafka_bootstrap: str,
    catalog: Path | None = None,
    lake_root: Path | None = None,
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment Airflow's CLI runs in: our DAGs only, SQLite, a Kafka connection."""
    env = dict(os.environ if base is None else base)
    venv_bin = str(Path(sys.executable).parent)
    env.update(
        {
            "AIRFLOW_HOME": str(airflow_home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO_ROOT / "dags"),
            # The freshness view (kafkalake.airflow.freshness_view): its entry file, nothing else.
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(PLUGINS_FOLDER),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
            "PATH": venv_bin + os.pathsep + env.get("PATH", ""),
            "PYSPARK_PYTHON": sys.executable,
        }
    )
    env = with_kafka(env, kafka_bootstrap)
    if (home := java_home()) and "JAVA_HOME" not in env:
        env["JAVA_HOME"] = home
    if catalog is not None:
        env[ENV_CATALOG] = str(catalog)
    if lake_root is not None:
        env[ENV_LAKE_ROOT] = str(lake_root)
    return env


def with_kafka(env: Mapping[str, str], bootstrap: str) -> dict[str, str]:
    """``env`` with the DAGs' Kafka connection (``kafka_default``) on the broker at ``bootstrap``."""
    connection = {"conn_type": "kafka", "extra": {"bootstrap.servers": bootstrap}}
    return {**env, "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps(connection)}


def standalone_environment(
    env: Mapping[str, str], *, port: int, log_server_ports: tuple[int, int] = (8793, 8794)
) -> dict[str, str]:
    """``env`` for ``airflow standalone`` (api-server, scheduler, dag-processor, triggerer).

    The UI and REST API listen on 127.0.0.1:``port``. The DAGs keep their Deadline Alerts: this is
    a real scheduler, which watches them and runs the SLA-miss callback in the triggerer.

    Args:
        env: from :func:`environment`.
        port: the api-server's port (UI, REST API, and the execution API the task workers call).
        log_server_ports: where the worker's and the triggerer's log servers listen.
    """
    worker_logs, trigger_logs = log_server_ports
    standalone = {k: v for k, v in env.items() if k != ENV_DEADLINE_ALERTS}
    standalone.update(
        {
            "PYTHONUNBUFFERED": "1",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__API__WORKERS": "1",
            # Task workers call the api-server's execution API: on this port, not the default 8080.
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
            # Its 5 s default fails tasks (httpx.ReadTimeout) when a busy machine slows the api-server.
            "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "60",
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(worker_logs),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(trigger_logs),
            # A laptop, not a cluster: a few task slots rather than 32 idle worker processes.
            "AIRFLOW__CORE__PARALLELISM": env.get("AIRFLOW__CORE__PARALLELISM", "4"),
            # Four processes share the SQLite file: wait out a write lock rather than fail at 5 s.
            SQLITE_CONNECT_ARGS_KEY: "kafkalake.dev.airflow_sqlite.CONNECT_ARGS",
        }
    )
    return standalone


def admin_password(airflow_home: Path) -> str | None:
    """The admin password ``airflow standalone`` generated (simple auth manager), once it has."""
    try:
        passwords = json.loads((airflow_home / "simple_auth_manager_passwords.json.generated").read_text())
    except FileNotFoundError:
        return None
    return str(passwords["admin"])


def _calling_test(env: Mapping[str, str]) -> Mapping[str, str]:
    """``env`` naming the test that runs now: one made at a session's start holds the test of that
    moment, and a command and the jobs it starts are the calling test's (dev/suite_cpu sums CPU by
    the test in the environment)."""
    if test := os.environ.get("PYTEST_CURRENT_TEST"):
        return {**env, "PYTEST_CURRENT_TEST": test}
    return env


def _airflow(env: Mapping[str, str], *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = _calling_test(env)
    done = None
    if server := env.get(airflow_forkserver.ENV_FORKSERVER):
        done = airflow_forkserver.run(server, args, env)
    if done is None:
        done = subprocess.run(
            airflow_command(*args), env=dict(env), capture_output=True, text=True, check=False
        )
    if check and done.returncode != 0:
        raise DagRunError(
            f"`airflow {' '.join(args)}` exited {done.returncode}:\n{done.stdout[-3000:]}"
            f"\n{done.stderr[-3000:]}"
        )
    return done


class StartedAirflow(Protocol):
    """An Airflow command started in a process group of its own (:func:`start_airflow`)."""

    pid: int

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...


def start_airflow(env: Mapping[str, str], *args: str, output: Path) -> StartedAirflow:
    """Start Airflow's CLI in ``env`` in a process group of its own (``os.killpg(started.pid, …)``
    ends it and all under it), its output appended to ``output``: through ``env``'s fork server
    when it serves this configuration, else as a process of its own."""
    env = _calling_test(env)
    if server := env.get(airflow_forkserver.ENV_FORKSERVER):
        served = airflow_forkserver.start(server, args, env, output)
        if served is not None:
            return served
    with output.open("ab") as out:
        return subprocess.Popen(
            airflow_command(*args),
            env=dict(env),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def run_airflow(env: Mapping[str, str], *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run Airflow's CLI in ``env``; with ``check``, raise with its output unless it succeeded."""
    return _airflow(env, *args, check=check)


def init_db(env: Mapping[str, str]) -> None:
    """Create or upgrade the metadata DB and create the Spark pool (idempotent)."""
    Path(env["AIRFLOW_HOME"]).mkdir(parents=True, exist_ok=True)
    _airflow(env, "db", "migrate")
    ensure_spark_pool(env)


def ensure_spark_pool(env: Mapping[str, str]) -> int:
    """Create the Spark pool at its default size unless it exists; return its size.

    An existing pool keeps the size it was given (``airflow pools set kafkalake_spark N …``).
    Without the pool, a scheduler would leave every Spark task ``scheduled`` for good.
    """
    slots = pool_slots(Path(env["AIRFLOW_HOME"]), SPARK_POOL)
    if slots is None:
        _airflow(env, *pools_set_args(DEFAULT_SPARK_SLOTS))
        slots = DEFAULT_SPARK_SLOTS
    return slots


def pool_slots(airflow_home: Path, pool: str) -> int | None:
    """The size of a pool in the metadata DB; None when there is no such pool."""
    with sqlite3.connect(airflow_home / "airflow.db") as db:
        row = db.execute("SELECT slots FROM slot_pool WHERE pool = ?", (pool,)).fetchone()
    return int(row[0]) if row else None


@contextlib.contextmanager
def served_home(env: Mapping[str, str]) -> Iterator[dict[str, str]]:
    """``env`` with its metadata DB migrated and the DAGs serialized, its Airflow commands run
    through a fork server that imported Airflow once (:mod:`kafkalake.dev.airflow_forkserver`)
    until the block ends."""
    server = airflow_forkserver.AirflowForkServer(env).start()
    try:
        served = {**env, airflow_forkserver.ENV_FORKSERVER: server.socket}
        init_db(served)
        sync_dags(served)
        yield served
    finally:
        server.stop()


def sync_dags(env: Mapping[str, str]) -> None:
    """Serialize the DAGs into the metadata DB, which ``dags test`` needs since Airflow 3.1."""
    _airflow(env, "dags", "reserialize")


def latest_run(airflow_home: Path, dag_id: str) -> tuple[str, str, dict[str, str]]:
    with sqlite3.connect(airflow_home / "airflow.db") as db:
        row = db.execute(
            "SELECT run_id, state FROM dag_run WHERE dag_id = ? ORDER BY id DESC LIMIT 1", (dag_id,)
        ).fetchone()
        if row is None:
            raise DagRunError(f"no run of {dag_id} in {airflow_home}")
        tasks = db.execute(
            "SELECT task_id, state FROM task_instance WHERE dag_id = ? AND run_id = ?", (dag_id, row[0])
        ).fetchall()
    return row[0], row[1], {task: state for task, state in tasks}


@dataclass(frozen=True)
class AssetEvent:
    """One update of an asset, as Airflow recorded it."""

    asset_name: str
    asset_uri: str
    source_dag_id: str | None
    source_task_id: str | None
    source_run_id: str | None


def asset_events(airflow_home: Path, asset_name: str) -> list[AssetEvent]:
    """Every event of the asset with this name, oldest first, from the metadata DB."""
    with sqlite3.connect(airflow_home / "airflow.db") as db:
        rows = db.execute(
            "SELECT a.name, a.uri, e.source_dag_id, e.source_task_id, e.source_run_id"
            " FROM asset_event e JOIN asset a ON a.id = e.asset_id WHERE a.name = ? ORDER BY e.id",
            (asset_name,),
        ).fetchall()
    return [AssetEvent(*row) for row in rows]


def xcom_value(airflow_home: Path, run: DagRunResult, task_id: str, key: str = "return_value") -> Any:
    """A task's XCom value in a run, from the metadata DB; None when it pushed none under ``key``."""
    with sqlite3.connect(airflow_home / "airflow.db") as db:
        row = db.execute(
            "SELECT value FROM xcom WHERE dag_id = ? AND run_id = ? AND task_id = ? AND key = ?",
            (run.dag_id, run.run_id, task_id, key),
        ).fetchone()
    return json.loads(row[0]) if row and row[0] is not None else None


def task_seconds(airflow_home: Path, run: DagRunResult, task_id: str) -> float:
    """How long one task of a run took, from the metadata DB."""
    with sqlite3.connect(airflow_home / "airflow.db") as db:
        row = db.execute(
            "SELECT (julianday(end_date) - julianday(start_date)) * 86400 FROM task_instance"
            " WHERE dag_id = ? AND run_id = ? AND task_id = ?",
            (run.dag_id, run.run_id, task_id),
        ).fetchone()
    return float(row[0]) if row and row[0] is not None else float("nan")


def test_dag(
    env: Mapping[str, str],
    dag_id: str,
    *,
    sync: bool = True,
    mark_success: str | None = None,
    conf: Mapping[str, object] | None = None,
    first_try: bool = True,
) -> DagRunResult:
    """Run one DAG run end to end with ``airflow dags test``; raise unless it succeeded.

    ``mark_success`` is a regex of task ids marked successful instead of run; ``conf`` the run's
    conf, which sets the DAG's params (e.g. the topic of ``kafkalake_replay``). ``first_try``: raise
    too when a task succeeded only after a retry (a failure the retry policy hid); a test where a
    task is meant to fail first says ``first_try=False``.
    """
    if sync:
        sync_dags(env)
    args = dags_test_args(dag_id, mark_success, conf)
    done = _airflow(dags_test_environment(env), *args, check=False)
    output = done.stdout + done.stderr
    run_id, state, tasks = latest_run(Path(env["AIRFLOW_HOME"]), dag_id)
    result = DagRunResult(dag_id, run_id, state, tasks, output)
    if state != "success" or done.returncode != 0:
        raise DagRunError(
            f"{dag_id} run {run_id} ended {state} (exit {done.returncode}), tasks {tasks}:\n{output[-6000:]}",
            result,
        )
    retried = retried_tasks(Path(env["AIRFLOW_HOME"]), dag_id, run_id) if first_try else {}
    if retried:
        raise DagRunError(
            f"{dag_id} run {run_id} succeeded only after retries (task: try) {retried}:\n{output[-6000:]}",
            result,
        )
    return result


def retried_tasks(airflow_home: Path, dag_id: str, run_id: str) -> dict[str, int]:
    """{task id: try number} of the run's tasks that took more than one try."""
    with sqlite3.connect(airflow_home / "airflow.db") as db:
        rows = db.execute(
            "SELECT task_id, try_number FROM task_instance"
            " WHERE dag_id = ? AND run_id = ? AND try_number > 1",
            (dag_id, run_id),
        ).fetchall()
    return {task: int(tries) for task, tries in rows}


def dags_test_environment(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with the DAGs' Deadline Alerts off, for ``airflow dags test`` and nothing else.

    On Airflow 3.3.2, ``dag.test()`` (which ``airflow dags test`` runs) crashes once the tasks are
    done when the DAG has ``deadline=``: ``DagRun.update_state`` looks the alerts up by id, but the
    in-process DAG holds them as dicts (``'dict' object has no attribute 'hex'``), and the run is
    left "running". ``dags test`` runs one run in one process, with no scheduler to watch deadlines
    anyway, so leaving them off there costs nothing. The scheduler, ``airflow standalone`` and the
    DAG processor never see this switch: their DAGs keep the alert (tests/integration proves it
    fires in a real scheduler run).
    """
    return {**env, ENV_DEADLINE_ALERTS: "0"}


def dags_test_args(
    dag_id: str, mark_success: str | None = None, conf: Mapping[str, object] | None = None
) -> list[str]:
    """Arguments of ``airflow dags test`` for one DAG run."""
    args = ["dags", "test", dag_id, *(["--mark-success-pattern", mark_success] if mark_success else [])]
    return [*args, *(["--conf", json.dumps(dict(conf))] if conf is not None else [])]


def airflow_command(*args: str) -> list[str]:
    """The ``airflow`` CLI of this environment, for callers that run it themselves."""
    return [str(Path(sys.executable).parent / "airflow"), *args]


def task_tries(airflow_home: Path, dag_id: str, task_id: str) -> tuple[str | None, int] | None:
    """State and try number of a task in the newest run of a DAG; None before it exists.

    Safe to call while ``airflow dags test`` is running: it only reads the SQLite DB.
    """
    try:
        with sqlite3.connect(airflow_home / "airflow.db", timeout=5) as db:
            row = db.execute(
                "SELECT ti.state, ti.try_number FROM task_instance ti JOIN dag_run dr"
                " ON dr.dag_id = ti.dag_id AND dr.run_id = ti.run_id"
                " WHERE ti.dag_id = ? AND ti.task_id = ? ORDER BY dr.id DESC LIMIT 1",
                (dag_id, task_id),
            ).fetchone()
    except sqlite3.OperationalError:  # locked by the writer for a moment
        return None
    return (row[0], int(row[1])) if row else None
