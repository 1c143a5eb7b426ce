"""A real schema registry on loopback: Apicurio Registry in memory, spoken to through its
Confluent-compatible API.

Run from the build ``kafkalake.launch.jars`` made at set-up (:mod:`kafkalake.launch.registry_app`),
as a plain java process on a free port of 127.0.0.1; its schemas live in memory and end with it.
The tests register schemas through confluent-kafka's own serializers at :attr:`LocalRegistry.url`.

With ``pki`` (the secured broker's certificates, :func:`kafkalake.dev.secured_broker.make_pki`) it
serves HTTPS only, with the certificate the dev CA signed for localhost and 127.0.0.1. It cannot
require client certificates: Quarkus 2.16 fixes ``quarkus.http.ssl.client-auth`` when the app is
built (``HttpBuildTimeConfig``), and set-up builds it without.

    python -m kafkalake.dev.schema_registry start [--dir .registry] [--port 0]
    python -m kafkalake.dev.schema_registry stop  [--dir .registry]
    python -m kafkalake.dev.schema_registry status [--dir .registry]
"""

from __future__ import annotations

import argparse
import logging
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kafkalake.core.paths import REPO_ROOT
from kafkalake.dev import processes
from kafkalake.dev.broker import SMALL_LOAD_JAVA_OPTIONS, _port_open, free_port
from kafkalake.dev.secured_broker import Pki
from kafkalake.kafka import schema_registry
from kafkalake.launch import registry_app

log = logging.getLogger(__name__)

#: Where Apicurio serves the Confluent Schema Registry API (v7).
CCOMPAT_PATH = "/apis/ccompat/v7"


class SchemaRegistryError(RuntimeError):
    pass


@dataclass
class LocalRegistry:
    """A registry whose pid, port and log live in ``directory`` (its schemas only in memory)."""

    directory: Path
    port: int = 0
    heap: str = "256m"
    #: HTTPS only, with this PKI's server certificate ("broker.crt": it names 127.0.0.1).
    pki: Pki | None = None

    @property
    def base_url(self) -> str:
        return f"{'https' if self.pki else 'http'}://127.0.0.1:{self.port}"

    def settings(self, conn_id: str = "it_registry") -> schema_registry.RegistrySettings:
        """Client settings that reach this registry (trusting the dev CA when it serves HTTPS)."""
        ca = self.pki.ca.read_text() if self.pki else None
        return schema_registry.RegistrySettings(url=self.url, conn_id=conn_id, ssl_ca_pem=ca)

    def _server_options(self) -> list[str]:
        if self.pki is None:
            return [f"-Dquarkus.http.port={self.port}"]
        # Paths, no secret: the key file is the PKI's own (0600).
        return [
            f"-Dquarkus.http.ssl-port={self.port}",
            f"-Dquarkus.http.port={free_port()}",
            "-Dquarkus.http.insecure-requests=disabled",
            f"-Dquarkus.http.ssl.certificate.files={self.pki.directory / 'broker.crt'}",
            f"-Dquarkus.http.ssl.certificate.key-files={self.pki.directory / 'broker.key'}",
        ]

    @property
    def url(self) -> str:
        """The Confluent-compatible API: what a Confluent client's ``url`` setting takes."""
        return self.base_url + CCOMPAT_PATH

    @property
    def log_file(self) -> Path:
        return self.directory / "registry.log"

    @property
    def _pid_file(self) -> Path:
        return self.directory / "registry.pid"

    def running_pid(self) -> int | None:
        return processes.running_pid(self._pid_file)

    def start(self, timeout: float = 90.0) -> LocalRegistry:
        """Start the registry; return once its Confluent-compatible API answers."""
        self.directory.mkdir(parents=True, exist_ok=True)
        if self.running_pid() is not None:
            self.port = int((self.directory / "port").read_text())
            self._wait_ready(timeout)
            log.info("schema registry already running at %s", self.url)
            return self
        runner = registry_app.runner_jar()
        self.port = self.port or free_port()
        if _port_open(self.port):
            raise SchemaRegistryError(f"port {self.port} is taken: stop what uses it or pick another")
        java = shutil.which("java")
        if java is None:
            raise SchemaRegistryError("java is not on PATH: install a JDK 17 and set JAVA_HOME")
        process = processes.spawn(
            [
                java,
                f"-Xmx{self.heap}",
                *SMALL_LOAD_JAVA_OPTIONS,
                "-Djava.awt.headless=true",
                *self._server_options(),
                "-Dquarkus.http.host=127.0.0.1",
                "-jar",
                str(runner),
            ],
            self.log_file,
            self._pid_file,
            cwd=self.directory,
        )
        (self.directory / "port").write_text(f"{self.port}\n")
        try:
            self._wait_ready(timeout, process)
        except SchemaRegistryError:
            self.stop()
            raise
        log.info("schema registry ready at %s (pid %d)", self.url, process.pid)
        return self

    def _wait_ready(self, timeout: float, process: subprocess.Popen[bytes] | None = None) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if process is not None and process.poll() is not None:
                raise SchemaRegistryError(
                    f"the schema registry exited with {process.returncode}; see {self.log_file}"
                )
            if _port_open(self.port) and self._answers():
                return
            time.sleep(0.3)
        raise SchemaRegistryError(f"the schema registry not ready after {timeout:.0f}s; see {self.log_file}")

    def _answers(self) -> bool:
        # Readiness is the API a client uses answering, not only the health endpoint.
        context = schema_registry.ssl_context(self.settings())
        try:
            # Our loopback URL.
            with urllib.request.urlopen(self.url + "/subjects", timeout=2, context=context) as answer:
                return int(answer.status) == 200
        except (urllib.error.HTTPError, OSError):
            return False

    def stop(self, timeout: float = 20.0) -> None:
        processes.stop(self._pid_file, timeout)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Start or stop the local schema registry (Apicurio).")
    parser.add_argument("action", choices=["start", "stop", "status"])
    parser.add_argument("--dir", type=Path, default=REPO_ROOT / ".registry", help="pid, port and log")
    parser.add_argument("--port", type=int, default=0, help="0: a free port")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    registry = LocalRegistry(args.dir.resolve(), args.port)
    if args.action == "start":
        registry.start()
        print(registry.url)
    elif args.action == "stop":
        registry.stop()
    else:
        pid = registry.running_pid()
        print(f"running, pid {pid}" if pid else "stopped")
        return 0 if pid else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
