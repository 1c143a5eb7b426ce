"""Schedule math: how often a topic's DAG runs, and when a run is late, from its freshness SLA.

A run every third of the SLA leaves room for one failed run and its retry before data gets older
than the SLA allows. :func:`sla_plan` is the one place that says so; the DAG factory and the
policy tests both read it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

#: Below this a scheduled Spark job would spend more time starting than working.
MIN_INTERVAL = timedelta(minutes=1)


@dataclass(frozen=True)
class SlaPlan:
    """What a freshness SLA means for a topic's DAG.

    Definitions (S = ``sla``, I = ``run_interval``). The *age* of the table at time t is t minus
    the time the newest successful run was queued: that run read Kafka up to the end offsets it saw
    at its start, so nothing produced later is in the table. Runs are queued every I (at q, q + I,
    q + 2I, …; ``max_active_runs`` is 1).

    * ``run_interval`` = S / 3, rounded *down* to a whole minute (never looser than the SLA).
    * ``worst_case_age`` = 2·I: on a healthy pipeline (every run finishes within its interval) the
      age peaks just before a run finishes, at most one interval after the previous run's start plus
      one interval of run time. S - 2·I ≥ I is left over: one run may fail outright and the next
      one, finishing within its own interval, still lands the data within the SLA (3·I ≤ S).
    * ``deadline`` = S - I, measured from the run's queued time (``DAGRUN_QUEUED_AT``). While a run
      queued at q is still going, the table holds at most the data of the run queued at q - I, so
      at q + (S - I) the age reaches S: a run that has not finished by then means the data is out
      of its SLA. That is the moment the Deadline Alert fires. (A run queued late because the
      previous one overran gets a later deadline; the previous run has alerted by then.)
    """

    sla: timedelta
    run_interval: timedelta
    worst_case_age: timedelta
    deadline: timedelta


def sla_plan(freshness_sla: timedelta) -> SlaPlan:
    """The run interval, worst-case age and run deadline of a freshness SLA (see :class:`SlaPlan`).

    Raises:
        ValueError: when the SLA is too short to schedule (under 3 minutes).
    """
    interval = run_interval(freshness_sla)
    return SlaPlan(
        sla=freshness_sla,
        run_interval=interval,
        worst_case_age=2 * interval,
        deadline=freshness_sla - interval,
    )


def run_interval(freshness_sla: timedelta) -> timedelta:
    """SLA / 3, rounded *down* to a whole minute so rounding never loosens the SLA.

    Raises:
        ValueError: when the SLA is too short to schedule (under 3 minutes).
    """
    third_in_minutes = int(freshness_sla.total_seconds()) // 180
    interval = timedelta(minutes=third_in_minutes)
    if interval < MIN_INTERVAL:
        raise ValueError(
            f"a freshness SLA of {freshness_sla} gives a run interval under {MIN_INTERVAL}: "
            "use an SLA of at least 3m"
        )
    return interval
