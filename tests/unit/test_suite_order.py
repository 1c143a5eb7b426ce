"""The suite's module order (tests/conftest.py) names modules that exist: a renamed module would
otherwise silently lose its early start."""

from __future__ import annotations

from pathlib import Path

from conftest import LONGEST_FIRST

ROOT = Path(__file__).resolve().parents[2]


def test_every_module_of_the_order_exists_once():
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)
    missing = [name for name in LONGEST_FIRST if not (ROOT / name).is_file()]
    assert not missing
