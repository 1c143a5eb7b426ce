"""The Airflow fork server: it runs Airflow's real CLI in the caller's environment, refuses an
environment that configures Airflow otherwise, reports a killed command, and ends with its starter."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kafkalake.dev import airflow_forkserver
from kafkalake.dev.airflow_forkserver import AirflowForkServer, airflow_settings
from kafkalake.dev.local_airflow import environment, run_airflow, start_airflow


def test_only_settings_airflow_reads_at_import_must_match():
    env = {
        "AIRFLOW_HOME": "/h",
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW_CONN_KAFKA_DEFAULT": "{}",
        "AIRFLOW_VAR_X": "1",
        "KAFKALAKE_STRICT": "1",
        "PATH": "/bin",
    }
    assert airflow_settings(env) == {"AIRFLOW_HOME": "/h", "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}


def test_a_child_takes_the_callers_temp_folder_not_the_servers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    saved = dict(os.environ)
    monkeypatch.setattr(tempfile, "tempdir", "/the/servers/tmp")  # as cached before the fork
    try:
        airflow_forkserver.take_environment({**saved, "TMPDIR": str(tmp_path)})
        assert tempfile.gettempdir() == str(tmp_path)
        assert os.environ["TMPDIR"] == str(tmp_path)
    finally:
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowForkServer]:
    env = environment(tmp_path_factory.mktemp("airflow-home"), kafka_bootstrap="127.0.0.1:9")
    started = AirflowForkServer(env).start()
    yield started
    started.stop()


def test_a_command_runs_in_the_callers_environment(server: AirflowForkServer):
    env = {**server.env, airflow_forkserver.ENV_FORKSERVER: server.socket, "AIRFLOW_VAR_GREETING": "hé there"}
    done = airflow_forkserver.run(server.socket, ["variables", "get", "GREETING"], env)
    assert done is not None, "not served"
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "hé there"  # read from this call's env, not the server's
    failed = run_airflow(env, "variables", "get", "MISSING", check=False)
    assert failed.returncode != 0


#: A command whose answer shows the Airflow configuration it ran in.
PARALLELISM = ("config", "get-value", "core", "parallelism")


def test_another_airflow_configuration_is_not_served(server: AirflowForkServer):
    other = {**server.env, "AIRFLOW__CORE__PARALLELISM": "3"}
    assert airflow_forkserver.run(server.socket, ["version"], other) is None
    # local_airflow then runs it as a process of its own, and it works.
    done = run_airflow({**other, airflow_forkserver.ENV_FORKSERVER: server.socket}, *PARALLELISM)
    assert done.stdout.strip().splitlines()[-1] == "3"


def test_a_killed_command_is_reported_as_killed(server: AirflowForkServer, tmp_path: Path):
    # The command's stdout is a FIFO nobody reads: the child blocks opening it, so it is surely
    # still running when it is killed.
    fifo = tmp_path / "stdout"
    os.mkfifo(fifo)
    request = {"args": ["version"], "env": server.env, "stdout": str(fifo), "stderr": str(tmp_path / "err")}
    assert server.process is not None
    children = Path(f"/proc/{server.process.pid}/task/{server.process.pid}/children")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(server.socket)
        airflow_forkserver._send(conn, json.dumps(request).encode())
        deadline = time.monotonic() + 30
        while not (pids := children.read_text().split()):
            assert time.monotonic() < deadline, "the server forked no child"
            time.sleep(0.01)
        for pid in pids:
            os.kill(int(pid), signal.SIGKILL)
        with pytest.raises(ConnectionError):
            airflow_forkserver._receive(conn)  # closed without a code: run() reports -9


def test_a_started_command_appends_its_output_and_reports_its_exit_code(
    server: AirflowForkServer, tmp_path: Path
):
    output = tmp_path / "runs.log"
    output.write_text("an earlier run's line\n")
    env = {**server.env, "AIRFLOW_VAR_GREETING": "hé there"}
    run = airflow_forkserver.start(server.socket, ["variables", "get", "GREETING"], env, output)
    assert run is not None, "not served"
    assert run.wait(timeout=120) == 0, output.read_text()[-2000:]
    assert run.poll() == 0
    lines = output.read_text().splitlines()
    assert lines[0] == "an earlier run's line"
    assert lines[-1] == "hé there"
    failed = airflow_forkserver.start(server.socket, ["variables", "get", "MISSING"], env, output)
    assert failed is not None and failed.wait(timeout=120) != 0


def test_a_started_command_is_a_process_group_of_its_own_that_a_kill_ends(
    server: AirflowForkServer, tmp_path: Path
):
    # Its output is a FIFO nobody reads: the child blocks opening it, so it surely still runs.
    fifo = tmp_path / "output"
    os.mkfifo(fifo)
    run = airflow_forkserver.start(server.socket, ["version"], server.env, fifo)
    assert run is not None
    assert server.process is not None
    assert os.getpgid(run.pid) == run.pid != os.getpgid(server.process.pid)
    assert run.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        run.wait(timeout=0.2)
    os.killpg(run.pid, signal.SIGKILL)
    assert run.wait(timeout=30) == -9
    # Reaped, not a zombie: a pid check after the kill (handover.sweep_stale's) finds it gone.
    assert not Path(f"/proc/{run.pid}").exists()
    # The server serves on.
    assert airflow_forkserver.run(server.socket, ["version"], server.env) is not None


def test_a_command_another_configuration_starts_is_a_process_of_its_own(
    server: AirflowForkServer, tmp_path: Path
):
    other = {**server.env, "AIRFLOW__CORE__PARALLELISM": "3"}
    output = tmp_path / "out.log"
    assert airflow_forkserver.start(server.socket, ["version"], other, output) is None
    run = start_airflow(
        {**other, airflow_forkserver.ENV_FORKSERVER: server.socket}, *PARALLELISM, output=output
    )
    assert isinstance(run, subprocess.Popen)
    assert os.getpgid(run.pid) == run.pid
    assert run.wait(timeout=120) == 0
    assert output.read_text().strip().splitlines()[-1] == "3"


def test_the_server_ends_with_its_starter(tmp_path_factory: pytest.TempPathFactory):
    env = environment(tmp_path_factory.mktemp("airflow-home"), kafka_bootstrap="127.0.0.1:9")
    started = AirflowForkServer(env).start()
    assert started.process is not None and started.process.stdin is not None
    started.process.stdin.close()  # as when the test session dies
    # A bound on "ends", not a speed: on 2 cores at load 10 the server took over 30 s to see it.
    assert started.process.wait(timeout=180) == 0
    started.stop()
    assert not started.folder.exists()


def test_a_childs_first_execution_api_is_the_one_the_server_built_routes_made(
    monkeypatch: pytest.MonkeyPatch,
):
    from airflow.api_fastapi.execution_api import app as execution_app

    # Restored after the test: the warm-up replaces the module's builder, as it does in the server.
    monkeypatch.setattr(
        execution_app, "create_task_execution_api_app", execution_app.create_task_execution_api_app
    )
    airflow_forkserver.warm_execution_api()

    first = execution_app.InProcessExecutionAPI().app
    assert first._cadwyn_initialized  # its versioned routes made before any request
    # Built as InProcessExecutionAPI builds its own: authentication bypassed, a dag bag of its own.
    assert len(first.dependency_overrides) == 4
    assert first.state.dag_bag is not None
    # The next one in the same process is built anew: one app's lifespan is never entered twice.
    second = execution_app.InProcessExecutionAPI().app
    assert second is not first
    assert not second._cadwyn_initialized
