"""Airflow's CLI with its imports paid once: a fork server for ``airflow dags test`` and friends.

An idle ``airflow dags test`` took ~10.5 CPU-s, of which ~6 went to importing Airflow, its
execution API and the providers before the first task ran; the test suite runs it ~25 times, on
2 cores. The server imports those once, then forks a child per command: the child takes the
caller's environment, runs Airflow's own CLI entry point, and reports its exit code. Measured on
an idle DAG run: 10.5 -> 4.6 CPU-s, 12.6 -> 6.7 s.

A command is served only when its environment configures Airflow as the server's did (the same
``AIRFLOW_HOME`` and the same ``AIRFLOW*`` variables other than connections and variables, which
Airflow reads when it looks them up): Airflow reads its configuration when imported, so anything
else runs as a fresh ``airflow`` process (:mod:`kafkalake.dev.local_airflow` falls back by itself).

A command a caller may kill (``airflow dags test`` SIGKILLed mid-run, as a lost worker would be)
is started with :func:`start`: its child makes a process group of its own and tells its pid, so a
``killpg`` ends it and every process under it, as ``subprocess.Popen(..., start_new_session=True)``
of a fresh ``airflow`` would, without paying Airflow's imports again (~6.5 CPU-s a run).

The server ends when the process that started it closes its stdin (or dies), so it never outlives
a test session.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

# Airflow is imported by the server (PRELOAD) and its children only, never by the process that starts the
# server: Airflow reads its configuration when imported.

#: Set in an environment to the server's socket: :func:`kafkalake.dev.local_airflow.run_airflow`
#: then runs Airflow's CLI through it.
ENV_FORKSERVER = "KAFKALAKE_AIRFLOW_FORKSERVER"

#: What Airflow imports for ``dags test`` before its first task runs, imported once here.
PRELOAD = (
    "airflow.__main__",
    "airflow.cli.cli_parser",
    "airflow.cli.commands.dag_command",
    "airflow.models",
    "airflow.models.dagbag",
    "airflow.sdk",
    "airflow.sdk.execution_time.task_runner",
    "airflow.sdk.execution_time.supervisor",
    "airflow.api_fastapi.execution_api.app",
    "airflow.api_fastapi.execution_api.routes",
    "airflow.providers.apache.spark.operators.spark_submit",
    "kafkalake.airflow.dag_factory",
    "kafkalake.airflow.tasks",
    # A task's run history is appended through delta-rs, which imports pyarrow and pandas (~1.5 CPU-s
    # a child); Airflow's migration check imports alembic.
    "kafkalake.lake.run_history",
    "deltalake",
    "pyarrow",
    "pandas",
    "alembic.context",
)

#: The reply when the command's environment configures Airflow otherwise: run it as a process.
NOT_SERVED = -1000
_CODE = struct.Struct("!i")


def airflow_settings(env: Mapping[str, str]) -> dict[str, str]:
    """The variables Airflow reads when it is imported: ``AIRFLOW_HOME``, ``AIRFLOW__…`` and the
    like; connections and variables (``AIRFLOW_CONN_…``, ``AIRFLOW_VAR_…``) are read on lookup."""
    return {
        key: value
        for key, value in env.items()
        if key.startswith("AIRFLOW") and not key.startswith(("AIRFLOW_CONN_", "AIRFLOW_VAR_"))
    }


def _send(conn: socket.socket, payload: bytes) -> None:
    conn.sendall(struct.pack("!I", len(payload)) + payload)


def _receive(conn: socket.socket) -> bytes:
    def exactly(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = conn.recv(n - len(data))
            if not chunk:
                raise ConnectionError("the fork server closed the connection")
            data += chunk
        return data

    (size,) = struct.unpack("!I", exactly(4))
    return exactly(size)


def take_environment(env: Mapping[str, str]) -> None:
    """Become a process started with ``env``: its variables, and what the standard library derived
    from the server's (the temp folder: a run's own TMPDIR is where its leftovers are looked for;
    the time zone)."""
    os.environ.clear()
    os.environ.update(env)
    tempfile.tempdir = None
    time.tzset()


def _run_child(request: dict[str, object]) -> int:
    """In the forked child: become the command's process and run Airflow's CLI."""
    env = request["env"]
    assert isinstance(env, dict)
    take_environment(env)
    # Appended (a log several runs share) or started anew; one file for both when they name the same.
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if request.get("append") else os.O_TRUNC)
    out = os.open(str(request["stdout"]), flags, 0o600)
    err = out if request["stderr"] == request["stdout"] else os.open(str(request["stderr"]), flags, 0o600)
    for fd, opened in ((1, out), (2, err)):
        os.dup2(opened, fd)
    for opened in {out, err}:
        os.close(opened)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    sys.argv = ["airflow", *request["args"]]  # type: ignore[misc]
    try:
        from airflow import settings

        # A connection pool inherited over fork must not be shared (SQLAlchemy's advice).
        if getattr(settings, "engine", None) is not None:
            settings.engine.dispose(close=False)
        from airflow.__main__ import main

        main()
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException:
        traceback.print_exc()
        code = 1
    return code


def warm_execution_api() -> None:
    """Build the in-process execution API's app once, here, and hand it to the first one a child asks for.

    ``airflow dags test`` runs its tasks against an in-process execution API; Cadwyn makes that app's
    versioned routes on its first request: a profile (py-spy) of the forked ``dags test`` children
    of test_ingest_dag put 196 and 282 of their 372 and 528 samples there, 4-5.5 CPU-s a run. The
    app built here is what ``InProcessExecutionAPI.app`` builds (its own lifespan and services,
    authentication bypassed), routes made; a child's first ``create_task_execution_api_app`` returns
    it, later ones build their own, so no app is entered twice in one process.

    Only Airflow's own objects are reused, and none holds a thread, socket or connection; where
    Airflow has moved them, children build theirs as before (and the server's log says so).
    """
    try:
        from airflow.api_fastapi.execution_api import app as execution_app

        warm = execution_app.InProcessExecutionAPI().app
        warm._cadwyn_initialize()
        build = execution_app.create_task_execution_api_app
    except (ImportError, AttributeError) as err:
        logging.getLogger(__name__).warning("execution API not warmed, children build theirs: %r", err)
        return
    unused = [warm]

    def create_task_execution_api_app(*args: Any, **kwargs: Any) -> Any:
        return unused.pop() if unused else build(*args, **kwargs)

    execution_app.create_task_execution_api_app = create_task_execution_api_app


def serve(path: str) -> None:
    """The server's loop: import, listen on ``path``, fork a child per command."""
    for module in PRELOAD:
        importlib.import_module(module)
    warm_execution_api()
    settings = airflow_settings(os.environ)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # Listening before the path appears: the starter waits for the path.
    listener.bind(path + ".tmp")
    listener.listen(8)
    os.rename(path + ".tmp", path)
    # A child is reaped the moment it ends: a caller waiting on a started command (ServedRun)
    # waits until its pid is gone, as Popen.wait does, and a zombie's pid still counts as running
    # to whoever checks it (handover.sweep_stale, after a killed run).
    reaped, wake = os.pipe()
    os.set_blocking(wake, False)
    signal.set_wakeup_fd(wake)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    while True:
        readable, _, _ = select.select([listener, sys.stdin, reaped], [], [], 1.0)
        if reaped in readable:
            os.read(reaped, 512)
        while True:  # reap finished children
            try:
                pid, _status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
        if sys.stdin in readable and not os.read(sys.stdin.fileno(), 1):
            return  # whoever started the server is gone
        if listener not in readable:
            continue
        conn, _ = listener.accept()
        try:
            request = json.loads(_receive(conn))
        except (ConnectionError, ValueError):
            conn.close()
            continue
        if airflow_settings(request["env"]) != settings:
            _send(conn, _CODE.pack(NOT_SERVED))
            conn.close()
            continue
        if os.fork() == 0:
            listener.close()
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            os.close(reaped)
            os.close(wake)
            code = 1
            try:
                if request.get("own_group"):
                    # A group of its own, which the caller kills whole; it learns whose first.
                    os.setsid()
                    _send(conn, _CODE.pack(os.getpid()))
                code = _run_child(request)
            finally:
                # As at a process's own exit: every log handler flushed and closed (os._exit below
                # skips the interpreter's exit, which would run the server's loop's callers).
                with contextlib.suppress(Exception):
                    logging.shutdown()
                    sys.stdout.flush()
                    sys.stderr.flush()
                try:
                    _send(conn, _CODE.pack(code))
                finally:
                    os._exit(code)
        conn.close()


class AirflowForkServer:
    """A fork server for one Airflow configuration (see the module docstring)."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = dict(env)
        # A short path of its own: a Unix socket's path is limited to ~100 bytes.
        self.folder = Path(tempfile.mkdtemp(prefix="kl-airflow-"))
        self.socket = str(self.folder / "cli.sock")
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 120.0) -> AirflowForkServer:
        log = self.folder / "server.log"
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "kafkalake.dev.airflow_forkserver", self.socket],
                env=self.env,
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        while not os.path.exists(self.socket):  # bound and listening once it exists
            if self.process.poll() is not None or time.monotonic() > deadline:
                said = log.read_text(errors="replace")[-3000:]
                self.stop()
                raise RuntimeError(
                    f"the Airflow fork server did not start (exit {self.process.poll()}):\n{said}"
                )
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.close()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for leftover in self.folder.iterdir() if self.folder.exists() else []:
            leftover.unlink()
        if self.folder.exists():
            self.folder.rmdir()


def run(
    socket_path: str, args: Sequence[str], env: Mapping[str, str]
) -> subprocess.CompletedProcess[str] | None:
    """Run ``airflow *args`` in ``env`` through the server at ``socket_path``; None when the server
    does not serve this environment's Airflow configuration (run it as a process then)."""
    with tempfile.TemporaryDirectory(prefix="kl-airflow-run-") as folder:
        out, err = Path(folder) / "stdout", Path(folder) / "stderr"
        request = {"args": list(args), "env": dict(env), "stdout": str(out), "stderr": str(err)}
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(socket_path)
            _send(conn, json.dumps(request).encode())
            try:
                (code,) = _CODE.unpack(_receive(conn))
            except ConnectionError:
                code = -9  # the child died before it could say (killed, or crashed)
        if code == NOT_SERVED:
            return None
        return subprocess.CompletedProcess(["airflow", *args], code, _text(out), _text(err))


class ServedRun:
    """A command the server runs in a process group of its own (:func:`start`): what a caller of
    ``subprocess.Popen(..., start_new_session=True)`` uses of it, ``pid`` (the group's) for
    ``os.killpg``, ``poll`` and ``wait``. The exit code is the one the child sends, -9 when it dies
    without sending one (killed)."""

    def __init__(self, conn: socket.socket, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._conn = conn
        self._done = threading.Event()
        threading.Thread(target=self._await_code, name=f"served-run-{pid}", daemon=True).start()

    def _await_code(self) -> None:
        try:
            (code,) = _CODE.unpack(_receive(self._conn))
        except OSError:  # ConnectionError among them: closed without a code, so killed
            code = -9
        finally:
            self._conn.close()
        # Gone, not only done talking: reaped by the server the moment it ends.
        while Path(f"/proc/{self.pid}").exists():
            time.sleep(0.02)
        self.returncode = code
        self._done.set()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._done.wait(timeout):
            raise subprocess.TimeoutExpired(f"served run {self.pid}", timeout or 0.0)
        assert self.returncode is not None
        return self.returncode


def start(socket_path: str, args: Sequence[str], env: Mapping[str, str], output: Path) -> ServedRun | None:
    """Start ``airflow *args`` in ``env`` through the server at ``socket_path``, in a process group
    of its own, its stdout and stderr appended to ``output``; None when the server does not serve
    this environment's Airflow configuration (start it as a process then)."""
    request = {
        "args": list(args),
        "env": dict(env),
        "stdout": str(output),
        "stderr": str(output),
        "append": True,
        "own_group": True,
    }
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(socket_path)
        _send(conn, json.dumps(request).encode())
        (first,) = _CODE.unpack(_receive(conn))
    except BaseException:
        conn.close()
        raise
    if first == NOT_SERVED:
        conn.close()
        return None
    return ServedRun(conn, first)


def _text(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


if __name__ == "__main__":
    serve(sys.argv[1])
