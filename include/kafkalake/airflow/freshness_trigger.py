"""The asset watcher of a ``schedule: freshness`` topic: queues its DAG's runs from what waits in Kafka.

Its DAG is scheduled on one asset, ``<dag_id>.freshness`` (:func:`freshness_asset`), watched by a
:class:`FreshnessTrigger`. The trigger runs in the triggerer (async, no JVM) and, every poll:

* asks Kafka for each partition's watermarks, and, when records wait, the timestamp of the record
  at the table's offset (the oldest not landed): no consumer group joined, nothing committed
  (kafkalake.kafka.freshness_probe);
* reads the offsets the table holds, when it last landed some and its bytes per row from its
  Delta log with delta-rs (kafkalake.lake.landing), again only when the table's version moved;
* hands both to :func:`kafkalake.config.freshness.decide`, and on "run" yields an event: Airflow
  records an asset event and queues the DAG's run (``max_active_runs`` is 1 as before).

Many topics share one triggerer: triggers of one Kafka connection share one client, one thread and
one backoff (:class:`_Connection`); a broker that does not answer is asked again after 2x the poll,
then 4x, up to 5 minutes, for every topic on it at once. While it cannot see Kafka or the table's
Delta log, the watcher says so (``Observation.blind``) and the heartbeat (one run per SLA / 3, for
what only a run can do) queues a run: its pre-flight says what is wrong, and the run's alerts fire.
Whether table care is due is read from the tables' Delta logs (kafkalake.lake.care_due) every
:data:`CARE_REREAD`, for the heartbeat too; nothing else makes it queue a run.

The trigger's kwargs are stored in Airflow's metadata DB: they hold the connection's *id*, never its
settings; the settings are looked up in the triggerer (``BaseHook.aget_connection``) and masked.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.sdk import Asset, AssetWatcher
from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from kafkalake.config.freshness import DEFAULT_EXPECTED_RUN, Budget, Observation, decide
from kafkalake.config.maintenance import MaintenanceConfig
from kafkalake.config.tables import topic_tables
from kafkalake.config.topic import TopicConfig, history_path
from kafkalake.core.durations import format_duration
from kafkalake.core.errors import TopicMissingError
from kafkalake.lake import care_due, run_history
from kafkalake.lake.landing import Landing, read_landing

log = logging.getLogger(__name__)

#: The watcher looks about every SLA / 20, within these bounds.
MIN_POLL, MAX_POLL = timedelta(seconds=10), timedelta(seconds=60)
#: The scheduler's pick-up of a queued asset event, added to the poll as the decision's margin.
PICKUP = timedelta(seconds=15)
MAX_BACKOFF_SECONDS = 300.0
#: Where the last queued run's time is kept across triggerer restarts (the asset's state store).
LAST_RUN_KEY = "last_run"
CLASSPATH = f"{__name__}.FreshnessTrigger"


def poll_interval(sla: timedelta) -> timedelta:
    return min(MAX_POLL, max(MIN_POLL, sla / 20))


#: The runs the expected run time is learned from, and how often the watcher reads them again.
HISTORY_WINDOW = timedelta(days=7)
HISTORY_REREAD = timedelta(minutes=10)
#: How often the watcher reads whether table care is due (its cadence is hours or days).
CARE_REREAD = timedelta(minutes=10)


def expected_run_time(
    table_path: str, default: timedelta = DEFAULT_EXPECTED_RUN, storage: Any = None
) -> timedelta:
    """How long the topic's runs take, from the run history (``TopicConfig.history_path``,
    :func:`kafkalake.lake.run_history.expected_run`); ``default`` before the first run that landed
    or when the history cannot be read (a watcher must not stop over it)."""
    try:
        runs = run_history.read(
            history_path(table_path), since=datetime.now(UTC) - HISTORY_WINDOW, settings=storage
        )
    except Exception as err:  # a broken or unreachable history: the default, and say so
        log.warning("cannot read the run history at %s (%s); expecting runs of %s", table_path, err, default)
        return default
    return run_history.expected_run(runs, default)


def freshness_asset(topic: TopicConfig, webhook_conn_id: str | None = None) -> Asset:
    """The asset a ``schedule: freshness`` DAG is scheduled on, with its watcher (which posts a
    data-age SLA miss to ``webhook_conn_id``, as the run deadline alert does)."""
    assert topic.freshness is not None, f"topic {topic.name!r} is not on schedule: freshness"
    every = topic.maintenance.optimize_every
    trigger = FreshnessTrigger(
        topic=topic.name,
        table_path=topic.path,
        kafka_conn_id=topic.kafka_conn_id,
        storage_conn_id=topic.storage_conn_id,
        sla_seconds=topic.freshness_sla.total_seconds(),
        floor_seconds=topic.freshness.floor.total_seconds(),
        file_bytes=topic.freshness.file_bytes,
        webhook_conn_id=webhook_conn_id,
        care_tables=[table.location for table in topic_tables(topic)],
        optimize_every_seconds=None if every is None else every.total_seconds(),
        care_properties=dict(topic.maintenance.properties),
    )
    return Asset(
        name=f"{topic.dag_id}.freshness",
        uri=f"kafkalake-freshness://{topic.dag_id}",
        watchers=[AssetWatcher(name=f"{topic.dag_id}_freshness", trigger=trigger)],
    )


@dataclass
class _Connection:
    """One Kafka connection's client, thread and backoff, shared by its topics' triggers."""

    conn_id: str
    users: int = 0
    probe: Any = None
    executor: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(max_workers=1))
    failures: int = 0
    retry_at: float = 0.0
    opening: asyncio.Lock = field(default_factory=asyncio.Lock)

    def backing_off(self) -> bool:
        return time.monotonic() < self.retry_at

    def failed(self, poll: float, error: BaseException) -> None:
        self.failures += 1
        wait = min(MAX_BACKOFF_SECONDS, poll * 2**self.failures)
        self.retry_at = time.monotonic() + wait
        log.warning(
            "Kafka connection %r: %s; its topics' watchers ask again in %.0f s (failure %d in a row)",
            self.conn_id,
            error,
            wait,
            self.failures,
        )

    def answered(self) -> None:
        if self.failures:
            log.info("Kafka connection %r answers again", self.conn_id)
        self.failures, self.retry_at = 0, 0.0

    async def call(self, function: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.executor, function, *args)


_connections: dict[str, _Connection] = {}


def _join(conn_id: str) -> _Connection:
    shared = _connections.setdefault(conn_id, _Connection(conn_id))
    shared.users += 1
    return shared


async def _leave(shared: _Connection) -> None:
    shared.users -= 1
    if shared.users > 0:
        return
    _connections.pop(shared.conn_id, None)
    if shared.probe is not None:
        await shared.call(shared.probe.close)
    shared.executor.shutdown(wait=False)


class FreshnessTrigger(BaseEventTrigger):  # type: ignore[misc]  # mypy skips airflow.*
    """Fires when the topic's table should get a run (:func:`kafkalake.config.freshness.decide`)."""

    def __init__(
        self,
        *,
        topic: str,
        table_path: str,
        kafka_conn_id: str,
        sla_seconds: float,
        floor_seconds: float,
        file_bytes: int,
        storage_conn_id: str | None = None,
        expected_run_seconds: float | None = None,
        webhook_conn_id: str | None = None,
        care_tables: list[str] | None = None,
        optimize_every_seconds: float | None = None,
        care_properties: dict[str, str] | None = None,
    ) -> None:
        super().__init__()
        self.topic = topic
        self.table_path = table_path
        self.kafka_conn_id = kafka_conn_id
        self.storage_conn_id = storage_conn_id
        self.sla_seconds = sla_seconds
        self.floor_seconds = floor_seconds
        self.file_bytes = file_bytes
        self.expected_run_seconds = expected_run_seconds
        self.webhook_conn_id = webhook_conn_id
        #: The topic's tables (bronze first) and the cadence of their care, for the heartbeat.
        self.care_tables = list(care_tables or [])
        self.optimize_every_seconds = optimize_every_seconds
        self.care_properties = dict(care_properties or {})
        self._care_due = False
        self._care_read_at: float | None = None
        self._landing: Landing | None = None
        #: The expected run time learned from the run history, and when it was last read.
        self._expected = DEFAULT_EXPECTED_RUN
        self._expected_read_at: float | None = None
        #: The timestamps read at the table's offsets: {(partition, offset): time or None}.
        self._stamps: dict[tuple[int, int], datetime | None] = {}
        self._late_reported: tuple[tuple[int, int], ...] | None = None
        #: Kafka's end offsets when this watcher last queued a run.
        self._queued_high: dict[int, int] | None = None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            CLASSPATH,
            {
                "topic": self.topic,
                "table_path": self.table_path,
                "kafka_conn_id": self.kafka_conn_id,
                "storage_conn_id": self.storage_conn_id,
                "sla_seconds": self.sla_seconds,
                "floor_seconds": self.floor_seconds,
                "file_bytes": self.file_bytes,
                "expected_run_seconds": self.expected_run_seconds,
                "webhook_conn_id": self.webhook_conn_id,
                "care_tables": self.care_tables,
                "optimize_every_seconds": self.optimize_every_seconds,
                "care_properties": self.care_properties,
            },
        )

    @property
    def sla(self) -> timedelta:
        return timedelta(seconds=self.sla_seconds)

    @property
    def poll(self) -> timedelta:
        return poll_interval(self.sla)

    def budget(self) -> Budget:
        expected = (
            timedelta(seconds=self.expected_run_seconds)
            if self.expected_run_seconds is not None
            else self._expected
        )
        return Budget(
            sla=self.sla,
            expected_run=expected,
            floor=timedelta(seconds=self.floor_seconds),
            file_bytes=self.file_bytes,
            margin=self.poll + PICKUP,
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from kafkalake.airflow.connections import astorage_settings

        shared = _join(self.kafka_conn_id)
        try:
            storage = await astorage_settings(self.topic, self.table_path, self.storage_conn_id)
            last_run = await self._remembered_run()
            if last_run is None:
                try:
                    self._landing = await asyncio.to_thread(read_landing, self.table_path, None, storage)
                except Exception as err:  # observe() says so each poll
                    log.warning("topic %r: cannot read the table's Delta log: %s", self.topic, err)
                last_run = self._landing.landed_at if self._landing else None
            while True:
                await self._learn_run_time(storage)
                await self._learn_care_due(storage)
                seen = replace(
                    await self.observe(shared, storage),
                    high_when_queued=self._queued_high,
                    care_due=self._care_due,
                )
                verdict = decide(seen, self.budget(), last_run)
                await self._report_late(seen)
                if verdict.run:
                    last_run, self._queued_high = seen.now, dict(seen.high) or None
                    await self._remember_run(last_run)
                    log.info("topic %r: queueing a run: %s", self.topic, verdict.reason)
                    yield TriggerEvent(
                        {
                            "topic": self.topic,
                            "reason": verdict.reason,
                            "at": seen.now.isoformat(),
                            "waiting": sum(seen.lag().values()),
                        }
                    )
                    wait = self.poll
                else:
                    log.debug("topic %r: no run yet: %s", self.topic, verdict.reason)
                    wait = max(timedelta(seconds=1), min(self.poll, verdict.recheck))
                await asyncio.sleep(wait.total_seconds())
        finally:
            await _leave(shared)

    async def _learn_run_time(self, storage: Any) -> None:
        """Read the expected run time from the history now and then, off the event loop (delta-rs)."""
        if self.expected_run_seconds is not None:
            return
        clock = time.monotonic()
        if (
            self._expected_read_at is not None
            and clock - self._expected_read_at < HISTORY_REREAD.total_seconds()
        ):
            return
        self._expected_read_at = clock
        self._expected = await asyncio.to_thread(
            expected_run_time, self.table_path, DEFAULT_EXPECTED_RUN, storage
        )

    async def _learn_care_due(self, storage: Any) -> None:
        """Read whether care is due on any of the topic's tables now and then (delta-rs, off the loop)."""
        clock = time.monotonic()
        if self._care_read_at is not None and clock - self._care_read_at < CARE_REREAD.total_seconds():
            return
        self._care_read_at = clock
        self._care_due = await asyncio.to_thread(self.care_is_due, datetime.now(UTC), storage)

    def care_is_due(self, now: datetime, storage: Any = None) -> bool:
        """Whether OPTIMIZE, VACUUM or a property change is due on one of the tables; False when a
        log cannot be read (the watcher goes on; the table's unreadable log is reported anyway)."""
        every = self.optimize_every_seconds
        config = MaintenanceConfig(
            optimize_every=None if every is None else timedelta(seconds=every),
            properties=tuple(sorted(self.care_properties.items())),
        )
        try:
            for location in self.care_tables:
                state = care_due.read_state(location, storage)
                if state is not None and care_due.decide(state, config, now).run:
                    return True
        except Exception as err:  # only one of the heartbeat's reasons
            log.warning("topic %r: cannot tell whether table care is due: %s", self.topic, err)
        return False

    async def observe(self, shared: _Connection, storage: Any) -> Observation:
        """What Kafka and the table say now. What the watcher could not see is ``blind``: then only
        the heartbeat's clock counts (while Kafka is backed off, it is not asked)."""
        now = datetime.now(UTC)
        blind_table = None
        try:
            self._landing = await asyncio.to_thread(read_landing, self.table_path, self._landing, storage)
        except Exception as err:  # a store down, a broken log: the heartbeat's run says which
            log.warning("topic %r: cannot read the table's Delta log: %s", self.topic, err)
            blind_table = f"the table's Delta log at {self.table_path} ({type(err).__name__})"
        committed = self._landing.position.end if self._landing and self._landing.position else None
        landed_at = self._landing.landed_at if self._landing else None
        if shared.backing_off():
            return Observation(now, {}, committed, landed_at=landed_at, blind=f"Kafka ({self.kafka_conn_id})")
        try:
            if shared.probe is None:
                async with shared.opening:
                    if shared.probe is None:
                        shared.probe = await self._open_probe(shared)
            marks = await shared.call(shared.probe.watermarks, self.topic)
        except TopicMissingError as err:
            log.warning("topic %r: %s; the heartbeat's run will say so", self.topic, err)
            return Observation(now, {}, committed, landed_at=landed_at, blind="the topic in Kafka (missing)")
        except Exception as err:  # broker down, TLS, ACLs: back off; the heartbeat's run reports it
            shared.failed(self.poll.total_seconds(), err)
            blind = f"Kafka ({self.kafka_conn_id}: {type(err).__name__})"
            return Observation(now, {}, committed, landed_at=landed_at, blind=blind)
        shared.answered()
        if blind_table is not None:
            return Observation(now, {}, committed, landed_at=landed_at, blind=blind_table)
        low = {p: lo for p, (lo, _hi) in marks.items()}
        high = {p: hi for p, (_lo, hi) in marks.items()}
        seen = Observation(now, high, committed, low, landed_at=landed_at)
        waiting = {p: (committed or {}).get(p, low[p]) for p, n in seen.lag().items() if n > 0}
        if not waiting:
            return seen
        oldest = await self._oldest(shared, waiting)
        per_row = self._landing.bytes_per_row if self._landing else None
        waiting_bytes = int(sum(seen.lag().values()) * per_row) if per_row else None
        return Observation(now, high, committed, low, oldest, waiting_bytes, landed_at)

    async def _open_probe(self, shared: _Connection) -> Any:
        from kafkalake.airflow.connections import akafka_config_for
        from kafkalake.kafka.freshness_probe import Probe

        config = await akafka_config_for(self.kafka_conn_id)
        return await shared.call(Probe, config)

    async def _oldest(self, shared: _Connection, waiting: dict[int, int]) -> datetime | None:
        """The oldest timestamp at the table's offsets; None when any waiting partition's is unknown."""
        missing = {p: o for p, o in waiting.items() if (p, o) not in self._stamps}
        if missing:
            try:
                stamps = await shared.call(shared.probe.timestamps_at, self.topic, missing)
            except Exception as err:
                shared.failed(self.poll.total_seconds(), err)
                return None
            # A partition that gave nothing in time is asked again next poll.
            self._stamps.update({(p, missing[p]): t for p, t in stamps.items() if t is not None})
            self._stamps = {k: v for k, v in self._stamps.items() if waiting.get(k[0]) == k[1]}
        found = [self._stamps.get((p, o)) for p, o in waiting.items()]
        return None if any(t is None for t in found) else min(t for t in found if t is not None)

    async def _report_late(self, seen: Observation, post: Any = None) -> str | None:
        """Data age over the SLA: the oldest record not in the table is older than the SLA, whatever
        the runs do. Logged, and posted to the SLA webhook, once per table position (the run deadline
        alert, kafkalake.airflow.sla_alerts, fires as before). Returns the message when it alerted."""
        if seen.oldest_unlanded is None or seen.now - seen.oldest_unlanded <= self.sla:
            return None
        key = tuple(sorted((seen.committed or {}).items()))
        if key == self._late_reported:
            return None
        self._late_reported = key
        age = seen.now - seen.oldest_unlanded
        message = (
            f"data age SLA miss: Kafka topic {self.topic}: its oldest record not yet in the table at "
            f"{self.table_path} was produced {format_duration(age)} ago, over the freshness SLA of "
            f"{format_duration(self.sla)}"
        )
        log.error("%s", message)
        if self.webhook_conn_id:
            from kafkalake.airflow.sla_alerts import post_webhook

            body = {
                "text": message,
                "event": "kafkalake.data_age_miss",
                "topic": self.topic,
                "table_path": self.table_path,
                "sla_seconds": self.sla_seconds,
                "data_age_seconds": round(age.total_seconds()),
                "oldest_unlanded": seen.oldest_unlanded.isoformat(),
            }
            try:
                await (post or post_webhook)(self.webhook_conn_id, body)
            except Exception as err:  # a webhook down must not stop the watcher
                log.warning("topic %r: the data-age alert was not posted: %s", self.topic, err)
        return message

    async def _remembered_run(self) -> datetime | None:
        store = self.asset_state_store
        if store is None:
            return None
        try:
            value = await store.aget(LAST_RUN_KEY)
        except Exception as err:  # a state store that cannot answer only costs an early heartbeat
            log.warning("topic %r: cannot read the watcher's last run: %s", self.topic, err)
            return None
        return datetime.fromisoformat(value) if isinstance(value, str) else None

    async def _remember_run(self, when: datetime) -> None:
        store = self.asset_state_store
        if store is None:
            return
        try:
            await store.aset(LAST_RUN_KEY, when.isoformat())
        except Exception as err:
            log.warning("topic %r: cannot keep the watcher's last run: %s", self.topic, err)
