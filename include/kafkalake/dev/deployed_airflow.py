"""Airflow as it is deployed: PostgreSQL, the LocalExecutor, and each component its own process.

Where ``airflow standalone`` runs everything under one parent, this starts ``airflow api-server``,
``scheduler``, ``dag-processor`` and ``triggerer`` one by one (the components of
:data:`kafkalake.dev.topology.AIRFLOW_COMPONENTS`, the same the docker-compose file runs), each with
its own log file, sharing one environment and a metadata DB on PostgreSQL
(:mod:`kafkalake.dev.postgres`).

Secrets never sit in the environment or on a command line: the metadata DB's URL, the JWT secret
(which the scheduler and the api-server must share, or task tokens are refused), the Fernet key
and the UI's session key are read from 0600 files through Airflow's ``…_CMD`` settings, and the
admin password is in the simple auth manager's password file, also 0600. They all live in the
stack's ``secrets/`` folder, which :meth:`DeployedAirflow.stop` removes; the next start makes new ones.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.fernet import Fernet

from kafkalake.airflow.pools import DEFAULT_SPARK_SLOTS, SPARK_POOL, pools_set_args
from kafkalake.dev import local_airflow
from kafkalake.dev.postgres import Database, write_secret
from kafkalake.dev.standalone_airflow import StandaloneAirflow
from kafkalake.dev.topology import AIRFLOW_COMPONENTS

__all__ = ["AIRFLOW_COMPONENTS", "DeployedAirflow", "deployed_environment"]

ADMIN = "admin"
# Files in the secrets folder, each read by Airflow through a `…_CMD` setting.
_SECRET_SETTINGS = {
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD": "airflow-db.url",
    "AIRFLOW__API_AUTH__JWT_SECRET_CMD": "airflow-jwt.secret",
    "AIRFLOW__CORE__FERNET_KEY_CMD": "airflow-fernet.key",
    "AIRFLOW__API__SECRET_KEY_CMD": "airflow-api.secret",
}
USERS_FILE = "airflow-users.json"


def write_secrets(secrets_dir: Path, database: Database) -> None:
    """New secrets for a start, each in its own 0600 file (the DB URL holds the role's password)."""
    values = {
        "airflow-db.url": database.sqlalchemy_url("psycopg2"),
        "airflow-jwt.secret": secrets.token_urlsafe(48),
        "airflow-fernet.key": Fernet.generate_key().decode(),
        "airflow-api.secret": secrets.token_urlsafe(32),
    }
    for name, value in values.items():
        write_secret(secrets_dir / name, value)
    # The simple auth manager keeps the password it finds for a user, and prints none.
    write_secret(secrets_dir / USERS_FILE, json.dumps({ADMIN: secrets.token_urlsafe(18)}))


def deployed_environment(env: Mapping[str, str], secrets_dir: Path) -> dict[str, str]:
    """``env`` (from :func:`local_airflow.standalone_environment`) on PostgreSQL with the LocalExecutor."""
    # SQLite's busy timeout is no PostgreSQL connection argument: psycopg2 would refuse it.
    deployed = {k: v for k, v in env.items() if k != local_airflow.SQLITE_CONNECT_ARGS_KEY}
    deployed.update({key: f"cat {secrets_dir / name}" for key, name in _SECRET_SETTINGS.items()})
    deployed.update(
        {
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(secrets_dir / USERS_FILE),
        }
    )
    return deployed


@dataclass(kw_only=True)
class DeployedAirflow(StandaloneAirflow):
    """The four components on PostgreSQL; ``log`` is the folder of their log files."""

    secrets_dir: Path
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def password(self) -> str:
        return str(json.loads((self.secrets_dir / USERS_FILE).read_text())[ADMIN])

    def database_url(self) -> str:
        return (self.secrets_dir / _SECRET_SETTINGS["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD"]).read_text()

    def component_log(self, component: str) -> Path:
        return self.log / f"{component}.log"

    def output(self, last: int = 8000) -> str:
        parts = []
        for component in AIRFLOW_COMPONENTS:
            path = self.component_log(component)
            if path.exists():
                parts.append(f"--- {component} ---\n{path.read_text(errors='replace')[-last:]}")
        return "\n".join(parts)

    def init_db(self) -> None:
        """Create or upgrade the metadata DB, and create the Spark pool unless it exists."""
        self.home.mkdir(parents=True, exist_ok=True)
        config = self.home / "airflow.cfg"
        if not config.exists():
            # Airflow writes a default airflow.cfg with generated keys unless one exists: those would
            # sit in AIRFLOW_HOME unused (ours come from the …_CMD files) and look like the real ones.
            config.write_text("# kafkalake: every setting comes from the environment (deployed_airflow.py)\n")
        local_airflow.run_airflow(self.env, "db", "migrate")
        if local_airflow.run_airflow(self.env, "pools", "get", SPARK_POOL, check=False).returncode != 0:
            local_airflow.run_airflow(self.env, *pools_set_args(DEFAULT_SPARK_SLOTS))

    def start(self) -> None:
        self.log.mkdir(parents=True, exist_ok=True)
        for component in AIRFLOW_COMPONENTS:
            with self.component_log(component).open("ab") as out:
                self.processes[component] = subprocess.Popen(
                    local_airflow.airflow_command(component),
                    env=self.env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # its own process group: stop() ends its task processes too
                )

    def running(self) -> bool:
        """Every component is up; one that died fails :meth:`healthy` with its log."""
        return bool(self.processes) and all(p.poll() is None for p in self.processes.values())

    def healthy(self) -> bool:
        for component, process in self.processes.items():
            if process.poll() is not None:
                raise AssertionError(
                    f"airflow {component} exited {process.returncode}:\n"
                    f"{self.component_log(component).read_text(errors='replace')[-6000:]}"
                )
        return super().healthy()

    def stop(self) -> None:
        """Stop every component (api-server last: the others report to it), then remove the secrets."""
        for component in reversed(AIRFLOW_COMPONENTS):
            process = self.processes.pop(component, None)
            if process is None or process.poll() is not None:
                continue
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=30)
        shutil.rmtree(self.secrets_dir, ignore_errors=True)
