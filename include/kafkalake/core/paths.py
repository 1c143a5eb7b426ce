"""Where the project keeps things on disk, each overridable by an environment variable.

Only files and environment variables are read here: this module is imported at DAG parse time.
"""

from __future__ import annotations

import os
from pathlib import Path

#: The project folder (dags/, jobs/, include/): set KAFKALAKE_HOME when the package is installed
#: apart from it (a wheel, an image); by default, the checkout this file lives in.
ENV_HOME = "KAFKALAKE_HOME"
REPO_ROOT = Path(os.environ.get(ENV_HOME) or Path(__file__).resolve().parents[3]).resolve()

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


def metastore_dir(lake_root: Path) -> Path:
    """The embedded (Derby) metastore's folder, kept with the lake it describes."""
    return lake_root / "_metastore"


def jobs_dir() -> Path:
    jobs = REPO_ROOT / "jobs"
    if not jobs.is_dir():
        raise FileNotFoundError(
            f"no jobs/ folder in {REPO_ROOT}: set {ENV_HOME} to the kafkalake project folder "
            "(the one that holds dags/, jobs/ and include/)"
        )
    return jobs
