"""The browser test and the deadline test against Airflow as it is deployed.

The same test bodies as test_airflow_ui.py and test_deadline_alert.py, collected here with
``airflow_server`` bound to the deployed server: PostgreSQL for the metadata DB, the LocalExecutor,
and api-server, scheduler, dag-processor and triggerer as separate processes
(kafkalake.dev.deployed_airflow, what ``make stack`` runs). One module, so one server per test run.
"""

from __future__ import annotations

import pytest

from .airflow_server import DeployedAirflowServer
from .test_airflow_ui import page, test_trigger_a_dag_from_the_ui_and_see_its_run_succeed
from .test_deadline_alert import test_run_past_its_deadline_fires_the_sla_miss_alert

pytestmark = [pytest.mark.integration, pytest.mark.browser, pytest.mark.services]

__all__ = [
    "page",
    "test_run_past_its_deadline_fires_the_sla_miss_alert",
    "test_trigger_a_dag_from_the_ui_and_see_its_run_succeed",
]


@pytest.fixture
def airflow_server(deployed_airflow_server: DeployedAirflowServer) -> DeployedAirflowServer:
    return deployed_airflow_server
