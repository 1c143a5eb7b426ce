"""The bench's watch over the ingest job's processes, which may end between any two reads."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kafkalake.dev.process_tree import children, tree


def test_a_process_that_ends_while_its_threads_are_listed_has_nochildren(monkeypatch):
    """/proc/<pid>/task existed when the glob looked, and was gone when it listed it."""

    def vanished(self: Path, pattern: str):
        raise FileNotFoundError(2, "No such file or directory", str(self))

    monkeypatch.setattr(Path, "glob", vanished)

    assert children(12345) == []
    assert tree(12345) == [12345]


def test_a_process_that_has_ended_has_nochildren():
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()

    assert tree(gone.pid) == [gone.pid]


@pytest.mark.parametrize("depth", [1, 2])
def test_the_tree_holds_running_children_and_grandchildren(depth):
    code = "import time; time.sleep(30)"
    if depth == 2:
        code = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {code!r}])"
    child = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    try:
        wanted = [child.pid]
        for _ in range(200):
            grandchildren = children(child.pid)
            if len(grandchildren) == depth - 1:
                wanted += grandchildren
                break
            time.sleep(0.05)
        assert len(wanted) == depth, "the grandchild never started"
        assert child.pid in children(os.getpid())
        assert set(wanted) <= set(tree(os.getpid()))
    finally:
        os.killpg(child.pid, 9)
        child.wait()
