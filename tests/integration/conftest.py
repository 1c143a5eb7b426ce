"""Fixtures of the integration tests beyond the session ones in tests/conftest.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from . import airflow_server as servers
from .airflow_server import airflow_server, deployed_airflow_server

__all__ = ["airflow_server", "deployed_airflow_server"]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Iterator[None]:
    """Keep each phase's report on the test item, so fixtures can tell a failed test (screenshots)."""
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Stop a shared Airflow server once the next test on this worker does not use it."""
    servers.stop_unless_needed(nextitem)


def pytest_sessionfinish() -> None:
    """A server still running when the session ends early (an interrupt, -x) is stopped too."""
    servers.stop_unless_needed(None)
