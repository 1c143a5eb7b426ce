"""Local servers started in the background (the broker, the S3 server): found and stopped by pid file."""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from contextlib import suppress
from pathlib import Path


def running_pid(pid_file: Path) -> int | None:
    """The pid in ``pid_file`` if that process is alive; None otherwise."""
    try:
        pid = int(pid_file.read_text())
        os.kill(pid, 0)
    except (FileNotFoundError, ValueError, ProcessLookupError, PermissionError):
        return None
    return pid


def stop(pid_file: Path, timeout: float) -> None:
    """SIGTERM the process, SIGKILL it if it is still there after ``timeout``; remove the pid file."""
    pid = running_pid(pid_file)
    if pid is None:
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and running_pid(pid_file) is not None:
        time.sleep(0.2)
        with suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
    if running_pid(pid_file) is not None:
        os.kill(pid, signal.SIGKILL)
    pid_file.unlink(missing_ok=True)


def spawn(
    cmd: Sequence[str], log_file: Path, pid_file: Path, cwd: Path | None = None
) -> subprocess.Popen[bytes]:
    """Start a server in the background, its output appended to ``log_file``, its pid in ``pid_file``.

    A session of its own: it outlives the command that started it, and is stopped by pid (:func:`stop`).
    """
    with log_file.open("ab") as out:
        process = subprocess.Popen(
            list(cmd),
            cwd=cwd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    pid_file.write_text(str(process.pid))
    return process


def _argfile_quoted(arg: str) -> str:
    # The java launcher's @-file syntax: inside double quotes a backslash escapes the next
    # character and \n, \r, \t are control characters; '#' outside quotes starts a comment.
    escaped = arg.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    return f'"{escaped}"\n'


def run_java_quietly(java: str, args: Sequence[str], workdir: Path) -> subprocess.CompletedProcess[str]:
    """Run ``java <args>`` with every argument in an @-file, not on the command line.

    For arguments that carry secrets (the storage tool's SCRAM passwords): a command line is
    readable by every user of the machine in ``/proc/<pid>/cmdline`` and lands in error messages.
    The @-file is created 0600 in ``workdir`` and removed when java exits, whatever happens.
    """
    fd, name = tempfile.mkstemp(prefix=".java-args-", dir=workdir)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.writelines(_argfile_quoted(a) for a in args)
        return subprocess.run([java, f"@{name}"], capture_output=True, text=True, check=False)
    finally:
        Path(name).unlink(missing_ok=True)
