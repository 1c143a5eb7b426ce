"""Where the project keeps things on disk, each overridable by an environment variable.

Only files and environment variables are read here: this module is imported at DAG parse time.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

#: Environment variables a user (or an outside test harness) sets to run on its own topics.
ENV_CATALOG = "KAFKALAKE_CATALOG"
ENV_LAKE_ROOT = "KAFKALAKE_LAKE_ROOT"
ENV_JARS_DIR = "KAFKALAKE_JARS_DIR"


def catalog_path() -> Path:
    return Path(os.environ.get(ENV_CATALOG, REPO_ROOT / "include" / "topics.yaml")).resolve()


def lake_root() -> Path:
    return Path(os.environ.get(ENV_LAKE_ROOT, REPO_ROOT / ".lake")).resolve()


def jars_dir() -> Path:
    return Path(os.environ.get(ENV_JARS_DIR, REPO_ROOT / ".jars")).resolve()


def jobs_dir() -> Path:
    return REPO_ROOT / "jobs"
