"""Fixtures of the configuration tests: a lake root, and the good fixture catalog loaded."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkalake.config.catalog import Catalog, load_catalog

from .catalog_helpers import CATALOGS


@pytest.fixture
def lake_root(tmp_path) -> Path:
    return tmp_path / "lake"


@pytest.fixture
def good(lake_root) -> Catalog:
    return load_catalog(CATALOGS / "good.yaml", lake_root)
