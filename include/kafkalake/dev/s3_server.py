"""A real S3 API server on loopback: s3proxy (Maven Central) with its filesystem backend.

The object-store tests and anyone trying ``s3a://`` tables locally use it. It runs as a plain java
process from the jars ``kafkalake.launch.jars`` resolved (the ``s3proxy`` set), on a free port of
127.0.0.1, with an access key and secret generated at first start. The secret is kept in the
server's folder (``credentials.json``, mode 0600), never on a command line.

    python -m kafkalake.dev.s3_server start [--dir .s3] [--port 0] [--bucket lake]
    python -m kafkalake.dev.s3_server stop  [--dir .s3]
    python -m kafkalake.dev.s3_server status [--dir .s3]

``start`` prints the endpoint and bucket; ``connection_uri`` is the Airflow connection a topic's
``storage_conn_id`` names (``AIRFLOW_CONN_<ID>``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import secrets
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
from kafkalake.dev.broker import _port_open, free_port
from kafkalake.lake import store_settings
from kafkalake.launch.jars import jar_files

log = logging.getLogger(__name__)

#: The region the server answers for; clients must sign for the same one.
REGION = "us-east-1"

# s3proxy's plain jar has no logging configuration, and logback's default logs every request at
# DEBUG (megabytes a minute, and slow): warnings and errors only.
_LOGBACK = """\
<configuration>
  <appender name="file" class="ch.qos.logback.core.FileAppender">
    <file>{log_file}</file>
    <encoder><pattern>%d %level %logger{{36}} - %msg%n</pattern></encoder>
  </appender>
  <root level="WARN"><appender-ref ref="file"/></root>
