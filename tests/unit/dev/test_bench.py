"""The bench's watch over the ingest job's processes, which may end between any two reads."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kafkalake.dev.bench import _children, _tree


def test_a_process_that_ends_while_its_threads_are_listed_has_no_children(monkeypatch):
    """/proc/<pid>/task existed when the glob looked, and was gone when it listed it."""

    def vanished(self: Path, pattern: str):
        raise FileNotFoundError(2, "No such file or directory", str(self))

    monkeypatch.setattr(Path, "glob", vanished)

    assert _children(12345) == []
    assert _tree(12345) == [12345]


def test_a_process_that_has_ended_has_no_children():
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()

    assert _tree(gone.pid) == [gone.pid]


@pytest.mark.parametrize("depth", [1, 2])
def test_the_tree_holds_running_children_and_grandchildren(depth):
    code = "import time; time.sleep(30)"
    if depth == 2:
        code = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {code!r}])"
    child = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    try:
        wanted = [child.pid]
        for _ in range(200):
            grandchildren = _children(child.pid)
            if len(grandchildren) == depth - 1:
                wanted += grandchildren
                break
            time.sleep(0.05)
        assert len(wanted) == depth, "the grandchild never started"
        assert child.pid in _children(os.getpid())
        assert set(wanted) <= set(_tree(os.getpid()))
    finally:
        os.killpg(child.pid, 9)
        child.wait()
