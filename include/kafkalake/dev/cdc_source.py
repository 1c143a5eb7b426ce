"""Debezium's PostgreSQL connector in Kafka Connect standalone, writing change events to a broker.

The change data capture source the tests and a developer run, like the broker (:mod:`.broker`): from
jars resolved once (the ``debezium`` set of :mod:`kafkalake.launch.jars`), as a background JVM found
and stopped by its pid file. It reads a PostgreSQL database started with ``wal_level=logical``
(:class:`kafkalake.dev.postgres.LocalPostgres` with ``logical_replication``) through the ``pgoutput``
plugin built into PostgreSQL, and writes one topic per captured table,
``<topic_prefix>.<schema>.<table>``, with Connect's JSON converter (``schemas_enable``: the
``{schema, payload}`` envelope, or the bare event).

The database password is never on a command line nor in the connector's configuration: the
connector names it as ``${file:<secrets>:password}`` and Connect's ``FileConfigProvider`` reads it
from a 0600 file in the source's private (0700) folder, which :meth:`LocalConnect.stop` removes.

    python -m kafkalake.dev.cdc_source start --bootstrap 127.0.0.1:9092 --pg-dir .stack/postgres \\
        --database shop --tables public.customers [--dir .cdc] [--no-schemas]
    python -m kafkalake.dev.cdc_source stop [--dir .cdc]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from kafkalake.core.paths import REPO_ROOT
from kafkalake.dev import processes
from kafkalake.dev.broker import LOG4J2_PROPERTIES, SMALL_LOAD_JAVA_OPTIONS, free_port
from kafkalake.dev.postgres import Database, LocalPostgres, write_secret
from kafkalake.launch.jars import jar_files

log = logging.getLogger(__name__)

CONNECTOR_CLASS = "io.debezium.connector.postgresql.PostgresConnector"


class CdcSourceError(RuntimeError):
    pass


def _properties(settings: dict[str, str]) -> str:
    # Values here are names, numbers and paths: Java's properties format needs escapes only for
    # backslashes (a Windows path) and leading spaces, neither of which occurs.
    return "".join(f"{key}={value}\n" for key, value in settings.items())


@dataclass
class LocalConnect:
    """One Connect worker running a Debezium PostgreSQL connector; its state lives in ``directory``.

    More connectors on the same database join the running worker (:meth:`add_connector`), each with
    its own name, tables, topic prefix and JSON envelope: one JVM for them all.

    Args:
        directory: private folder (made 0700) for the worker's and connector's configuration, the
            password file while it runs, the source offsets and the log.
        bootstrap_servers: the broker the change events go to.
        database: the captured database; its role needs ``REPLICATION``
            (``LocalPostgres.database(..., replication=True)``).
        tables: ``schema.table`` names to capture (Debezium's ``table.include.list``).
        topic_prefix: topics are ``<topic_prefix>.<schema>.<table>``.
        schemas_enable: the JSON converter's ``{schema, payload}`` envelope on keys and values.
        name: the connector's name, also its replication slot's and publication's.
    """

    directory: Path
    bootstrap_servers: str
    database: Database
    tables: tuple[str, ...]
    topic_prefix: str = "cdc"
    schemas_enable: bool = True
    name: str = "kafkalake_cdc"
    heap: str = "384m"

    @property
    def _pid_file(self) -> Path:
        return self.directory / "connect.pid"

    @property
    def log_file(self) -> Path:
        return self.directory / "connect.log"

    @property
    def _secrets_file(self) -> Path:
        return self.directory / "secrets" / "database.properties"

    def topic(self, table: str) -> str:
        """The topic of a captured ``schema.table``."""
        return f"{self.topic_prefix}.{table}"

    def _converter_settings(self) -> dict[str, str]:
        schemas = "true" if self.schemas_enable else "false"
        return {
            "key.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "key.converter.schemas.enable": schemas,
            "value.converter.schemas.enable": schemas,
        }

    def _worker_settings(self, rest_port: int) -> dict[str, str]:
        return {
            "bootstrap.servers": self.bootstrap_servers,
            **self._converter_settings(),
            "offset.storage.file.filename": str(self.directory / "offsets"),
            "offset.flush.interval.ms": "1000",
            "listeners": f"http://127.0.0.1:{rest_port}",
            # Plugins by their ServiceLoader manifests (all of these jars have them, as Connect's
            # warning says), not by scanning every class on the classpath: a start took 5.5
            # CPU-s with the scan, 3.4 without.
            "plugin.discovery": "service_load",
            "config.providers": "file",
            "config.providers.file.class": "org.apache.kafka.common.config.provider.FileConfigProvider",
            # The broker creates no topic on its own (auto.create.topics.enable=false): Connect
            # creates each table's topic as the connector's topic.creation settings say.
            "topic.creation.enable": "true",
            # Partitions added to a topic are used within seconds (the producer's default is 5 min).
            "producer.metadata.max.age.ms": "2000",
        }

    def _connector_settings(self) -> dict[str, str]:
        db = self.database
        return {
            "name": self.name,
            "connector.class": CONNECTOR_CLASS,
            "tasks.max": "1",
            "plugin.name": "pgoutput",
            "database.hostname": db.host,
            "database.port": str(db.port),
            "database.user": db.user,
            "database.password": f"${{file:{self._secrets_file}:password}}",
            "database.dbname": db.name,
            "topic.prefix": self.topic_prefix,
            "table.include.list": ",".join(self.tables),
            "slot.name": self.name,
            "publication.name": self.name,
            # The role owns the tables: Debezium creates the publication for just these tables.
            "publication.autocreate.mode": "filtered",
            "snapshot.mode": "initial",
            # A delete is followed by a tombstone (for log compaction), as Debezium's default.
            "tombstones.on.delete": "true",
            "topic.creation.default.replication.factor": "1",
            "topic.creation.default.partitions": "1",
            # Small polls, so events reach Kafka within a second of their commit.
            "poll.interval.ms": "200",
            # Debezium skips truncates unless told: a truncate event (op t) empties the table downstream.
            "skipped.operations": "none",
            # The connector's own converters: another connector on the worker may choose otherwise.
            **self._converter_settings(),
        }

    def running_pid(self) -> int | None:
        return processes.running_pid(self._pid_file)

    def start(self, timeout: float = 120.0) -> LocalConnect:
        """Start the worker with the connector; return once the connector's task runs."""
        if self.running_pid() is not None:
            raise CdcSourceError(f"a Connect worker already runs from {self.directory}: stop it first")
        self.directory.mkdir(parents=True, exist_ok=True)
        self.directory.chmod(0o700)
        java = shutil.which("java")
        if java is None:
            raise CdcSourceError("java is not on PATH: install a JDK 17 and set JAVA_HOME")
        write_secret(self._secrets_file, _properties({"password": self.database.password()}))
        rest_port = free_port()
        worker = self.directory / "worker.properties"
        worker.write_text(_properties(self._worker_settings(rest_port)))
        connector = self.directory / "connector.properties"
        connector.write_text(_properties(self._connector_settings()))
        (self.directory / "log4j2.properties").write_text(LOG4J2_PROPERTIES.format(log_file=self.log_file))
        (self.directory / "rest_port").write_text(f"{rest_port}\n")
        classpath = os.pathsep.join(str(p) for p in jar_files("debezium"))
        with self.log_file.open("ab") as out:
            process = subprocess.Popen(
                [
                    java,
                    f"-Xmx{self.heap}",
                    "-XX:+UseSerialGC",
                    *SMALL_LOAD_JAVA_OPTIONS,
                    "-Djava.awt.headless=true",
                    f"-Dlog4j2.configurationFile={self.directory / 'log4j2.properties'}",
                    "-cp",
                    classpath,
                    "org.apache.kafka.connect.cli.ConnectStandalone",
                    str(worker),
                    str(connector),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self._pid_file.write_text(str(process.pid))
        try:
            self._wait_running(self.name, timeout, process)
        except CdcSourceError:
            self.stop()
            raise
        log.info("Debezium connector %s running (Connect pid %d)", self.name, process.pid)
        return self

    def add_connector(
        self,
        name: str,
        tables: tuple[str, ...],
        *,
        topic_prefix: str,
        schemas_enable: bool = True,
        timeout: float = 120.0,
    ) -> None:
        """Add a connector to the running worker (Connect's REST API); return once its task runs.

        It reads this source's database, with its own name (its replication slot's and
        publication's), tables, topic prefix and JSON envelope (``schemas_enable``); its offsets
        and log are the worker's. :meth:`remove_connector` takes it away again.
        """
        process_pid = self.running_pid()
        if process_pid is None:
            raise CdcSourceError(f"no Connect worker runs from {self.directory}: start it first")
        other = replace(
            self, name=name, tables=tables, topic_prefix=topic_prefix, schemas_enable=schemas_enable
        )
        self._request("PUT", f"/connectors/{name}/config", other._connector_settings())
        self._wait_running(name, timeout, None)
        log.info("Debezium connector %s running (Connect pid %d)", name, process_pid)

    def remove_connector(self, name: str) -> None:
        """Stop and delete a connector :meth:`add_connector` added; its replication slot stays."""
        self._request("DELETE", f"/connectors/{name}", None)

    def _request(self, method: str, path: str, body: dict[str, str] | None) -> None:
        port = int((self.directory / "rest_port").read_text())
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}{path}",
            data=None if body is None else json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method=method,
        )
        try:
            with urllib.request.urlopen(request, timeout=30):
                pass
        except urllib.error.HTTPError as e:
            raise CdcSourceError(
                f"Connect answered {method} {path} with {e.code}: {e.read()[:2000]!r}"
            ) from e

    def status(self, name: str | None = None) -> dict[str, object] | None:
        """A connector's status (this source's own by default) from Connect's REST API (loopback);
        None when it does not answer."""
        try:
            port = int((self.directory / "rest_port").read_text())
            url = f"http://127.0.0.1:{port}/connectors/{name or self.name}/status"
            with urllib.request.urlopen(url, timeout=2) as response:
                answer: dict[str, object] = json.load(response)
                return answer
        except (OSError, ValueError, urllib.error.URLError):
            return None

    def _wait_running(self, name: str, timeout: float, process: subprocess.Popen[bytes] | None) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if process is not None and process.poll() is not None:
                raise CdcSourceError(f"Connect exited with {process.returncode}; see {self.log_file}")
            if process is None and self.running_pid() is None:
                raise CdcSourceError(f"Connect is gone; see {self.log_file}")
            status = self.status(name)
            tasks = status.get("tasks") if status else None
            if isinstance(tasks, list) and tasks:
                states = {str(t.get("state")) for t in tasks if isinstance(t, dict)}
                if states == {"RUNNING"}:
                    return
                if "FAILED" in states:
                    trace = next((str(t.get("trace", ""))[:3000] for t in tasks if isinstance(t, dict)), "")
                    raise CdcSourceError(f"the Debezium connector's task failed: {trace}")
            time.sleep(0.5)
        raise CdcSourceError(
            f"the Debezium connector {name} was not running after {timeout:.0f}s; see {self.log_file}"
        )

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the worker (Connect flushes its source offsets on SIGTERM) and remove the password
        file. The replication slot stays: a later start goes on from where this one stopped."""
        processes.stop(self._pid_file, timeout)
        shutil.rmtree(self.directory / "secrets", ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["start", "stop", "status"])
    parser.add_argument("--dir", type=Path, default=REPO_ROOT / ".cdc", help="the source's private folder")
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--pg-dir", type=Path, default=REPO_ROOT / ".stack" / "postgres")
    parser.add_argument("--database", default="shop")
    parser.add_argument("--tables", default="public.customers", help="comma-separated schema.table names")
    parser.add_argument("--topic-prefix", default="cdc")
    parser.add_argument("--no-schemas", action="store_true", help="bare events, no {schema, payload}")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    directory = args.dir.resolve()
    if args.action == "stop":
        processes.stop(directory / "connect.pid", 30.0)
        shutil.rmtree(directory / "secrets", ignore_errors=True)
        return 0
    if args.action == "status":
        pid = processes.running_pid(directory / "connect.pid")
        print(f"running, pid {pid}" if pid else "stopped")
        return 0 if pid else 1
    postgres = LocalPostgres(args.pg_dir.resolve(), logical_replication=True).start()
    database = postgres.database(args.database, replication=True)
    source = LocalConnect(
        directory,
        args.bootstrap,
        database,
        tuple(t.strip() for t in args.tables.split(",") if t.strip()),
        topic_prefix=args.topic_prefix,
        schemas_enable=not args.no_schemas,
    )
    source.start()
    print(", ".join(source.topic(t) for t in source.tables))
    return 0


if __name__ == "__main__":
    sys.exit(main())