</configuration>
"""


#: JVM options for the few thousand requests a test module or a local try sends: C1 only and the
#: serial collector (C2's compiles and G1's threads never pay back there). Measured on a fresh
#: server, 1,500 each of PUT, GET and HEAD and 300 LISTs through boto3 (SigV4): 15.8 -> 6.7 CPU-s
#: of the server's, its start 2.3 -> 1.2. A caller that wants the JVM's defaults passes
#: ``java_options=()``.
SMALL_LOAD_JAVA_OPTIONS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")


class S3ServerError(RuntimeError):
    pass


@dataclass
class LocalS3:
    """An S3 server whose objects, settings and log live in ``directory`` (buckets are its folders)."""

    directory: Path
    port: int = 0
    bucket: str = "lake"
    heap: str = "256m"
    java_options: tuple[str, ...] = SMALL_LOAD_JAVA_OPTIONS

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def data_dir(self) -> Path:
        return self.directory / "data"

    @property
    def log_file(self) -> Path:
        return self.directory / "s3proxy.log"

    @property
    def _pid_file(self) -> Path:
        return self.directory / "s3proxy.pid"

    @property
    def _credentials_file(self) -> Path:
        return self.directory / "credentials.json"

    def credentials(self) -> tuple[str, str]:
        """(access key, secret key), generated once and kept in the server's folder."""
        if not self._credentials_file.exists():
            self.directory.mkdir(parents=True, exist_ok=True)
            fd = os.open(self._credentials_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as out:
                json.dump(
                    {"access_key": "kl" + secrets.token_hex(8), "secret_key": secrets.token_hex(20)}, out
                )
        loaded = json.loads(self._credentials_file.read_text())
        return str(loaded["access_key"]), str(loaded["secret_key"])

    def connection(self) -> dict[str, object]:
        """The Airflow connection (``conn_type`` ``aws``) that reaches this server, as JSON fields."""
        access_key, secret_key = self.credentials()
        return {
            "conn_type": "aws",
            "login": access_key,
            "password": secret_key,
            "extra": {"endpoint_url": self.endpoint, "region_name": REGION},
        }

    def storage_settings(self) -> store_settings.StorageSettings:
        """How a process reaches this server: its connection, read as a task reads it."""
        connection = self.connection()
        extra = connection["extra"]
        assert isinstance(extra, dict)
        return store_settings.from_connection(
            "local_s3", str(connection["login"]), str(connection["password"]), extra
        )

    def connection_uri(self) -> str:
        """The connection as ``AIRFLOW_CONN_<ID>`` takes it (JSON)."""
        return json.dumps(self.connection())

    def running_pid(self) -> int | None:
        return processes.running_pid(self._pid_file)

    def _properties(self) -> str:
        access_key, secret_key = self.credentials()
        return "".join(
            f"{k}={v}\n"
            for k, v in {
                "s3proxy.endpoint": self.endpoint,
                "s3proxy.authorization": "aws-v2-or-v4",
                "s3proxy.identity": access_key,
                "s3proxy.credential": secret_key,
                # Not filesystem-nio2, which s3proxy suggests: it refuses S3A's folder markers (the
                # PUT of "<key>/" by which Delta creates _delta_log/).
                "jclouds.provider": "filesystem",
                "jclouds.filesystem.basedir": str(self.data_dir),
                "jclouds.regions": REGION,
            }.items()
        )

    def start(self, timeout: float = 60.0) -> LocalS3:
        """Start the server (and make the bucket); return once it answers."""
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.data_dir / self.bucket).mkdir(parents=True, exist_ok=True)
        if self.running_pid() is not None:
            self.port = int((self.directory / "port").read_text())
            self._wait_ready(timeout)
            log.info("s3 server already running at %s", self.endpoint)
            return self
        self.port = self.port or free_port()
        if _port_open(self.port):
            raise S3ServerError(f"port {self.port} is taken: stop what uses it or pick another with --port")
        settings = self.directory / "s3proxy.conf"
        fd = os.open(settings, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(self._properties())
        java = shutil.which("java")
        if java is None:
            raise S3ServerError("java is not on PATH: install a JDK 17 and set JAVA_HOME")
        classpath = os.pathsep.join(str(p) for p in jar_files("s3proxy"))
        logback = self.directory / "logback.xml"
        logback.write_text(_LOGBACK.format(log_file=self.log_file))
        process = processes.spawn(
            [
                java,
                f"-Xmx{self.heap}",
                *self.java_options,
                f"-Dlogback.configurationFile={logback}",
                "-cp",
                classpath,
                "org.gaul.s3proxy.Main",
                "--properties",
                str(settings),
            ],
            self.log_file,
            self._pid_file,
        )
        (self.directory / "port").write_text(f"{self.port}\n")
        try:
            self._wait_ready(timeout, process)
        except S3ServerError:
            self.stop()
            raise
        log.info("s3 server ready at %s (pid %d), bucket %s", self.endpoint, process.pid, self.bucket)
        return self

    def _wait_ready(self, timeout: float, process: subprocess.Popen[bytes] | None = None) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if process is not None and process.poll() is not None:
                raise S3ServerError(f"s3proxy exited with {process.returncode}; see {self.log_file}")
            if _port_open(self.port) and self._answers():
                return
            time.sleep(0.3)
        raise S3ServerError(f"s3proxy not ready after {timeout:.0f}s; see {self.log_file}")

    def _answers(self) -> bool:
        # Any HTTP answer (an anonymous request is refused with 403) means the server is up.
        try:
            with urllib.request.urlopen(self.endpoint, timeout=2):  # our own loopback URL
                return True
        except urllib.error.HTTPError:
            return True
        except OSError:
            return False

    def stop(self, timeout: float = 20.0) -> None:
        processes.stop(self._pid_file, timeout)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Start or stop the local S3 API server (s3proxy).")
    parser.add_argument("action", choices=["start", "stop", "status"])
    parser.add_argument("--dir", type=Path, default=REPO_ROOT / ".s3", help="objects, settings and log")
    parser.add_argument("--port", type=int, default=0, help="0: a free port")
    parser.add_argument("--bucket", default="lake")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    server = LocalS3(args.dir.resolve(), args.port, args.bucket)
    if args.action == "start":
        server.start()
        print(f"endpoint {server.endpoint} bucket {server.bucket}")
        print(
            f"connection: {server.directory / 'credentials.json'} (AIRFLOW_CONN_<ID>: LocalS3.connection_uri)"
        )
    elif args.action == "stop":
        server.stop()
    else:
        pid = server.running_pid()
        print(f"running, pid {pid}" if pid else "stopped")
        return 0 if pid else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
