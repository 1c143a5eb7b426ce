"""The Airflow pool that caps how many Spark jobs of all topics run at once.

Every Spark task (``ingest``, ``register_table`` and any later one) takes one slot of
:data:`SPARK_POOL`; the pre-flight ``check_new_offsets`` starts no JVM and stays in Airflow's
``default_pool``. Among tasks waiting for a slot, the one with the highest ``priority_weight``
goes first: a topic's catalog ``priority``.

**One slot by default.** Spark runs on ``local[*]`` unless told otherwise, so a single job already
uses every core of the worker; on the 2-core machine this project targets, a second job at once
only splits the same two cores (both finish later), adds a second driver JVM of about 1.3 GiB,
and starves the broker that shares the machine in the demo. Registrations go one at a time anyway
(the embedded Derby metastore admits one JVM). With one slot, a high-priority topic gets the whole
machine next instead of half of it. Raise it where the Spark jobs run on a cluster or the worker
has the cores and memory for more drivers.

The pool must exist wherever the DAGs run. In Airflow 3.3 a task whose pool does not exist is
never queued: it stays ``scheduled`` for good, with no failure and no retry; the scheduler logs
"Tasks using non-existent pool 'kafkalake_spark' will not be scheduled" and the UI shows a DAG
warning "references non-existent pools". ``local_airflow.init_db`` creates it for the demo and
the tests; a deployment creates it once with :func:`pools_set_args` (``airflow pools set …``).
"""

from __future__ import annotations

SPARK_POOL = "kafkalake_spark"
DEFAULT_SPARK_SLOTS = 1
SPARK_POOL_DESCRIPTION = "kafkalake: Spark jobs of all topics (ingest, register_table) running at once"


def pools_set_args(slots: int = DEFAULT_SPARK_SLOTS) -> list[str]:
    """Arguments of the ``airflow`` CLI that create the pool, or resize it."""
    return ["pools", "set", SPARK_POOL, str(slots), SPARK_POOL_DESCRIPTION]
