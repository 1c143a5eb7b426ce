"""Where on-call finds what to do: ``RUNBOOK.md`` at the repository root, and how DAG docs point at it.

The Airflow UI renders a DAG's ``doc_md`` as Markdown, but a relative link there resolves against
the UI's own address, not the repository, and the project cannot know where its repository is
served. So the docs name the file and the section in plain text, and turn into real links when the
deployment says where the runbook is: ``KAFKALAKE_RUNBOOK_URL=https://git.example.com/data/
kafkalake/blob/main/RUNBOOK.md`` (an environment variable, read at parse time like the catalog's).

A failure kind's section is headed by the kind itself, as the task log prints it
(``### offsets_expired``), so its anchor is the kind on GitHub and GitLab alike.
"""

from __future__ import annotations

import os
import re

from kafkalake.core.errors import Kind
from kafkalake.core.paths import REPO_ROOT

ENV_RUNBOOK_URL = "KAFKALAKE_RUNBOOK_URL"
RUNBOOK_FILE = REPO_ROOT / "RUNBOOK.md"

#: Sections for trouble that is not a failure kind of a task.
BROKEN_CATALOG = "Broken catalog entry"
SPARK_JOB_LOST = "Spark job lost"
POOL_STARVATION = "Pool starvation"
STUCK_RUN = "Stuck run"
TABLE_NOT_IN_METASTORE = "Table missing from the metastore"
REPLAY = "Replaying parsed tables from bronze"
BACKFILLS = "Backfills and re-ingest"
OTHER_SECTIONS = (
    BROKEN_CATALOG,
    SPARK_JOB_LOST,
    POOL_STARVATION,
    STUCK_RUN,
    TABLE_NOT_IN_METASTORE,
    REPLAY,
    BACKFILLS,
)


def anchor(section: str) -> str:
    """The anchor GitHub and GitLab give a heading: lower case, punctuation dropped, spaces to '-'."""
    return re.sub(r"[^\w\- ]", "", section.lower()).replace(" ", "-")


def section_ref(section: str) -> str:
    """A Markdown reference to a runbook section: a link when the runbook's URL is known."""
    url = os.environ.get(ENV_RUNBOOK_URL, "").strip()
    if url:
        return f"[{section}]({url}#{anchor(section)})"
    return f"`{section}`"


def doc_md() -> str:
    """The paragraph each DAG's doc shows: where the runbook is and which section to read."""
    url = os.environ.get(ENV_RUNBOOK_URL, "").strip()
    where = f"[RUNBOOK.md]({url})" if url else "`RUNBOOK.md` at the root of the kafkalake repository"
    kinds = ", ".join(section_ref(kind) for kind in Kind)
    others = ", ".join(section_ref(section) for section in OTHER_SECTIONS)
    return (
        f"**Runbook**: {where}. A failed task's log begins with `[kind]`; each kind has its section "
        f"there ({kinds}). Also: {others}."
    )
