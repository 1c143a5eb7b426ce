"""The suite's module order (tests/conftest.py) names modules that exist: a renamed module would
otherwise silently lose its early start, or its place with the modules it shares a server with."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import LONGEST_FIRST, SHARED_SERVER, SHARED_SESSION, work_unit

ROOT = Path(__file__).resolve().parents[2]


def test_every_module_of_the_order_exists_once():
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)
    missing = [name for name in LONGEST_FIRST if not (ROOT / name).is_file()]
    assert not missing


@pytest.mark.parametrize("groups", [SHARED_SERVER, SHARED_SESSION], ids=["server", "session"])
def test_the_modules_of_a_shared_server_or_session_exist_and_come_one_after_the_other(groups):
    for group in set(groups.values()):
        members = [name for name, g in groups.items() if g == group]
        assert all((ROOT / name).is_file() for name in members)
        places = sorted(LONGEST_FIRST.index(name) for name in members)
        assert places == list(range(places[0], places[0] + len(members))), group


def test_every_module_that_starts_the_in_process_session_is_in_a_shared_session_unit():
    """A module left out would start a session of its own on whichever worker takes it."""
    users = {
        f"tests/integration/{path.name}"
        for path in (ROOT / "tests" / "integration").glob("test_*.py")
        if re.search(r"def test_\w+\([^)]*\bspark\b", path.read_text())
    }
    assert users - set(SHARED_SESSION) - set(SHARED_SERVER) == set()


def test_a_shared_server_is_one_work_unit_and_any_other_module_is_its_own():
    assert work_unit("tests/integration/test_deadline_alert.py::test_x") == work_unit(
        "tests/integration/test_airflow_ui.py::test_y[a::b]"
    )
    assert work_unit("tests/integration/test_backfill.py::test_x") == work_unit(
        "tests/integration/test_deployed_airflow.py::test_y"
    )
    assert work_unit("tests/integration/test_backfill.py::t") != work_unit(
        "tests/integration/test_airflow_ui.py::t"
    )
    assert work_unit("tests/integration/test_replay.py::t") == work_unit(
        "tests/integration/test_lost_state.py::t"
    )
    backfill, assets = "tests/integration/test_backfill.py::t", "tests/integration/test_assets.py::t"
    assert work_unit(backfill) != work_unit(assets)
    assert work_unit("tests/unit/config/test_catalog.py::test_a[x::y]") == "tests/unit/config/test_catalog.py"
