"""``schedule: freshness``: when to queue a topic's run, decided from what waits in Kafka.

A pure function (:func:`decide`) of what the asset watcher saw (kafkalake.airflow.freshness_trigger):
per partition Kafka's watermarks, the offsets the table holds, the timestamp of the oldest record not
landed yet, the bytes waiting, whether the watcher could see Kafka and the table at all, whether table
care is due; and of the topic's settings (:class:`FreshnessSchedule`). It answers "queue a run now"
or "look again in N seconds". The rules, first match wins:

1. **Floor**: never two runs closer than ``floor`` (a burst does not start a JVM per poll).
2. **Heartbeat**: once ``heartbeat`` (default SLA / 3, the fixed schedule's interval) has passed
   since the last run, a run for the jobs only a run can do, and for nothing else:

   a. records wait whose time is unknown (producers that set none, or Kafka did not say): rule 5
      cannot see their age, so the heartbeat bounds it (heartbeat + run time);
   b. the watcher cannot see Kafka (unreachable, refused, the topic missing) or the table's Delta
      log: the run's pre-flight then fails naming why, and the run's alerts fire;
   c. table care is due (kafkalake.lake.care_due): the run's ``maintain_table`` does it.

   A topic where nothing waits, with Kafka and the table in sight and no care due, takes no run: a
   run then lands nothing and cannot make the table fresher (its data age is the age of its newest
   record, which no run changes). Any run counts, so a data-driven run puts the next heartbeat off.
3. **In flight**: after a run was queued, until the table has landed something since (or 2 x the
   expected run time + margin has passed: a run that found nothing new, or failed), only records
   produced after it was queued count, and only a file's worth of them queues another run: what
   the queued run will land is no reason for a second one.
4. **A file's worth**: the bytes waiting reach ``file_bytes`` (what one run would write well): run now.
5. **Budget**: the oldest unlanded record would be older than the SLA by the time a run started now
   finishes: fire at ``oldest + SLA - expected run time - margin``.

A partition Kafka has below the table's offsets (a re-created topic, a restored table) counts no lag,
so it is no reason for a run: the next run's pre-flight, whatever queues it, says what happened
(``topic_recreated``), instead of a watcher that keeps firing runs bound to fail.

Times are wall-clock (record timestamps are); a clock that stepped back behind the last run counts
as "just ran" (the floor holds), and a record stamped in the future counts as produced now.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from kafkalake.config.schedule import run_interval

SCHEDULES = ("interval", "freshness")
#: The shortest gap between two runs unless the catalog says otherwise: a Spark job's start-up.
DEFAULT_FLOOR = timedelta(minutes=1)
#: What a run writes well in one go (Delta's OPTIMIZE aims at 1 GiB files; a streaming batch at far less).
DEFAULT_FILE_BYTES = 128 * 1024 * 1024
#: Until the run history (issue 46, item 1) says how long the topic's runs take.
DEFAULT_EXPECTED_RUN = timedelta(seconds=60)


@dataclass(frozen=True)
class FreshnessSchedule:
    """A topic's ``schedule: freshness`` settings, validated (kafkalake.config.topic_validation)."""

    floor: timedelta = DEFAULT_FLOOR
    file_bytes: int = DEFAULT_FILE_BYTES


@dataclass(frozen=True)
class Observation:
    """What the watcher saw at ``now``.

    ``high``: Kafka's end offset per partition; ``low``: its earliest (where a partition the table
    does not hold yet starts); ``committed``: the table's next offset per partition, None when there
    is no table yet; ``oldest_unlanded``: the timestamp of the oldest record not yet in the table,
    None when unknown or nothing waits; ``bytes_waiting``: an estimate, None when unknown.
    """

    now: datetime
    high: Mapping[int, int]
    committed: Mapping[int, int] | None
    low: Mapping[int, int] | None = None
    oldest_unlanded: datetime | None = None
    bytes_waiting: int | None = None
    #: When the table last landed records (its newest offsets commit); None: never.
    landed_at: datetime | None = None
    #: Kafka's end offsets when the last run was queued; None: not known.
    high_when_queued: Mapping[int, int] | None = None
    #: What the watcher could not see this time ("Kafka: ...", "the table's Delta log: ..."); None:
    #: it saw both. Blind, ``high`` is empty: nothing is known to wait.
    blind: str | None = None
    #: Table care is due on one of the topic's tables.
    care_due: bool = False

    def since_queued(self) -> int:
        """Records produced since the last run was queued (0 when not known)."""
        if self.high_when_queued is None:
            return 0
        return sum(max(0, h - self.high_when_queued.get(p, 0)) for p, h in self.high.items())

    def lag(self) -> dict[int, int]:
        """Records waiting per partition (none below the table's offsets)."""
        low = self.low or {}
        if self.committed is None:
            return {p: max(0, h - low.get(p, 0)) for p, h in self.high.items()}
        return {p: max(0, h - self.committed.get(p, low.get(p, 0))) for p, h in self.high.items()}


