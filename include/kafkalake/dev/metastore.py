"""A Hive standalone metastore service (4.0.1) on PostgreSQL, shared by every Spark job.

Run from the jars of the ``metastore`` set (:mod:`kafkalake.launch.jars`: the server, its runtime
dependencies, the PostgreSQL driver, and Hive's distribution for the schema scripts). The schema is
created with Hive's own schematool (``-initSchema -dbType postgres``) the first time.

    python -m kafkalake.dev.metastore init-schema --dir D     (compose's metastore-init)
    python -m kafkalake.dev.metastore serve --dir D           (compose's metastore, in the foreground)

Both read the database from ``KAFKALAKE_METASTORE_DB_URL`` (a JDBC URL), the user from
``KAFKALAKE_METASTORE_DB_USER`` (default ``hive``) and the password from
``KAFKALAKE_METASTORE_DB_PASSWORD``. The password never reaches a file: ``metastore-site.xml`` says
``${env.KAFKALAKE_METASTORE_DB_PASSWORD}``, which Hadoop's configuration expands from the JVM's
environment. :class:`LocalMetastore` does the same for ``make stack`` and the tests, on the private
PostgreSQL of :mod:`kafkalake.dev.postgres`.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse
from xml.sax.saxutils import escape

import psycopg2

from kafkalake.core.paths import jars_dir
from kafkalake.dev.broker import free_port
from kafkalake.dev.postgres import Database
from kafkalake.launch.jars import HIVE_METASTORE_VERSION, jar_files

log = logging.getLogger(__name__)

ENV_DB_URL = "KAFKALAKE_METASTORE_DB_URL"
ENV_DB_USER = "KAFKALAKE_METASTORE_DB_USER"
ENV_DB_PASSWORD = "KAFKALAKE_METASTORE_DB_PASSWORD"
DEFAULT_PORT = 9083
START_TIMEOUT = 180
_SERVER = "org.apache.hadoop.hive.metastore.HiveMetaStore"
_SCHEMA_TOOL = "org.apache.hadoop.hive.metastore.tools.schematool.MetastoreSchemaTool"


class MetastoreError(RuntimeError):
    pass


def site_xml(jdbc_url: str, user: str, port: int, warehouse: str) -> str:
    """``metastore-site.xml``: the password is an ``${env.…}`` reference, expanded in the JVM."""
    settings = {
        "javax.jdo.option.ConnectionURL": jdbc_url,
        "javax.jdo.option.ConnectionDriverName": "org.postgresql.Driver",
        "javax.jdo.option.ConnectionUserName": user,
        "javax.jdo.option.ConnectionPassword": "${env." + ENV_DB_PASSWORD + "}",
        "metastore.thrift.port": str(port),
        "metastore.warehouse.dir": warehouse,
        # The schema is schematool's job; a server that finds another version must refuse to start.
        "metastore.schema.verification": "true",
        "datanucleus.schema.autoCreateAll": "false",
        # Hive's async logging needs the LMAX disruptor, which the server's pom does not bring.
        "metastore.async.log.enabled": "false",
        # The defaults name tasks from hive-exec (not a dependency of the standalone server).
        "metastore.task.threads.always": "org.apache.hadoop.hive.metastore.events.EventCleanerTask",
        "metastore.expression.proxy": "org.apache.hadoop.hive.metastore.DefaultPartitionExpressionProxy",
    }
    props = "".join(
        f"  <property><name>{escape(k)}</name><value>{escape(v)}</value></property>\n"
        for k, v in settings.items()
    )
    return f'<?xml version="1.0"?>\n<configuration>\n{props}</configuration>\n'


def log4j2_properties(log_file: Path) -> str:
    return (
        "status = warn\n"
        "appender.file.type = File\nappender.file.name = file\n"
        f"appender.file.fileName = {log_file}\n"
        "appender.file.layout.type = PatternLayout\nappender.file.layout.pattern = %d %p %c: %m%n\n"
        "rootLogger.level = INFO\nrootLogger.appenderRef.file.ref = file\n"
    )


def metastore_home(directory: Path) -> Path:
    """Hive's distribution layout for schematool (``scripts/metastore/upgrade/postgres``).

    Only the PostgreSQL scripts are taken from the distribution tarball the jars set holds.
    """
    home = directory / "home"
    scripts = home / "scripts" / "metastore" / "upgrade" / "postgres"
    if scripts.is_dir():
        return home
    tarball = (
        jars_dir() / "metastore" / f"hive-standalone-metastore-server-{HIVE_METASTORE_VERSION}-bin.tar.gz"
    )
    if not tarball.exists():
        raise MetastoreError(
            f"no {tarball.name} in {tarball.parent}: run `make setup` (python -m kafkalake.launch.jars)"
        )
    scripts.mkdir(parents=True)
    with tarfile.open(tarball) as archive:
        for member in archive.getmembers():
            if member.isfile() and "/scripts/metastore/upgrade/postgres/" in member.name:
                source = archive.extractfile(member)
                assert source is not None
                (scripts / Path(member.name).name).write_bytes(source.read())
    return home


@dataclass
class MetastoreConfig:
    """Where the service's configuration and logs live, and what it connects to."""

    directory: Path
    jdbc_url: str
    user: str
    port: int = DEFAULT_PORT
    warehouse: str = ""

    @property
    def conf_dir(self) -> Path:
        return self.directory / "conf"

    @property
    def log_file(self) -> Path:
        return self.directory / "metastore.log"

    def write(self) -> None:
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        warehouse = self.warehouse or (self.directory / "warehouse").as_uri()
        (self.conf_dir / "metastore-site.xml").write_text(
            site_xml(self.jdbc_url, self.user, self.port, warehouse)
        )
        (self.conf_dir / "metastore-log4j2.properties").write_text(log4j2_properties(self.log_file))

    def java_command(self, main_class: str, *args: str) -> list[str]:
        java = Path(os.environ["JAVA_HOME"]) / "bin" / "java" if "JAVA_HOME" in os.environ else None
        binary = str(java) if java and java.exists() else shutil.which("java")
        if binary is None:
            raise MetastoreError("java is not on PATH (or JAVA_HOME): the metastore needs a JRE 17")
        classpath = os.pathsep.join([str(self.conf_dir), *(str(p) for p in jar_files("metastore"))])
        return [binary, "-Xmx512m", "-cp", classpath, main_class, *args]

    def environment(self, password: str, base: Mapping[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ if base is None else base)
        env.update(
            {
                ENV_DB_PASSWORD: password,
                "METASTORE_HOME": str(metastore_home(self.directory)),
                "METASTORE_CONF_DIR": str(self.conf_dir),
            }
        )
        return env


def schema_exists(jdbc_url: str, user: str, password: str) -> bool:
    """Whether the metastore's schema is in the database (its VERSION table)."""
    parsed = urlparse(jdbc_url.removeprefix("jdbc:"))
    connection = psycopg2.connect(
        host=parsed.hostname,
        port=parsed.port or 5432,
        dbname=parsed.path.lstrip("/"),
        user=user,
        password=password,
    )
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1 FROM information_schema.tables WHERE table_name = 'VERSION'")
            return cursor.fetchone() is not None
    finally:
        connection.close()


def init_schema(config: MetastoreConfig, password: str) -> bool:
    """Create the schema with Hive's schematool unless it exists; True when it was created now."""
    config.write()
    if schema_exists(config.jdbc_url, config.user, password):
        return False
    log.info("creating the metastore schema in %s", config.jdbc_url)
    done = subprocess.run(
        config.java_command(_SCHEMA_TOOL, "-initSchema", "-dbType", "postgres"),
        env=config.environment(password),
        capture_output=True,
        text=True,
        check=False,
    )
    (config.directory / "schematool.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise MetastoreError(
            f"schematool -initSchema exited {done.returncode}: see {config.directory / 'schematool.log'}"
        )
    return True


@dataclass
class LocalMetastore:
    """The service on a database of the private PostgreSQL, on a free port of 127.0.0.1."""

    directory: Path
    database: Database
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def uri(self) -> str:
        return f"thrift://127.0.0.1:{self.port}"

    @property
    def config(self) -> MetastoreConfig:
        return MetastoreConfig(self.directory, self.database.jdbc_url, self.database.user, self.port)

    def start(self) -> LocalMetastore:
        config = self.config
        password = self.database.password()
        init_schema(config, password)
        with (self.directory / "metastore.out").open("ab") as out:
            self.process = subprocess.Popen(
                config.java_command(_SERVER),
                env=config.environment(password),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._wait_listening()
        log.info("Hive metastore on %s (database %s)", self.uri, self.database.jdbc_url)
        return self

    def _wait_listening(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if self.process is not None and self.process.poll() is not None:
                raise MetastoreError(
                    f"the metastore exited {self.process.returncode}: see {self.config.log_file}"
                    f" and {self.directory / 'metastore.out'}"
                )
            with socket.socket() as sock:
                sock.settimeout(1)
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            if time.monotonic() > deadline:
                raise MetastoreError(f"the metastore did not listen on {self.port} in {START_TIMEOUT}s")
            time.sleep(1)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)


#: A file holding the password instead (docker-compose's secret), read when the variable is unset.
ENV_DB_PASSWORD_FILE = f"{ENV_DB_PASSWORD}_FILE"


def _from_environment(directory: Path) -> tuple[MetastoreConfig, str]:
    password = os.environ.get(ENV_DB_PASSWORD)
    if not password and os.environ.get(ENV_DB_PASSWORD_FILE):
        password = Path(os.environ[ENV_DB_PASSWORD_FILE]).read_text().strip()
    missing = [name for name, value in ((ENV_DB_URL, os.environ.get(ENV_DB_URL)), (ENV_DB_PASSWORD, password))
               if not value]  # fmt: skip
    if missing:
        raise MetastoreError(
            f"set {' and '.join(missing)} (the metastore's database and its password; "
            f"or {ENV_DB_PASSWORD_FILE}: a file holding it)"
        )
    config = MetastoreConfig(directory, os.environ[ENV_DB_URL], os.environ.get(ENV_DB_USER, "hive"))
    return config, str(password)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["init-schema", "serve"])
    parser.add_argument("--dir", type=Path, required=True, help="configuration and logs")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    config, password = _from_environment(args.dir.resolve())
    if args.action == "init-schema":
        print("schema created" if init_schema(config, password) else "schema already there")
        return 0
    config.write()
    command = config.java_command(_SERVER)
    os.execve(command[0], command, config.environment(password))  # the container's main process


if __name__ == "__main__":
    sys.exit(main())
