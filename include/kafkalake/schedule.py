"""Schedule math: how often a topic's DAG runs, derived from its freshness SLA.

A run every third of the SLA leaves room for one failed run and its retry before data gets older
than the SLA allows.
"""

from __future__ import annotations

from datetime import timedelta

#: Below this a scheduled Spark job would spend more time starting than working.
MIN_INTERVAL = timedelta(minutes=1)


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
