"""A warm Spark application that runs the project's jobs one at a time: the test suite's, not production's.

    python -m kafkalake.dev.job_host --dir DIR --lake LAKE    # serves on DIR/job-host.sock until stopped

Production runs a job as one spark-submit, one JVM per run (:mod:`kafkalake.launch.submit`); so do
the tests that kill jobs, watch their processes or measure them. The suite's other DAG runs hand
their jobs here (:mod:`kafkalake.launch.job_host`, ``KAFKALAKE_JOB_HOST``): the driver JVM's start
and warm-up is most of a short job's cost (``python -m kafkalake.dev.bench_warm``).

Each job runs in a child forked from the host's idle Python driver, so it has its own process (pid,
environment, module state, exit code) as under spark-submit, on the host's JVM: a fresh SQL session
(``newSession``: its own settings and streams), Delta's table cache emptied, the job's runtime
settings applied, its output and the JVM's sent back to the task while it runs. The host refuses a
job (which then goes to spark-submit) while one runs, when the job needs a jar it lacks, or when a
static setting differs from its JVM's. Before each job the JVM forgets the object stores the jobs
before it reached (their S3A settings and cached file systems).

A job that kills itself (a kill point, :mod:`kafkalake.core.kill_points`) dies between its own
calls into the JVM, so no call of it is half done there: the host waits until the streams it
started have ended (each fails at its next call back into the dead Python), cancels its Spark jobs
and drops what it cached, then goes on. When they do not end in time, or the task went away
mid-job (its child was killed from outside, perhaps in the middle of a JVM call that then runs to
its end), the host stops: the next job must not meet what is left.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import logging
import os
import runpy
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from kafkalake.launch.jars import jar_files
from kafkalake.launch.job_host import EXIT, LINE, REFUSED, project_variables, socket_path
from kafkalake.launch.spark_conf import base_conf

log = logging.getLogger("kafkalake.job_host")

#: Settings of the driver's launch, which a warm JVM has had its own of: they change no result.
LAUNCH_SETTINGS = frozenset(
    {
        "spark.app.name",
        "spark.driver.extraJavaOptions",
        "spark.driver.memory",
        "spark.executor.extraJavaOptions",
        "spark.master",
    }
)
#: The metastore's settings, which differ by lake: the jobs a host runs never open the metastore
#: (launch/job_host.HOSTED_JOBS), so one host serves the jobs of any lake.
METASTORE_SETTINGS = frozenset({"spark.sql.warehouse.dir", "spark.hadoop.javax.jdo.option.ConnectionURL"})
#: Settings Spark reads from a session's Hadoop configuration, which that session's settings make
#: up (``sessionState.newHadoopConf``): set on the job's session, they are the job's alone, though
#: ``isModifiable`` (which knows only the SQL settings it has registered as runtime) says no. An
#: object store's checkpoint manager (launch/spark_conf.OBJECT_STORE_CONF) is read where the
#: stream opens its checkpoint (``CheckpointFileManager.create``).
SESSION_HADOOP_SETTINGS = frozenset({"spark.sql.streaming.checkpointFileManagerClass"})
#: The prefix of Hadoop's S3A settings, which a job on an object store sets on the JVM's one Hadoop
#: configuration (spark/s3a_session) and the host sets back before the next job.
S3A_PREFIX = "fs.s3a."
#: Written to the output pipe after a child ended: every line before it is the job's.
_END = b"\x00kafkalake-job-host-end\n"
#: How Spark names a streaming query's thread (StreamExecution.queryExecutionThread).
STREAM_THREAD = "stream execution thread for"
#: How long the streams of a job that killed itself may take to end before the host gives up.
SETTLE_SECONDS = 60.0


def plan(
    conf: Mapping[str, str],
    jars: list[str],
    *,
    host_conf: Mapping[str, str],
    host_jars: set[str],
    modifiable: Callable[[str], bool],
) -> tuple[dict[str, str], str | None]:
    """The runtime settings to give a job's session, and why the host cannot run it (or None)."""
    missing = [jar for jar in jars if jar not in host_jars]
    if missing:
        return {}, f"the host lacks jar {missing[0]}"
    runtime: dict[str, str] = {}
    for key, value in conf.items():
        if key in LAUNCH_SETTINGS or key in METASTORE_SETTINGS or host_conf.get(key) == value:
            continue
        if key not in SESSION_HADOOP_SETTINGS and not modifiable(key):
            return {}, f"static setting {key} differs from the host's"
        runtime[key] = value
    return runtime, None


def s3a_settings(hadoop: Any) -> dict[str, str]:
    """Every S3A setting of a Hadoop configuration (a py4j proxy), by its whole key."""
    return {S3A_PREFIX + key: str(value) for key, value in hadoop.getPropsWithPrefix(S3A_PREFIX).items()}


