"""Fixtures of every unit test."""

from __future__ import annotations

import pytest

from kafkalake.launch.job_host import ENV_JOB_HOST


@pytest.fixture(autouse=True)
def no_job_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """The unit tests see production's environment: no job host (a worker that ran integration
    tests first has its own in its environment, tests/integration/conftest.py)."""
    monkeypatch.delenv(ENV_JOB_HOST, raising=False)
