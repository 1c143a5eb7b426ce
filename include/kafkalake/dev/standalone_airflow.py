"""A real Airflow (``airflow standalone``: api-server, scheduler, dag-processor, triggerer) driven
from Python: start it, wait until it is healthy, call its REST API, trigger a run and wait for it.

The tests share one (tests/integration/airflow_server.py); the benchmark times an idle run in one,
as a scheduler runs it, rather than through ``airflow dags test`` and its in-process API server.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy
import sqlalchemy.exc

from kafkalake.dev import local_airflow
from kafkalake.dev.broker import free_port

__all__ = ["FinishedRun", "StandaloneAirflow", "free_port", "wait_for"]

logger = logging.getLogger(__name__)


def wait_for(
    condition: Callable[[], Any],
    *,
    what: str,
    timeout: float,
    every: float = 1.0,
    explain: Callable[[], str] | None = None,
) -> Any:
    """Poll ``condition`` until it returns something truthy; fail naming ``what`` after ``timeout``,
    with what ``explain`` tells of the state it was in (a failure in CI is all one gets to see)."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            message = f"timed out after {timeout:.0f}s waiting for {what}"
            if explain is not None:
                try:
                    message += "\n" + explain()
                except Exception as err:  # the timeout is the failure; a broken report must not hide it
                    message += f"\n(no report: {err!r})"
            raise AssertionError(message)
        time.sleep(every)


@dataclass(frozen=True)
class FinishedRun:
    """A DAG run the scheduler finished, with Airflow's own timestamps."""

    run_id: str
    state: str
    queued_at: datetime
    start_date: datetime
    end_date: datetime
    #: task_id → state
    task_states: dict[str, str]
    #: task_id → seconds from its start to its end (tasks that ran)
    task_seconds: dict[str, float]
    #: task_id → Airflow's try number (0: never tried; above 1: retried)
    task_tries: dict[str, int] = field(default_factory=dict)

    @property
    def retried(self) -> dict[str, int]:
        """The tasks that needed more than one try: a run meant to succeed must have none."""
        return {task: tries for task, tries in self.task_tries.items() if tries > 1}

    @property
    def seconds(self) -> float:
        """From queued (the trigger) to the end of its last task."""
        return (self.end_date - self.queued_at).total_seconds()


