"""A real single-node Kafka broker (KRaft, combined broker + controller) on loopback.

Run from Apache Kafka's own jars (resolved by ``kafkalake.launch.jars``); the demo and the tests use it.

    python -m kafkalake.dev.broker start [--dir .kafka] [--port 9092]
    python -m kafkalake.dev.broker stop  [--dir .kafka]
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import logging
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kafkalake.core.paths import REPO_ROOT
from kafkalake.dev import processes
from kafkalake.launch.jars import jar_files

# confluent_kafka is imported where a topic is created: every test process imports this module
# (tests/conftest.py), and the unit tests never need the client.

log = logging.getLogger(__name__)

#: A JVM server's log4j2 configuration: INFO to one file, Kafka's own chatter at WARN.
LOG4J2_PROPERTIES = """\
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log_file}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.kafka.name = kafka
logger.kafka.level = WARN
logger.apache.name = org.apache.kafka
logger.apache.level = WARN
"""


class BrokerError(RuntimeError):
    pass


def new_cluster_id(random_bytes: Callable[[], bytes] = lambda: uuid.uuid4().bytes) -> str:
    """A KRaft cluster id: 16 random bytes in unpadded base64url, as Kafka's ``Uuid`` prints them.

    Like Kafka's own ``Uuid.randomUuid()``, redraw ids that start with '-': the storage tool would
    take ``-t -abc…`` for an option (one id in 64).
    """
    while True:
        candidate = base64.urlsafe_b64encode(random_bytes()).rstrip(b"=").decode()
        if not candidate.startswith("-"):
            return candidate


def free_port(avoid: Collection[int] = ()) -> int:
    """A TCP port on loopback that nothing listens on now, and not one of ``avoid``: the kernel may
    hand out a port it just gave back, and a broker whose two listeners got the same one refused to
    format its storage (a secured broker's SASL_SSL and SSL listeners, seen once in a suite run)."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port not in avoid:
            return port


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


#: JVM options for a broker that serves a few thousand records (the test suite's): C1 only, since
#: C2's compiles never pay back there: ~2.3 CPU-s less for a start, 500 records and a minute idle
#: (6.6/6.2 -> 3.9/4.4 CPU-s). The bench's broker keeps the JVM's default.
SMALL_LOAD_JAVA_OPTIONS = ("-XX:TieredStopAtLevel=1",)


@dataclass
class LocalKafka:
    """A broker whose data, config and logs live in ``directory``.

    Ports default to free ones picked at start; the demo pins 9092 so users can reach it.
    """

    directory: Path
    port: int = 0
    controller_port: int = 0
    heap: str = "1G"
    extra_config: dict[str, str] = field(default_factory=dict)
    #: More options for the broker's JVM (the test suite's: :data:`SMALL_LOAD_JAVA_OPTIONS`).
    java_options: tuple[str, ...] = ()

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def _pid_file(self) -> Path:
        return self.directory / "broker.pid"

    @property
    def log_file(self) -> Path:
        return self.directory / "broker.log"

    def _settings(self) -> dict[str, str]:
        return {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.bootstrap.servers": f"127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.directory / "data"),
            "num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "false",
            **self.extra_config,
        }

    def _server_properties(self) -> str:
        return "".join(f"{k}={v}\n" for k, v in self._settings().items())

    def running_pid(self) -> int | None:
        return processes.running_pid(self._pid_file)

    def start(self, timeout: float = 90.0) -> LocalKafka:
        """Format (first time only) and start the broker; return once it serves metadata."""
        self.directory.mkdir(parents=True, exist_ok=True)
        if self.running_pid() is not None:
            self._load_ports()
            self._wait_ready(timeout)
            log.info("broker already running at %s", self.bootstrap_servers)
            return self
        self._pick_ports()
        for port in self._ports():
            if _port_open(port):
                raise BrokerError(f"port {port} is taken: stop what uses it or pick another with --port")
        self._prepare()
        props = self.directory / "server.properties"
        # 0600: the secured broker's inter-broker login (a password) is in it.
        props.touch(mode=0o600)
        props.chmod(0o600)
        props.write_text(self._server_properties())
        (self.directory / "log4j2.properties").write_text(LOG4J2_PROPERTIES.format(log_file=self.log_file))
        java = shutil.which("java")
        if java is None:
            raise BrokerError("java is not on PATH: install a JDK 17 and set JAVA_HOME")
        classpath = os.pathsep.join(str(p) for p in jar_files("kafka"))
        if not (self.directory / "data" / "meta.properties").exists():
            cluster_id = new_cluster_id()
            formatted = processes.run_java_quietly(
                java,
                [
                    # A one-shot tool: C1 only, its compiles would never pay back.
                    "-XX:TieredStopAtLevel=1",
                    "-cp",
                    classpath,
                    "kafka.tools.StorageTool",
                    "format",
                    "--standalone",
                    "-t",
                    cluster_id,
                    "-c",
                    str(props),
                    *self._format_args(),
                ],
                self.directory,
            )
            if formatted.returncode != 0:
                # Not the arguments: they may hold SCRAM passwords.
                tail = (formatted.stderr or formatted.stdout).strip()[-2000:]
                raise BrokerError(f"formatting the broker's storage failed ({formatted.returncode}): {tail}")
        with self.log_file.open("ab") as out:
            process = subprocess.Popen(
                [
                    java,
                    f"-Xmx{self.heap}",
                    "-Xms256m",
                    "-XX:+UseG1GC",
                    *self.java_options,
                    "-Djava.awt.headless=true",
                    f"-Dlog4j2.configurationFile={self.directory / 'log4j2.properties'}",
                    "-cp",
                    classpath,
                    "kafka.Kafka",
                    str(props),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # outlives the command that started it; stopped by pid
            )
        self._pid_file.write_text(str(process.pid))
        (self.directory / "ports").write_text(" ".join(str(p) for p in self._ports()) + "\n")
        try:
            self._wait_ready(timeout, process)
        except BrokerError:
            self.stop()
            raise
        log.info("broker ready at %s (pid %d)", self.bootstrap_servers, process.pid)
        return self

    # Hooks for a broker with other listeners (kafkalake.dev.secured_broker): its ports, what it
    # needs before the first start, extra storage-format arguments, how its admin connects.

    def _pick_ports(self) -> None:
        self.port = self.port or free_port()
        self.controller_port = self.controller_port or free_port(avoid={self.port})

    def _ports(self) -> list[int]:
        return [self.port, self.controller_port]

    def _set_ports(self, ports: list[int]) -> None:
        self.port, self.controller_port = ports

    def _prepare(self) -> None:
        """Runs before ``server.properties`` is written."""

    def _format_args(self) -> list[str]:
        return []

    def admin_config(self) -> dict[str, str]:
        """librdkafka settings of a client allowed to do anything on this broker."""
        return {"bootstrap.servers": self.bootstrap_servers}

    def _load_ports(self) -> None:
        self._set_ports([int(p) for p in (self.directory / "ports").read_text().split()])

    def _wait_ready(self, timeout: float, process: subprocess.Popen[bytes] | None = None) -> None:
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout
        admin = AdminClient({**self.admin_config(), "log_level": "0"})
        while time.monotonic() < deadline:
            if process is not None and process.poll() is not None:
                raise BrokerError(f"broker exited with {process.returncode}; see {self.log_file}")
            if _port_open(self.port):
                with contextlib.suppress(Exception):
                    if admin.list_topics(timeout=2).brokers:
                        return
            time.sleep(0.5)
        raise BrokerError(f"broker not ready after {timeout:.0f}s; see {self.log_file}")

    def stop(self, timeout: float = 30.0) -> None:
        processes.stop(self._pid_file, timeout)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Start or stop the local Kafka broker.")
    parser.add_argument("action", choices=["start", "stop", "status"])
    parser.add_argument("--dir", type=Path, default=REPO_ROOT / ".kafka", help="data and log folder")
    parser.add_argument("--port", type=int, default=9092)
    parser.add_argument("--controller-port", type=int, default=9093)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    broker = LocalKafka(args.dir.resolve(), args.port, args.controller_port)
    if args.action == "start":
        broker.start()
        print(broker.bootstrap_servers)
    elif args.action == "stop":
        broker.stop()
    else:
        pid = broker.running_pid()
        print(f"running, pid {pid}" if pid else "stopped")
        return 0 if pid else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
