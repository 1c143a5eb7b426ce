"""A real Spark standalone cluster (one master, one worker) on loopback, from pip's pyspark.

It authenticates and encrypts its RPC (``spark.authenticate``, ``spark.network.crypto.enabled``) with a
secret generated at start into a 0600 properties file (:mod:`kafkalake.launch.spark_auth`), given to
the master, the worker and the jobs by path (``--properties-file``) and removed on stop.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyspark

from kafkalake.dev.standalone_airflow import free_port
from kafkalake.launch.spark_auth import write_auth_file


@dataclass
class StandaloneSpark:
    directory: Path
    port: int = field(default_factory=free_port)
    ui_port: int = field(default_factory=free_port)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def auth_file(self) -> Path:
        """The properties file with the cluster's secret; a job passes it to spark-submit."""
        return self.directory / "spark-auth.properties"

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _start(self, name: str, *args: str) -> None:
        spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
        env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_WORKER_DIR": str(self.directory / "work")}
        with (self.directory / f"{name}.log").open("wb") as log:
            self.processes.append(
                subprocess.Popen(
                    [str(spark_class), *args, "--properties-file", str(self.auth_file)],
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )

    def start(self, timeout: float = 120.0) -> StandaloneSpark:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.auth_file.unlink(missing_ok=True)
        write_auth_file(self.auth_file)
        self._start(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--webui-port",
            str(self.ui_port),
        )
        self._start(
            "worker",
            "org.apache.spark.deploy.worker.Worker",
            "--host",
            "127.0.0.1",
            "--cores",
            "2",
            "--memory",
            "2g",
            "--webui-port",
            str(free_port()),
            self.master_url,
        )
        try:
            self._wait_for_a_worker(timeout)
        except BaseException:
            self.stop()  # a start that fails leaves no master or worker running
            raise
        return self

    def _wait_for_a_worker(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if self.state().get("aliveworkers", 0) >= 1:
                    return
            # ValueError: while the master's UI attaches its handlers, its root page answers
            # /json/ with HTML (seen once with four test workers on two cores).
            except (OSError, ValueError):
                pass
            time.sleep(1)
        raise RuntimeError(f"no live Spark worker after {timeout:.0f}s; see {self.directory}")

    def state(self) -> dict[str, Any]:
        """The master's own JSON view: workers, running and completed applications."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as reply:
            loaded: dict[str, Any] = json.load(reply)
        return loaded

    def stop(self) -> None:
        for process in reversed(self.processes):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
        self.processes.clear()
        self.auth_file.unlink(missing_ok=True)
