"""Local servers started in the background (the broker, the S3 server): found and stopped by pid file."""

from __future__ import annotations

import os
import signal
import time
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
