"""A private PostgreSQL cluster on loopback, for Airflow's metadata DB and the Hive metastore.

PostgreSQL's server binaries run a cluster of our own, never the system service: ``initdb`` into a
directory, a free port on 127.0.0.1, ``pg_ctl`` to start and stop it. The binaries are found by
:func:`find_pg_bin`: ``KAFKALAKE_PG_BIN`` if set, else the newest major version Debian installed
(``/usr/lib/postgresql/<major>/bin``: 15 on Debian 12, 17 on Debian 13), else ``pg_config --bindir``
(other distributions). ``bin`` prints that folder, or fails when there is none (``make postgresql``
then installs Debian's ``postgresql``).

    python -m kafkalake.dev.postgres start|stop|status|remove|bin [--dir .stack/postgres] [--logical]

``logical_replication`` (``--logical``) starts the cluster with ``wal_level=logical`` and room for a
few replication slots, for change data capture (:mod:`kafkalake.dev.cdc_source`: Debezium reads the
changes through the built-in ``pgoutput`` plugin). It is a start option, not written into the
cluster's configuration: the same cluster starts either way, and the setting takes effect at a start.

Who may connect, and with what:
- Over TCP (127.0.0.1 only) every role logs in with a password (scram-sha-256). Each database gets
  a role of its own whose password is generated at every start; it lives in a 0600 file in the
  cluster's directory (``secrets/<role>.password``) while the cluster runs, and ``stop`` removes it.
  Passwords reach PostgreSQL through psql's standard input, never a command line.
- The Unix socket sits in a 0700 directory owned by the cluster's user; only that user (and root)
  can reach it, and it is trusted: that is how this module creates roles and databases.

initdb refuses to run as root. Run as root (as tests and CI here do), the cluster runs as an
unprivileged user (``postgres``, which Debian's package creates; ``KAFKALAKE_PG_USER`` names
another) through ``setpriv``, and its data lives in a directory of that user's under the system temp
folder (pytest's temp folders, 0700 root, are closed to it); ``<dir>/cluster.json`` says where.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import pwd
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kafkalake.core.paths import REPO_ROOT
from kafkalake.dev.broker import free_port

log = logging.getLogger(__name__)

ENV_PG_BIN = "KAFKALAKE_PG_BIN"
ENV_PG_USER = "KAFKALAKE_PG_USER"
#: Where Debian's postgresql-<major> packages put each major version's server binaries, side by side.
DEBIAN_PG_ROOT = Path("/usr/lib/postgresql")
#: The cluster's superuser: it logs in over the Unix socket only (no password is ever set).
SUPERUSER = "kafkalake"
START_TIMEOUT = 60


class PostgresError(RuntimeError):
    pass


#: Server options of a cluster that serves change data capture: logical decoding, and a few slots
#: and WAL senders (one per connector).
_LOGICAL_OPTIONS = ("-c wal_level=logical", "-c max_replication_slots=8", "-c max_wal_senders=8")


@dataclass(frozen=True)
class Database:
    """A database of the cluster, with its own role; the password is read from its file on use."""

    name: str
    user: str
    host: str
    port: int
    password_file: Path

    def password(self) -> str:
        try:
            return self.password_file.read_text().strip()
        except FileNotFoundError:
            raise PostgresError(
                f"no password file {self.password_file} for role {self.user}: is the cluster running?"
            ) from None

    def sqlalchemy_url(self, driver: str = "psycopg2") -> str:
        """A SQLAlchemy URL with the password in it: keep it in memory or in a 0600 file."""
        return f"postgresql+{driver}://{self.user}:{self.password()}@{self.host}:{self.port}/{self.name}"

    @property
    def jdbc_url(self) -> str:
        """The JDBC URL, without credentials."""
        return f"jdbc:postgresql://{self.host}:{self.port}/{self.name}"


def _major_version(folder: Path) -> tuple[int, ...]:
    """``15`` → (15,), ``9.6`` → (9, 6); a name that is no version sorts before every version."""
    parts = folder.name.split(".")
    return tuple(int(p) for p in parts) if all(p.isdigit() for p in parts) else ()


def _has_server(folder: Path) -> bool:
    # initdb is the server package's own: the client package alone (psql, pg_dump) is not enough.
    return (folder / "initdb").is_file() and (folder / "pg_ctl").is_file()


def _pg_config_bindir(pg_config: str | None) -> Path | None:
    if pg_config is None:
        return None
    try:
        done = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, timeout=30)
    except OSError:
        return None
    return Path(done.stdout.strip()) if done.returncode == 0 and done.stdout.strip() else None


def find_pg_bin(
    environ: dict[str, str] | None = None,
    *,
    root: Path = DEBIAN_PG_ROOT,
    pg_config: str | None = "",
) -> tuple[Path | None, list[Path]]:
    """The folder of PostgreSQL's server binaries, or None; and every folder looked at, in order.

    ``KAFKALAKE_PG_BIN``, when set, is the only candidate: a folder someone chose is never silently
    replaced by another version. Else Debian's folders, newest major version first (an upgrade
    leaves the old major installed beside the new), then ``pg_config --bindir``. ``pg_config``: the
    program to ask (``""``: the one on PATH; None: do not ask).
    """
    environ = dict(os.environ) if environ is None else environ
    if chosen := environ.get(ENV_PG_BIN):
        return (Path(chosen) if _has_server(Path(chosen)) else None), [Path(chosen)]
    majors = sorted((d for d in root.glob("*") if d.is_dir()), key=_major_version, reverse=True)
    candidates = [d / "bin" for d in majors]
    from_pg_config = _pg_config_bindir(shutil.which("pg_config") if pg_config == "" else pg_config)
    if from_pg_config is not None and from_pg_config not in candidates:
        candidates.append(from_pg_config)
    return next((c for c in candidates if _has_server(c)), None), candidates


def pg_bin() -> Path:
    found, looked = find_pg_bin()
    if found is None:
        where = ", ".join(str(p) for p in looked) or f"nothing under {DEBIAN_PG_ROOT}, no pg_config on PATH"
        raise PostgresError(
            f"no PostgreSQL server binaries (initdb, pg_ctl) found (looked at: {where}): run "
            f"`make postgresql` (apt-get install postgresql) or set {ENV_PG_BIN} to the folder that "
            "holds initdb and pg_ctl"
        )
    return found


def _runner_user() -> str | None:
    """The user the cluster runs as when we are root; None when we are not root (we run it)."""
    if os.geteuid() != 0:
        return None
    name = os.environ.get(ENV_PG_USER, "postgres")
    try:
        pwd.getpwnam(name)
    except KeyError:
        raise PostgresError(
            f"running as root, and there is no user {name!r} to run PostgreSQL as (initdb refuses root): "
            f"create one, or set {ENV_PG_USER} to an unprivileged user"
        ) from None
    return name


@dataclass
class LocalPostgres:
    """A cluster whose state is kept in ``directory`` (and, as root, a data folder it points at)."""

    directory: Path
    port: int = 0
    #: Start with ``wal_level=logical`` (a cluster already running without it is restarted).
    logical_replication: bool = False

    @property
    def _state_file(self) -> Path:
        return self.directory / "cluster.json"

    @property
    def secrets_dir(self) -> Path:
        return self.directory / "secrets"

    @property
    def host(self) -> str:
        return "127.0.0.1"

    def _state(self) -> dict[str, str | int]:
        try:
            state: dict[str, str | int] = json.loads(self._state_file.read_text())
        except FileNotFoundError:
            return {}
        return state

    @property
    def data_dir(self) -> Path:
        return Path(str(self._state()["data"]))

    @property
    def socket_dir(self) -> Path:
        return self.data_dir.parent / "run"

    @property
    def log_file(self) -> Path:
        return self.data_dir.parent / "postgres.log"

    def _as_runner(self, cmd: list[str]) -> list[str]:
        user = _runner_user()
        if user is None:
            return cmd
        return ["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups", "--", *cmd]

    def _run(self, cmd: list[str], *, stdin: str | None = None) -> str:
        done = subprocess.run(
            self._as_runner(cmd), input=stdin, capture_output=True, text=True, check=False, cwd="/"
        )
        if done.returncode != 0:
            raise PostgresError(f"`{' '.join(cmd[:2])} …` exited {done.returncode}:\n{done.stderr[-3000:]}")
        return done.stdout

    def _init(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        user = _runner_user()
        if user is None:
            home = self.directory / "cluster"
            home.mkdir(exist_ok=True)
        else:
            # The runner user cannot reach a folder of root's: its own folder in the temp dir.
            home = Path(tempfile.mkdtemp(prefix="kafkalake-postgres-"))
            entry = pwd.getpwnam(user)
            os.chown(home, entry.pw_uid, entry.pw_gid)
        home.chmod(0o700)
        self._state_file.write_text(
            json.dumps({"data": str(home / "data"), "port": self.port or free_port()})
        )
        (home / "run").mkdir(mode=0o700, exist_ok=True)
        if user is not None:
            entry = pwd.getpwnam(user)
            os.chown(home / "run", entry.pw_uid, entry.pw_gid)
        self._run(
            [
                str(pg_bin() / "initdb"),
                "--pgdata",
                str(home / "data"),
                "--username",
                SUPERUSER,
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                "--encoding=UTF8",
                "--no-locale",
                "--no-instructions",
            ]
        )
        settings = {
            "listen_addresses": "'127.0.0.1'",
            "unix_socket_directories": f"'{home / 'run'}'",
            # A laptop's share, not a server's: few connections, small buffers.
            "max_connections": "100",
            "shared_buffers": "'64MB'",
            "fsync": "off" if os.environ.get("KAFKALAKE_PG_FSYNC") == "off" else "on",
            # A failing statement is not logged: ALTER ROLE … PASSWORD must never reach the log.
            "log_min_error_statement": "panic",
        }
        conf = "".join(f"{key} = {value}\n" for key, value in settings.items())
        self._run(["sh", "-c", f"cat >> '{home / 'data' / 'postgresql.conf'}'"], stdin=conf)

    def running(self) -> bool:
        if not self._state():
            return False
        done = subprocess.run(
            self._as_runner([str(pg_bin() / "pg_ctl"), "status", "--pgdata", str(self.data_dir)]),
            capture_output=True,
            text=True,
            check=False,
            cwd="/",
        )
        return done.returncode == 0

    def start(self) -> LocalPostgres:
        """Create the cluster if it is new, start it unless it runs; wait until it takes connections."""
        if not self._state() or not (self.data_dir / "PG_VERSION").exists():
            self._init()
        self.port = int(self._state()["port"])
        if self.running() and self.logical_replication and self.setting("wal_level") != "logical":
            self._pg_ctl_stop()
        if not self.running():
            self._run(
                [
                    str(pg_bin() / "pg_ctl"),
                    "start",
                    "--pgdata",
                    str(self.data_dir),
                    "--log",
                    str(self.log_file),
                    "--options",
                    " ".join([f"-p {self.port}", *(_LOGICAL_OPTIONS if self.logical_replication else ())]),
                    "--wait",
                    f"--timeout={START_TIMEOUT}",
                ]
            )
        self._wait_ready()
        self.secrets_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        log.info("PostgreSQL on %s:%d (data %s)", self.host, self.port, self.data_dir)
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            done = subprocess.run(
                [str(pg_bin() / "pg_isready"), "-h", self.host, "-p", str(self.port), "-q"], check=False
            )
            if done.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise PostgresError(
                    f"PostgreSQL did not take connections on port {self.port}: see {self.log_file}"
                )
            time.sleep(0.3)

    def setting(self, name: str) -> str:
        """A server setting as the running cluster has it (``SHOW``)."""
        return self.psql(f"SHOW {name};").strip()

    def psql(self, sql: str, database: str = "postgres") -> str:
        """Run SQL as the superuser over the Unix socket; the SQL goes through standard input."""
        cmd = [str(pg_bin() / "psql"), "-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1"]
        cmd += ["-h", str(self.socket_dir), "-p", str(self.port), "-U", SUPERUSER, "-d", database]
        return self._run(cmd, stdin=sql)

    def database(self, name: str, *, user: str | None = None, replication: bool = False) -> Database:
        """Create the database and its owner role unless they exist; give the role a new password.

        ``replication``: the role may also stream changes (``REPLICATION``: a logical replication
        slot, as Debezium's PostgreSQL connector opens).
        """
        user = user or name
        for identifier in (name, user):
            if not identifier.replace("_", "").isalnum():
                raise PostgresError(f"{identifier!r}: use letters, digits and _ for databases and roles")
        password = secrets.token_urlsafe(24)  # URL-safe: it goes into SQLAlchemy and JDBC URLs as is
        self.psql(
            f"SELECT 'CREATE ROLE {user} LOGIN' WHERE NOT EXISTS"
            f" (SELECT FROM pg_roles WHERE rolname = '{user}')\\gexec\n"
            f"ALTER ROLE {user} {'REPLICATION' if replication else 'NOREPLICATION'} PASSWORD '{password}';\n"
            f"SELECT 'CREATE DATABASE {name} OWNER {user}' WHERE NOT EXISTS"
            f" (SELECT FROM pg_database WHERE datname = '{name}')\\gexec\n"
        )
        password_file = self.secrets_dir / f"{user}.password"
        write_secret(password_file, password)
        return Database(name, user, self.host, self.port, password_file)

    def _pg_ctl_stop(self) -> None:
        self._run([str(pg_bin() / "pg_ctl"), "stop", "--pgdata", str(self.data_dir), "-m", "fast", "--wait"])

    def stop(self, *, remove: bool = False) -> None:
        """Stop the cluster and remove the password files; ``remove`` deletes its data too."""
        if self._state() and self.running():
            self._pg_ctl_stop()
        shutil.rmtree(self.secrets_dir, ignore_errors=True)
        if remove and self._state():
            shutil.rmtree(self.data_dir.parent, ignore_errors=True)
            self._state_file.unlink()


def write_secret(path: Path, text: str) -> None:
    """Write ``text`` to a file only its owner reads, never readable by others even for a moment."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["start", "stop", "status", "remove", "bin"])
    parser.add_argument("--dir", default=str(REPO_ROOT / ".stack" / "postgres"))
    parser.add_argument("--port", type=int, default=0, help="for a new cluster (default: a free port)")
    parser.add_argument("--logical", action="store_true", help="wal_level=logical, for change data capture")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    if args.action == "bin":
        try:
            print(pg_bin())
        except PostgresError as exc:
            print(exc, file=sys.stderr)
            return 1
        return 0
    cluster = LocalPostgres(Path(args.dir).resolve(), args.port, logical_replication=args.logical)
    if args.action == "start":
        cluster.start()
    elif args.action in ("stop", "remove"):
        cluster.stop(remove=args.action == "remove")
    else:
        print(f"running on {cluster.host}:{cluster._state().get('port')}" if cluster.running() else "stopped")
        return 0 if cluster.running() else 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