@dataclass(frozen=True)
class Verdict:
    run: bool
    reason: str
    #: When to look again (0 when ``run``): the caller looks sooner when its poll interval is shorter.
    recheck: timedelta


@dataclass(frozen=True)
class Budget:
    """The times :func:`decide` works with, from the SLA and the settings."""

    sla: timedelta
    expected_run: timedelta = DEFAULT_EXPECTED_RUN
    floor: timedelta = DEFAULT_FLOOR
    file_bytes: int = DEFAULT_FILE_BYTES
    #: Added to the expected run time: the watcher's poll interval and the scheduler's pick-up.
    margin: timedelta = timedelta(0)
    #: Default: the fixed schedule's interval (SLA / 3, rounded down to a minute).
    heartbeat: timedelta | None = None

    @property
    def every(self) -> timedelta:
        return self.heartbeat if self.heartbeat is not None else run_interval(self.sla)

    @property
    def in_flight(self) -> timedelta:
        """How long after a run was queued it may still be landing."""
        return 2 * self.expected_run + self.margin

    @property
    def wait_allowed(self) -> timedelta:
        """How old the oldest waiting record may get before a run must start."""
        return max(timedelta(0), self.sla - self.expected_run - self.margin)


def decide(seen: Observation, budget: Budget, last_run: datetime | None) -> Verdict:
    """Queue a run now, or when to look again (see the module's rules).

    ``last_run``: when the watcher last queued a run (or the table last landed one); None: never,
    which leaves the heartbeat due.
    """
    now = seen.now
    # A clock stepped back behind the last run: treat it as having just run.
    since = None if last_run is None else max(timedelta(0), now - last_run)
    if since is not None and since < budget.floor:
        return Verdict(False, f"within the floor of {budget.floor} since the last run", budget.floor - since)
    heartbeat_in = budget.every - since if since is not None else timedelta(0)
    waiting = sum(seen.lag().values())
    if heartbeat_in <= timedelta(0):
        job = heartbeat_job(seen, waiting)
        if job is not None:
            ran = "no run known" if since is None else f"no run for {since}"
            return Verdict(True, f"heartbeat ({ran}, one at least every {budget.every}): {job}", timedelta(0))
    # Nothing for the heartbeat now: look again by the poll (the caller's) or when it is due.
    later = heartbeat_in if heartbeat_in > timedelta(0) else budget.every
    if seen.blind is not None:
        return Verdict(False, f"cannot see {seen.blind}: the heartbeat's run will report it", later)
    if waiting == 0:
        return Verdict(False, "nothing waits in Kafka", later)
    in_flight = budget.in_flight - since if since is not None else timedelta(0)
    if (
        last_run is not None
        and in_flight > timedelta(0)
        and (seen.landed_at is None or seen.landed_at < last_run)
    ):
        newer = seen.since_queued()
        per_record = (seen.bytes_waiting or 0) / waiting
        if newer and per_record and newer * per_record >= budget.file_bytes:
            return Verdict(
                True,
                f"{newer} records came after the run queued {since} ago: a file's worth "
                f"({budget.file_bytes})",
                timedelta(0),
            )
        return Verdict(False, f"the run queued {since} ago has not landed yet", min(in_flight, later))
    if seen.committed is None:
        return Verdict(True, f"{waiting} records wait and the table does not exist yet", timedelta(0))
    if seen.bytes_waiting is not None and seen.bytes_waiting >= budget.file_bytes:
        return Verdict(
            True,
            f"{seen.bytes_waiting} bytes wait ({waiting} records): a file's worth ({budget.file_bytes})",
            timedelta(0),
        )
    if seen.oldest_unlanded is None:
        return Verdict(False, f"{waiting} records wait, their time unknown: the heartbeat bounds them", later)
    # A record stamped ahead of this clock counts as produced now.
    oldest = min(seen.oldest_unlanded, now)
    due_in = oldest + budget.wait_allowed - now
    if due_in <= timedelta(0):
        return Verdict(
            True,
            f"the oldest of {waiting} waiting records is {now - oldest} old: a run now lands it within "
            f"the SLA of {budget.sla} (expected run {budget.expected_run})",
            timedelta(0),
        )
    return Verdict(False, f"{waiting} records wait, the oldest {now - oldest} old", min(due_in, later))


def heartbeat_job(seen: Observation, waiting: int) -> str | None:
    """What a heartbeat's run would do that no other rule queues a run for (rule 2), or None."""
    if seen.blind is not None:
        return f"cannot see {seen.blind}: the run's pre-flight reports why"
    if waiting and seen.oldest_unlanded is None:
        return f"{waiting} records wait, their time unknown"
    if seen.care_due:
        return "table care is due"
    return None
