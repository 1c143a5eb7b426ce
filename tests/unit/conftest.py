"""Fixtures of every unit test."""

from __future__ import annotations

import pytest

from kafkalake.launch.job_host import ENV_JOB_HOST
from kafkalake.launch.spark_conf import ENV_DRIVER_JAVA_OPTIONS


@pytest.fixture(autouse=True)
def production_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The unit tests see production's environment: no job host and none of the integration tests'
    driver options (C1 only, the serial collector, interpreted expressions). Under xdist every
    worker imports tests/integration/conftest.py at collection, which sets them for its process."""
    monkeypatch.delenv(ENV_JOB_HOST, raising=False)
    monkeypatch.delenv(ENV_DRIVER_JAVA_OPTIONS, raising=False)