class Output:
    """The host's standard output and error (its JVM's too): to the running job's task, else to a log."""

    def __init__(self, log_file: Path) -> None:
        self.read_end, self.write_end = os.pipe()
        self.log = log_file.open("ab")
        self.sink: socket.socket | None = None
        self.ended = threading.Event()
        self.lock = threading.Lock()

    def capture(self) -> None:
        """Send fds 1 and 2 (and so the JVM started after this) through the pipe."""
        os.dup2(self.write_end, 1)
        os.dup2(self.write_end, 2)
        threading.Thread(target=self._forward, name="job-host-output", daemon=True).start()

    def _forward(self) -> None:
        with os.fdopen(self.read_end, "rb") as pipe:
            for line in pipe:
                if line == _END:
                    self.ended.set()
                    continue
                self.log.write(line)
                self.log.flush()
                with self.lock:
                    sink = self.sink
                if sink is not None:
                    with contextlib.suppress(OSError):
                        sink.sendall(LINE.encode() + line.rstrip(b"\n").replace(b"\n", b" ") + b"\n")

    def to(self, sink: socket.socket | None) -> None:
        with self.lock:
            self.sink = sink

    def end_of_job(self) -> None:
        """Wait until every line the child wrote has been forwarded."""
        self.ended.clear()
        os.write(self.write_end, _END)
        self.ended.wait(30)


class Child:
    """A job's process, signalled by a pidfd: a task that goes away late cannot kill a reused pid."""

    def __init__(self, pid: int) -> None:
        self.fd = os.pidfd_open(pid)
        self.lock = threading.Lock()
        self.done = False
        self.killed = False  # by the host, for a task that went away

    def kill(self) -> None:
        with self.lock:
            if not self.done:
                self.killed = True
                signal.pidfd_send_signal(self.fd, signal.SIGKILL)

    def reaped(self) -> None:
        with self.lock:
            self.done = True
            os.close(self.fd)


