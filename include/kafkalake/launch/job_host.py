"""Hand a job to a warm job host instead of spark-submit: a development and test facility.

Production runs each job as one spark-submit, one JVM per run (:mod:`.submit`). The test suite's
DAG runs start a few hundred short jobs, and a driver JVM's start and warm-up is most of what a
short one costs (``python -m kafkalake.dev.bench_warm``: ~27 CPU-seconds cold, ~8 warm). When the
environment names a host's socket in :data:`ENV_JOB_HOST` (``python -m kafkalake.dev.job_host``), an
operator offers it the same :class:`~kafkalake.launch.submit.Submission` it would submit; the host
runs the job in a child process on its warm JVM, or refuses (it is busy, or its JVM was not started
with the job's jars and static settings), and the job goes to spark-submit as always.

Only the socket's path, the job's settings and its environment cross: the Kafka client settings
stay in their private hand-over file (:mod:`.handover`), which the job reads and deletes as it does
under spark-submit.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable, Mapping
from pathlib import Path

from kafkalake.core.kill_points import ENV_KILL_AT, ENV_KILL_SIGNAL
from kafkalake.launch.submit import Submission

#: The job host's Unix socket; unset (production): every job goes to spark-submit.
ENV_JOB_HOST = "KAFKALAKE_JOB_HOST"
#: The jobs a host may run. Not ``register_table`` or ``show_table``: they open the metastore, and
#: an embedded Derby database admits one JVM (a host holding it would fail the next spark-submit).
HOSTED_JOBS = ("ingest_topic", "maintain_table", "refresh_schema", "replay_topic")
#: How a task's log names the job it handed a host (the provider's line for spark-submit: "Spark-Submit cmd").
JOB_HOST_CMD = "Job host cmd:"
#: The prefix of kafkalake's environment variables.
PREFIX = "KAFKALAKE_"
#: What the host sends: a line of the job's output, its exit code, or why it did not take the job.
LINE, EXIT, REFUSED = "> ", "= ", "! "


def host_address(env: Mapping[str, str] | None = None) -> str | None:
    """The job host's socket named in ``env`` (by default this process's environment), or None."""
    return (os.environ if env is None else env).get(ENV_JOB_HOST) or None


def why_not_hosted(submission: Submission, master: str, *, env: Mapping[str, str]) -> str | None:
    """Why ``submission`` must go to spark-submit whatever the host could do, or None. ``env``: the
    job's environment as the task would hand it to spark-submit (:func:`project_variables` of its
    own, then the submission's).

    A job a test freezes at a named point (``KAFKALAKE_KILL_SIGNAL=SIGSTOP``) needs a process of its
    own, which the test wakes; a cluster's master or secret is not the host's ``local[*]``. (A job
    that kills itself at a named point is hosted: it dies between its calls into the JVM, and the
    host settles the JVM before the next job. A job on an object store is hosted: the host resets
    the JVM's S3A settings and file systems before each job.)
    """
    job = submission.application.stem
    if job not in HOSTED_JOBS:
        return f"{job} is not run by a job host"
    if not master.startswith("local"):
        return f"master {master} is not local"
    if submission.properties_file is not None:
        return "the cluster authenticates"
    if env.get(ENV_KILL_AT) and env.get(ENV_KILL_SIGNAL, "SIGKILL") != "SIGKILL":
        return f"{ENV_KILL_SIGNAL}={env[ENV_KILL_SIGNAL]} freezes the job: it needs a process of its own"
    return None


def project_variables(env: Mapping[str, str]) -> dict[str, str]:
    """kafkalake's own variables in ``env``: what a job reads from the environment it inherits."""
    return {key: value for key, value in env.items() if key.startswith(PREFIX)}


def request(submission: Submission, env: Mapping[str, str]) -> dict[str, object]:
    """What the host is sent: the job, its settings and jars, and its environment on top of the
    host's (``env``: the submission's, with what the task added)."""
    return {
        "application": str(submission.application),
        "args": list(submission.application_args),
        "conf": dict(submission.conf),
        "jars": [str(p) for p in submission.jars],
        "env": dict(env),
    }


def run_hosted(
    address: str,
    submission: Submission,
    env: Mapping[str, str],
    on_line: Callable[[str], None],
    *,
    silence_timeout: float | None = None,
) -> int | str:
    """Run ``submission`` on the host at ``address``: its exit code, or why the host did not take it
    (busy, different settings, gone). ``on_line`` gets each line of the job's output as it comes.
    ``silence_timeout``: seconds the job may say nothing before :class:`TimeoutError` (which, closing
    the connection, makes the host kill the job)."""
    try:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.settimeout(silence_timeout)
        conn.connect(address)
    except OSError as err:
        return f"no job host at {address}: {err}"
    with conn, conn.makefile("rwb") as stream:
        stream.write(json.dumps(request(submission, env)).encode() + b"\n")
        stream.flush()
        for raw in stream:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            kind, text = line[:2], line[2:]
            if kind == LINE:
                on_line(text)
            elif kind == EXIT:
                return int(text)
            elif kind == REFUSED:
                return text
    # The host went away mid-job: the job's outcome is unknown, as when spark-submit is killed.
    return -9


def socket_path(folder: Path) -> Path:
    """Where a host serving from ``folder`` listens."""
    return folder / "job-host.sock"
