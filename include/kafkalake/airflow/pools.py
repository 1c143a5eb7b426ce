"""The Airflow pool that caps how many Spark jobs of all topics run at once.

Every Spark task (``ingest``, ``register_table`` and any later one) takes one slot of
:data:`SPARK_POOL`; the pre-flight ``check_new_offsets`` starts no JVM and stays in Airflow's
``default_pool``. Among tasks waiting for a slot, the one with the highest ``priority_weight``
goes first: a topic's catalog ``priority``.

**Two slots by default.** Spark runs on ``local[*]`` unless told otherwise, so one job can use
every core of the worker, but a run is not all parallel work: the driver's start-up, the Airflow
task's process start and the scheduler's gap between one task freeing its slot and the next
starting leave the cores half idle. On the 2-core machine this project targets
(``python -m kafkalake.dev.bench_topics``, 20 topics with 500 new events each, steady round), all
twenty runs went round in 643 s with one slot and in 522 s with two, at the price of the single
run: 36.5 s from queued to done alone, 58 s beside another. Each slot is one more driver JVM of
1.1-1.6 GiB. Registrations with the embedded Derby metastore take a file lock (Derby admits one
JVM), so two slots are safe there too. Among waiting tasks the highest priority goes first. Raise
the size where the Spark jobs run on a cluster or the worker has the cores and memory for more
drivers; set it to 1 where one topic's latency matters more than all topics going round.

The pool must exist wherever the DAGs run. In Airflow 3.3 a task whose pool does not exist is
never queued: it stays ``scheduled`` for good, with no failure and no retry; the scheduler logs
"Tasks using non-existent pool 'kafkalake_spark' will not be scheduled" and the UI shows a DAG
warning "references non-existent pools". ``local_airflow.init_db`` creates it for the demo and
the tests; a deployment creates it once with :func:`pools_set_args` (``airflow pools set …``).
"""

from __future__ import annotations

SPARK_POOL = "kafkalake_spark"
DEFAULT_SPARK_SLOTS = 2
SPARK_POOL_DESCRIPTION = "kafkalake: Spark jobs of all topics (ingest, register_table) running at once"


def pools_set_args(slots: int = DEFAULT_SPARK_SLOTS) -> list[str]:
    """Arguments of the ``airflow`` CLI that create the pool, or resize it."""
    return ["pools", "set", SPARK_POOL, str(slots), SPARK_POOL_DESCRIPTION]
