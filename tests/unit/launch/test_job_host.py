"""The client side of a job host: which jobs it is offered, and what crosses its socket."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from kafkalake.core.kill_points import ENV_KILL_AT, ENV_KILL_SIGNAL
from kafkalake.launch import job_host
from kafkalake.launch.submit import Submission


def built(job: str = "ingest_topic", properties_file: Path | None = None) -> Submission:
    return Submission(
        application=Path(f"/repo/jobs/{job}.py"),
        application_args=("--topic", "orders"),
        conf={"spark.sql.shuffle.partitions": "2"},
        jars=(Path("/jars/delta.jar"),),
        env={"KAFKALAKE_KAFKA_CONFIG_FILE": "/tmp/private/kafka-client.json"},
        name=f"kafkalake-{job}-orders",
        properties_file=properties_file,
    )


@pytest.mark.parametrize("job", job_host.HOSTED_JOBS)
def test_a_local_job_of_the_hosted_kinds_is_offered(job):
    assert job_host.why_not_hosted(built(job), "local[*]", env={}) is None


@pytest.mark.parametrize(
    ("submission", "master", "env", "reason"),
    [
        (built("register_table"), "local[*]", {}, "register_table is not run by a job host"),
        (built("show_table"), "local[*]", {}, "show_table is not run by a job host"),
        (built(), "spark://10.0.0.5:7077", {}, "master spark://10.0.0.5:7077 is not local"),
        (built(properties_file=Path("/tmp/auth.conf")), "local[*]", {}, "the cluster authenticates"),
        (
            built(),
            "local[*]",
            {ENV_KILL_AT: "ingest:after_bronze_commit", ENV_KILL_SIGNAL: "SIGSTOP"},
            f"{ENV_KILL_SIGNAL}=SIGSTOP freezes the job: it needs a process of its own",
        ),
    ],
)
def test_jobs_a_host_cannot_stand_in_for_go_to_spark_submit(submission, master, env, reason):
    assert job_host.why_not_hosted(submission, master, env=env) == reason


@pytest.mark.parametrize(
    "kill", [{ENV_KILL_AT: "ingest:after_bronze_commit"}, {ENV_KILL_AT: "x", ENV_KILL_SIGNAL: "SIGKILL"}]
)
def test_a_job_that_kills_itself_at_a_named_point_is_offered(kill):
    """It dies between its calls into the JVM; the host settles the JVM before the next job."""
    assert job_host.why_not_hosted(built(), "local[*]", env=kill) is None


def test_only_kafkalake_variables_are_taken_from_the_task():
    env = {"KAFKALAKE_STRICT": "1", "AIRFLOW__CORE__FERNET_KEY": "x", "PATH": "/bin", "kafkalake_lower": "y"}
    assert job_host.project_variables(env) == {"KAFKALAKE_STRICT": "1"}


def test_no_host_named_means_spark_submit():
    assert job_host.host_address({}) is None
    assert job_host.host_address({job_host.ENV_JOB_HOST: ""}) is None
    assert job_host.host_address({job_host.ENV_JOB_HOST: "/run/h.sock"}) == "/run/h.sock"


class Server:
    """A socket that answers one request with the given lines, then closes: the host's side of the
    protocol, without a JVM."""

    def __init__(self, path: Path, answer: list[bytes], *, then_wait: bool = False) -> None:
        self.then_wait = then_wait
        self.client_left = threading.Event()
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(path))
        self.listener.listen(1)
        self.answer = answer
        self.received: dict[str, object] = {}
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        with conn:
            self.received = json.loads(conn.makefile("rb").readline())
            for part in self.answer:
                conn.sendall(part)
            # As the host's watch does: an empty read is the task gone, and the job is killed.
            if self.then_wait and conn.recv(1) == b"":
                self.client_left.set()


@pytest.fixture
def address(tmp_path) -> Iterator[Path]:
    # A Unix socket's path is short (108 bytes): pytest's tmp_path may be longer.
    folder = Path("/tmp") / f"kl-{tmp_path.name[-20:]}"
    folder.mkdir(exist_ok=True)
    yield job_host.socket_path(folder)
    job_host.socket_path(folder).unlink(missing_ok=True)
    folder.rmdir()


def test_the_jobs_output_comes_line_by_line_then_its_exit_code(address):
    server = Server(address, [b"> first line\n> sec", "ond \u00e9 \xff\n".encode("latin-1"), b"= 3\n"])
    lines: list[str] = []
    assert job_host.run_hosted(str(address), built(), {"KAFKALAKE_X": "1"}, lines.append) == 3
    server.thread.join(5)
    # Bytes that are not UTF-8 in the job's output arrive replaced, not as an error.
    assert lines == ["first line", "second \ufffd \ufffd"]
    assert server.received == {
        "application": "/repo/jobs/ingest_topic.py",
        "args": ["--topic", "orders"],
        "conf": {"spark.sql.shuffle.partitions": "2"},
        "jars": ["/jars/delta.jar"],
        "env": {"KAFKALAKE_X": "1"},
    }


def test_a_refusal_is_the_reason_and_no_exit_code(address):
    Server(address, [b"! busy with another job\n"])
    assert job_host.run_hosted(str(address), built(), {}, print) == "busy with another job"


def test_a_host_that_goes_away_mid_job_is_a_killed_job(address):
    Server(address, [b"> started\n"])
    assert job_host.run_hosted(str(address), built(), {}, lambda line: None) == -9


def test_no_host_listening_is_a_reason_to_use_spark_submit(address):
    outcome = job_host.run_hosted(str(address), built(), {}, print)
    assert isinstance(outcome, str) and outcome.startswith(f"no job host at {address}")


def test_a_job_silent_past_the_timeout_raises_and_leaves_the_host(address):
    server = Server(address, [b"> started\n"], then_wait=True)
    lines: list[str] = []
    with pytest.raises(TimeoutError):
        job_host.run_hosted(str(address), built(), {}, lines.append, silence_timeout=0.3)
    assert lines == ["started"]
    # The connection is closed: the host's cue to kill the job.
    assert server.client_left.wait(5)
