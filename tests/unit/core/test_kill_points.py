"""Kill points: inert unless named, refuse a misspelt name, and really SIGKILL the process."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from kafkalake.core import kill_points


def test_an_unset_or_other_point_does_nothing(monkeypatch):
    monkeypatch.delenv(kill_points.ENV_KILL_AT, raising=False)
    kill_points.reached("ingest:after_bronze_commit")
    monkeypatch.setenv(kill_points.ENV_KILL_AT, "replay:after_parsed_commit")
    kill_points.reached("ingest:after_bronze_commit")


def test_a_misspelt_point_is_an_error_naming_the_known_ones(monkeypatch):
    monkeypatch.setenv(kill_points.ENV_KILL_AT, "ingest:after_bronze")
    with pytest.raises(ValueError, match="names no kill point; known: ingest:before_bronze_commit"):
        kill_points.reached("ingest:after_bronze_commit")


@pytest.mark.parametrize(("after", "printed"), [("0", ""), ("2", "1\n2\n")])
def test_the_named_point_sigkills_after_the_allowed_passes(after, printed):
    script = (
        "from kafkalake.core import kill_points\n"
        "for i in range(1, 5):\n"
        "    kill_points.reached('catch_up:after_chunk')\n"
        "    print(i, flush=True)\n"
    )
    env = {kill_points.ENV_KILL_AT: "catch_up:after_chunk", kill_points.ENV_KILL_AFTER: after}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == -signal.SIGKILL
    assert done.stdout == printed