class Host:
    def __init__(self, lake: Path, output: Output) -> None:
        from pyspark.sql import SparkSession

        # Every set a job may need, so that jobs on an object store or in a registry's format fit.
        jars = [*jar_files("spark"), *jar_files("avro"), *jar_files("s3a")]
        self.conf = {**base_conf(lake), "spark.jars": ",".join(str(p) for p in jars)}
        self.jars = {str(p) for p in jars}
        builder = SparkSession.builder.master("local[*]").appName("kafkalake-job-host")
        self.spark = builder.config(map=dict(self.conf)).getOrCreate()
        self.store_defaults = s3a_settings(self.spark.sparkContext._jsc.hadoopConfiguration())
        self.output = output
        self.busy = threading.Lock()
        self.done = threading.Event()
        # The host's own JVM calls, on one thread: py4j gives each thread a connection, and one
        # made on the thread a job is forked from would be the child's too (and closed under it
        # when the parent's thread ends).
        self.jvm_calls = concurrent.futures.ThreadPoolExecutor(max_workers=1)

    def serve(self, conn: socket.socket) -> None:
        with conn:
            wanted = json.loads(conn.makefile("rb").readline() or b"{}")
            if not self.busy.acquire(blocking=False):
                conn.sendall(f"{REFUSED}busy with another job\n".encode())
                return
            try:
                last = self._run(conn, wanted)
            finally:
                self.busy.release()
            # Only once the host is free: a task told its job's end may send the next job at once,
            # and must not find the host still busy with the one it was told has ended.
            with contextlib.suppress(OSError):
                conn.sendall(last)

    def _run(self, conn: socket.socket, wanted: dict[str, Any]) -> bytes:
        """Run the job ``wanted`` asks for: the last line to send its task (why the host refused it,
        or its exit code)."""
        runtime, refused = plan(
            wanted["conf"],
            wanted["jars"],
            host_conf=self.conf,
            host_jars=self.jars,
            modifiable=lambda key: bool(self.jvm_calls.submit(self.spark.conf.isModifiable, key).result()),
        )
        if refused is not None or self.done.is_set():
            return f"{REFUSED}{refused or 'the host is stopping'}\n".encode()
        self.output.to(conn)
        pid = os.fork()
        if pid == 0:
            os._exit(self._child(wanted, runtime))
        # By a pidfd, so that a task that goes away late cannot signal a pid reused since.
        child = Child(pid)
        threading.Thread(target=self._watch, args=(conn, child), daemon=True).start()
        status = os.waitpid(pid, 0)[1]
        self.output.end_of_job()
        self.output.to(None)
        code = os.waitstatus_to_exitcode(status)
        child.reaped()
        if code < 0:
            job = wanted["application"]
            left = "its task went away" if child.killed else self.jvm_calls.submit(self._settle).result()
            if left:
                log.warning("job %s died of signal %d (%s): the host stops", job, -code, left)
                self.stop()
            else:
                log.info("job %s died of signal %d; its streams and Spark jobs ended", job, -code)
        return f"{EXIT}{code}\n".encode()

    def _settle(self, timeout: float = SETTLE_SECONDS) -> str | None:
        """After a job died by its own signal: None once the JVM holds nothing of it (no stream, no
        running Spark job, nothing cached), else what is left when ``timeout`` ran out."""
        context = self.spark.sparkContext
        jvm = context._jvm
        assert jvm is not None
        deadline = time.monotonic() + timeout
        while True:
            context.cancelAllJobs()
            streams = [
                name
                for thread in jvm.java.lang.Thread.getAllStackTraces().keySet()
                if (name := str(thread.getName())).startswith(STREAM_THREAD)
            ]
            running = list(context.statusTracker().getActiveJobsIds())
            if not streams and not running:
                break
            if time.monotonic() > deadline:
                return f"after {timeout:.0f} s: streams {streams}, Spark jobs {running}"
            time.sleep(0.2)
        self.spark.catalog.clearCache()
        for rdd in context._jsc.getPersistentRDDs().values():
            rdd.unpersist()
        return None

    def _watch(self, conn: socket.socket, child: Child) -> None:
        """A task that goes away mid-job (killed, timed out) takes its job with it, as a killed
        spark-submit takes its driver."""
        try:
            gone = conn.recv(1) == b""
        except OSError:
            gone = True
        if gone:
            child.kill()

    def _child(self, wanted: dict[str, Any], runtime: Mapping[str, str]) -> int:
        from pyspark.sql import SparkSession

        code = 1
        try:
            # The task's kafkalake variables, not the host's: as if the task had started the job.
            for key in project_variables(os.environ):
                del os.environ[key]
            os.environ.update(wanted["env"])
            session = self.spark.newSession()
            for key, value in runtime.items():
                session.conf.set(key, value)
            jvm = session._jvm
            assert jvm is not None
            jvm.org.apache.spark.sql.SparkSession.setDefaultSession(session._jsparkSession)
            jvm.org.apache.spark.sql.SparkSession.setActiveSession(session._jsparkSession)
            SparkSession._instantiatedSession = session
            SparkSession._activeSession = session
            # The JVM is the host's: a job's stop ends its run, not the application.
            SparkSession.stop = lambda self: None
            jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()
            self._forget_object_stores(jvm)
            for handler in logging.root.handlers[:]:
                logging.root.removeHandler(handler)
            logging.getLogger("py4j").setLevel(logging.NOTSET)
            application = wanted["application"]
            sys.argv = [application, *wanted["args"]]
            sys.path.insert(0, str(Path(application).parent))
            runpy.run_path(application, run_name="__main__")
            code = 0
        except SystemExit as ended:
            if ended.code is None or isinstance(ended.code, int):
                code = ended.code or 0
            else:
                print(ended.code, file=sys.stderr)
        except BaseException:  # a crash is the job's exit 1, as under spark-submit
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
        return code

    def _forget_object_stores(self, jvm: Any) -> None:
        """The JVM's object-store state as at the host's start: the job's settings (endpoint,
        credentials) come from its own hand-over file or nowhere, never from the job before, whose
        cached S3A file systems would otherwise serve this one with their credentials."""
        hadoop = self.spark.sparkContext._jsc.hadoopConfiguration()
        now = s3a_settings(hadoop)
        for key in now.keys() - self.store_defaults.keys():
            hadoop.unset(key)
        for key, value in self.store_defaults.items():
            if now.get(key) != value:
                hadoop.set(key, value)
        jvm.org.apache.hadoop.fs.FileSystem.closeAll()

    def stop(self) -> None:
        self.done.set()


@contextlib.contextmanager
def running(folder: Path, lake: Path, *, timeout: float = 120) -> Iterator[subprocess.Popen[bytes]]:
    """A job host serving from ``folder`` for the jobs of ``lake``, stopped as the block ends."""
    host = subprocess.Popen(
        [sys.executable, "-m", "kafkalake.dev.job_host", "--dir", str(folder), "--lake", str(lake)],
        stdin=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + timeout
        while not socket_path(folder).exists():
            if host.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the job host did not start: see {folder / 'job-host.log'}")
            time.sleep(0.2)
        yield host
    finally:
        host.terminate()
        try:
            host.wait(60)
        except subprocess.TimeoutExpired:
            host.kill()
            host.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, required=True, help="where the socket and the log go")
    parser.add_argument("--lake", type=Path, required=True, help="the lake root of the jobs it runs")
    args = parser.parse_args(argv)
    args.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    output = Output(args.dir / "job-host.log")
    output.capture()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    # py4j's connection notices from the host's own threads would land in the running job's output.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    host = Host(args.lake, output)
    address = socket_path(args.dir)
    address.unlink(missing_ok=True)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(address))
    server.listen(8)
    server.settimeout(1.0)
    signal.signal(signal.SIGTERM, lambda *_: host.stop())
    log.info("serving jobs on %s", address)
    with server:
        while not host.done.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            conn.settimeout(None)
            threading.Thread(target=host.serve, args=(conn,), daemon=True).start()
        with host.busy:
            address.unlink(missing_ok=True)
    host.spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