@dataclass
class StandaloneAirflow:
    url: str
    home: Path
    env: dict[str, str]
    log: Path
    process: subprocess.Popen[bytes] | None = None
    _token: str | None = field(default=None, repr=False)

    @property
    def password(self) -> str:
        password = local_airflow.admin_password(self.home)
        assert password, f"no generated admin password in {self.home}"
        return password

    def output(self, last: int = 8000) -> str:
        return self.log.read_text(errors="replace")[-last:] if self.log.exists() else ""

    def start(self) -> None:
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                local_airflow.airflow_command("standalone"),
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: stop() ends all four components
            )

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def healthy(self) -> bool:
        if not self.running():
            raise AssertionError(f"airflow standalone exited:\n{self.output()}")
        try:
            health = httpx.get(f"{self.url}/api/v2/monitor/health", timeout=5).json()
        except (httpx.HTTPError, ValueError):
            return False
        parts = ("metadatabase", "scheduler", "triggerer", "dag_processor")
        return all((health.get(part) or {}).get("status") == "healthy" for part in parts)

    def database_url(self) -> str:
        """The metadata DB's SQLAlchemy URL (standalone: SQLite in AIRFLOW_HOME)."""
        return f"sqlite:///{self.home / 'airflow.db'}"

    def query(self, sql: str, **params: Any) -> list[tuple[Any, ...]]:
        """Rows of a read-only query on the metadata DB (``:name`` parameters), whatever DB it is."""
        engine = sqlalchemy.create_engine(self.database_url(), poolclass=sqlalchemy.pool.NullPool)
        try:
            with engine.connect() as db:
                return [tuple(row) for row in db.execute(sqlalchemy.text(sql), params)]
        finally:
            engine.dispose()

    def dags_parsed(self, *dag_ids: str) -> bool:
        try:
            found = {row[0] for row in self.query("SELECT dag_id FROM dag WHERE NOT is_stale")}
        except sqlalchemy.exc.OperationalError:  # SQLite: locked by a writer for a moment
            return False
        return set(dag_ids) <= found

    def runs_report(self, dag_id: str) -> str:
        """The DAG's runs, their tasks and backfills as the metadata DB holds them, and the end of
        the server's log: what a test that timed out waiting on the scheduler shows."""
        lines: list[str] = []

        def section(title: str, columns: str, rest: str, indent: str = "  ", **params: Any) -> None:
            if title:
                lines.append(f"{title} ({columns}):")
            lines.extend(f"{indent}{row}" for row in self.query(f"SELECT {columns} {rest}", **params))

        run_columns = "run_id, run_type, state, queued_at, start_date, end_date, backfill_id"
        runs = self.query(
            f"SELECT {run_columns} FROM dag_run WHERE dag_id = :dag_id ORDER BY id", dag_id=dag_id
        )
        lines.append(f"runs of {dag_id} ({run_columns}), each with its tasks:")
        for run in runs:
            lines.append(f"  {run}")
            section(
                "",
                "task_id, state, try_number, hostname, start_date, end_date",
                "FROM task_instance WHERE dag_id = :dag_id AND run_id = :run_id",
                indent="    ",
                dag_id=dag_id,
                run_id=run[0],
            )
        section(
            "backfills",
            "id, from_date, to_date, is_paused, max_active_runs, completed_at",
            "FROM backfill WHERE dag_id = :dag_id",
            dag_id=dag_id,
        )
        section(
            "other DAGs' runs not finished",
            "dag_id, run_id, state",
            "FROM dag_run WHERE dag_id != :dag_id AND state NOT IN ('success', 'failed')",
            dag_id=dag_id,
        )
        lines.append(f"end of {self.log}:\n{self.output()}")
        return "\n".join(lines)

    def api(self, method: str, path: str, **kwargs: Any) -> Any:
        """Call the REST API as admin (JWT from ``/auth/token``)."""
        if self._token is None:
            answer = httpx.post(
                f"{self.url}/auth/token", json={"username": "admin", "password": self.password}, timeout=30
            )
            answer.raise_for_status()
            self._token = answer.json()["access_token"]
        # On SQLite the API server answers 500 when the scheduler holds the database's write lock
        # past its timeout (bench_topics: unpausing the 16th of 20 DAGs while 15 runs started).
        # A read or a PATCH can be sent again; a POST could create a second run, so it is not.
        attempts = 5 if method in ("GET", "PATCH") else 1
        for attempt in range(attempts):
            response = httpx.request(
                method,
                f"{self.url}/api/v2{path}",
                headers={"Authorization": f"Bearer {self._token}"},
                timeout=30,
                **kwargs,
            )
            if response.status_code < 500 or attempt == attempts - 1:
                break
            logger.warning("%s %s answered %d; trying again", method, path, response.status_code)
            time.sleep(2**attempt)
        response.raise_for_status()
        return response.json() if response.content else None

    def finished_run(self, dag_id: str, run_id: str) -> FinishedRun | None:
        """The run once it is over (success or failed); None while it is not."""
        run = self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}")
        if run["state"] not in ("success", "failed"):
            return None
        tasks = self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances")["task_instances"]
        return FinishedRun(
            run_id=run_id,
            state=run["state"],
            queued_at=datetime.fromisoformat(run["queued_at"]),
            start_date=datetime.fromisoformat(run["start_date"]),
            end_date=datetime.fromisoformat(run["end_date"]),
            task_states={t["task_id"]: t["state"] for t in tasks},
            task_seconds={t["task_id"]: t["duration"] for t in tasks if t.get("duration") is not None},
            task_tries={t["task_id"]: int(t.get("try_number") or 0) for t in tasks},
        )

    def trigger_and_wait(
        self, dag_id: str, timeout: float, conf: dict[str, Any] | None = None
    ) -> FinishedRun:
        """Trigger a run now (as "Trigger DAG" in the UI does) and wait for the scheduler to finish it."""
        run = self.api("POST", f"/dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": conf or {}})
        found: FinishedRun = wait_for(
            lambda: self.finished_run(dag_id, run["dag_run_id"]),
            what=f"run {run['dag_run_id']} of {dag_id} to finish",
            timeout=timeout,
            every=0.5,
            explain=lambda: self.runs_report(dag_id),
        )
        return found

    def stop(self) -> None:
        if self.running():
            assert self.process is not None
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=30)
