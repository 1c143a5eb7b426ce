"""Pre-flight: is there anything new in Kafka for this table? Answered without a JVM.

What the table holds is what its checkpoint says was committed: the Delta sink and the checkpoint
move together, one micro-batch at a time. The decision itself is a pure function; reading the
checkpoint and asking Kafka for its end offsets are the I/O edges around it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kafkalake.core.errors import KafkaConfigError, KafkalakeError, Kind, TopicMissingError, failure
from kafkalake.core.job_failures import classify_text, security_failure
from kafkalake.kafka.redaction import scrub
from kafkalake.lake.checkpoint import CheckpointState, FamilyCheckpointState, Offsets

# confluent_kafka is imported inside the functions that talk to Kafka: the DAG file imports this module
# (through the tasks) and parsing it never needs the client, which would add ~80 ms to every parse.

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Decision:
    run: bool
    reason: str
    #: Records waiting per partition (end offset minus committed offset); empty when unknown.
    lag: Offsets
    #: Partitions whose unread records Kafka no longer holds: {partition: (committed, earliest)}.
    #: Offsets committed..earliest-1 are gone; the job's failOnDataLoss check would fail on them.
    expired: dict[int, tuple[int, int]] = field(default_factory=dict)

    @property
    def total_lag(self) -> int:
        return sum(self.lag.values())


def expired_offsets(
    checkpoint: CheckpointState | None, earliest_offsets: Mapping[int, int]
) -> dict[int, tuple[int, int]]:
    """Partitions where Kafka's earliest offset is above what the table holds: data lost to retention.

    A partition the checkpoint does not know yet is read from offset 0, so its records below
    Kafka's earliest offset are lost too. A first run (no checkpoint) starts wherever Kafka starts.
    """
    if checkpoint is None:
        return {}
    return {
        p: (checkpoint.committed.get(p, 0), earliest)
        for p, earliest in sorted(earliest_offsets.items())
        if earliest > checkpoint.committed.get(p, 0)
    }


def decide(
    checkpoint: CheckpointState | None,
    end_offsets: Mapping[int, int],
    earliest_offsets: Mapping[int, int] | None = None,
) -> Decision:
    """Whether the ingest job must run, and why.

    With ``earliest_offsets`` (Kafka's low watermarks) the decision also lists the partitions whose
    unread offsets expired; the caller decides whether that fails the run (``fail_on_data_loss``).
    """
    if checkpoint is None:
        return Decision(True, "first run: no checkpoint yet", {})
    expired = expired_offsets(checkpoint, earliest_offsets or {})
    if expired:
        lag = {p: max(0, end - checkpoint.committed.get(p, 0)) for p, end in sorted(end_offsets.items())}
        gone = sum(earliest - committed for committed, earliest in expired.values())
        return Decision(True, f"{gone} unread records expired in Kafka", lag, expired)
    if checkpoint.unfinished_batch:
        return Decision(True, "the last micro-batch was interrupted and must be finished", {})
    lag = {p: max(0, end - checkpoint.committed.get(p, 0)) for p, end in sorted(end_offsets.items())}
    behind = {p: end for p, end in end_offsets.items() if end < checkpoint.committed.get(p, 0)}
    if behind:
        # Kafka holds less than the table already has: the topic was deleted and re-created or
        # truncated. Never skip that quietly; the job's failOnDataLoss check reports it.
        detail = ", ".join(
            f"partition {p}: end {e} < committed {checkpoint.committed[p]}" for p, e in behind.items()
        )
        return Decision(True, f"Kafka's end offsets are below what the table holds ({detail})", lag)
    new_partitions = sorted(set(end_offsets) - set(checkpoint.committed))
    if new_partitions:
        return Decision(True, f"partitions {new_partitions} are new to the checkpoint", lag)
    waiting = sum(lag.values())
    if waiting:
        return Decision(True, f"{waiting} new records", lag)
    return Decision(False, "nothing new since the last run", lag)


@dataclass(frozen=True)
class FamilyDecision:
    """:class:`Decision` of a family: the members' decisions together."""

    run: bool
    reason: str
    #: Per member, records waiting per partition.
    lag: dict[str, Offsets]
    #: Per member, partitions whose unread records Kafka no longer holds.
    expired: dict[str, dict[int, tuple[int, int]]] = field(default_factory=dict)
    #: Members the checkpoint has never read that have records to read from ``starting_offsets``.
    new: tuple[str, ...] = ()


def decide_family(
    checkpoint: FamilyCheckpointState | None,
    marks: Mapping[str, Mapping[int, tuple[int, int]]],
    starting_offsets: str,
) -> FamilyDecision:
    """Whether a family's ingest job must run: any member with anything new (:func:`decide` per
    member), or a member new to the checkpoint with records from where ``starting_offsets`` reads.

    ``marks``: Kafka's (earliest, end) offsets of every member Kafka has now. A member gone from
    Kafka is no reason to run: its rows stay in the table, and the next run leaves it out.
    """
    lag: dict[str, Offsets] = {}
    expired: dict[str, dict[int, tuple[int, int]]] = {}
    reasons: list[str] = []
    new: list[str] = []
    for topic, parts in sorted(marks.items()):
        ends = {p: high for p, (_low, high) in parts.items()}
        lows = {p: low for p, (low, _high) in parts.items()}
        if checkpoint is not None and topic in checkpoint.committed:
            decision = decide(
                CheckpointState(checkpoint.committed[topic], checkpoint.unfinished_batch), ends, lows
            )
            lag[topic] = decision.lag
            if decision.expired:
                expired[topic] = decision.expired
            if decision.run:
                reasons.append(f"{topic}: {decision.reason}")
            continue
        start = ends if starting_offsets == "latest" else lows
        lag[topic] = {p: max(0, end - start.get(p, 0)) for p, end in sorted(ends.items())}
        waiting = sum(lag[topic].values())
        if checkpoint is not None and waiting:
            new.append(topic)
            reasons.append(f"{topic}: a new member, {waiting} records from {starting_offsets!r}")
    if checkpoint is None:
        return FamilyDecision(True, "first run: no checkpoint yet", lag, expired, tuple(new))
    if reasons:
        return FamilyDecision(True, "; ".join(reasons), lag, expired, tuple(new))
    return FamilyDecision(False, "nothing new in any member since the last run", lag, expired)


#: As the ingest reads (stream.ISOLATION_DEFAULTS): the end offset is then the last stable one, so
#: a transaction still open is not "new records" that start a Spark job for nothing. librdkafka's
#: default already; said here so a connection's other settings cannot hide it. Its own wins.
READ_COMMITTED = {"isolation.level": "read_committed"}


def open_consumer(client_config: Mapping[str, str], group: str) -> tuple[Any, list[Any]]:
    """A librdkafka consumer that never joins its group, and the list its errors are collected in.

    A setting librdkafka cannot take fails here as :class:`~kafkalake.core.errors.KafkaConfigError`
    naming it (not as a Kafka error a retry could fix).
    """
    from confluent_kafka import Consumer, KafkaException

    seen: list[Any] = []
    try:
        consumer = Consumer(
            {
                **READ_COMMITTED,
                **client_config,
                "group.id": group,
                "enable.auto.commit": "false",
                # Authentication and TLS failures reach the client only through this callback;
                # the request itself just times out as "transport failure".
                "error_cb": seen.append,
            }
        )
    except KafkaException as err:
        detail = scrub(str(err.args[0].str() if err.args else err), client_config)
        raise KafkaConfigError(
            f"the Kafka connection's settings are not valid for librdkafka (the pre-flight's client): "
            f"{detail}"
        ) from None
    return consumer, seen


def security_error(topic: str, errors: list[Any], client_config: Mapping[str, str]) -> KafkalakeError | None:
    """The non-retryable error an authentication, authorization or TLS failure stands for, if any."""
    for error in errors:
        text = f"KafkaError{{code={error.name()}}} {error.str()}"
        kind = classify_text(text)
        if kind in (Kind.TLS_UNTRUSTED, Kind.AUTHENTICATION_FAILED, Kind.AUTHORIZATION_FAILED):
            cause = scrub(error.str(), client_config)
            return security_failure(topic, kind, cause).error()
    return None


def _metadata(
    consumer: Any, topic: str | None, timeout: float, seen: list[Any], config: Mapping[str, str]
) -> Any:
    """The topic's metadata; a security failure ends the wait at once, not after ``timeout``."""
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + timeout
    while True:
        try:
            return consumer.list_topics(topic, timeout=max(0.1, min(1.0, deadline - time.monotonic())))
        except KafkaException:
            consumer.poll(0)  # serves error_cb
            failed = security_error(topic or "(every topic)", seen, config)
            if failed is not None:
                raise failed from None
            if time.monotonic() >= deadline:
                raise


def watermarks(
    client_config: Mapping[str, str], topic: str, timeout: float = 15.0
) -> dict[int, tuple[int, int]]:
    """Kafka's (earliest, end) offsets (low and high watermarks) of every partition of ``topic``.

    Raises :class:`~kafkalake.core.errors.TopicMissingError` when the cluster answered and has no such
    topic; an authentication, authorization (ACL) or TLS failure as its own non-retryable error,
    within about a second; and ``KafkaException`` when the cluster did not answer (transient).
    """
    return _watermarks(client_config, [topic], timeout, skip_missing=False)[topic]


def family_watermarks(
    client_config: Mapping[str, str], topics: Iterable[str], timeout: float = 15.0
) -> dict[str, dict[int, tuple[int, int]]]:
    """:func:`watermarks` of several topics (a family's members) through one client; a topic the
    cluster does not have (deleted since it was listed) is left out."""
    return _watermarks(client_config, list(topics), timeout, skip_missing=True)


def _watermarks(
    client_config: Mapping[str, str], topics: list[str], timeout: float, *, skip_missing: bool
) -> dict[str, dict[int, tuple[int, int]]]:
    consumer, seen = open_consumer(client_config, "kafkalake-preflight")
    try:
        found: dict[str, dict[int, tuple[int, int]]] = {}
        for topic in topics:
            try:
                found[topic] = _topic_watermarks(consumer, seen, client_config, topic, timeout)
            except TopicMissingError:
                if not skip_missing:
                    raise
                log.warning("topic %r is gone from the cluster: left out", topic)
        return found
    finally:
        consumer.close()


def _topic_watermarks(
    consumer: Any, seen: list[Any], client_config: Mapping[str, str], topic: str, timeout: float
) -> dict[int, tuple[int, int]]:
    from confluent_kafka import KafkaError, KafkaException, TopicPartition

    metadata = _metadata(consumer, topic, timeout, seen, client_config)
    info = metadata.topics.get(topic)
    if info is not None and info.error is not None and info.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
        detail = f"topic {topic!r} does not exist on the cluster at {client_config.get('bootstrap.servers')}"
        raise TopicMissingError(failure(Kind.TOPIC_MISSING, detail).message)
    if info is not None and info.error is not None:
        failed = security_error(topic, [info.error], client_config)
        if failed is not None:
            raise failed
    if info is None or info.error is not None or not info.partitions:
        reason = info.error if info is not None else "not in metadata"
        raise KafkaException(f"topic {topic!r} is not available on the cluster: {reason}")
    deadline = time.monotonic() + timeout
    result: dict[int, tuple[int, int]] = {}
    for partition in sorted(info.partitions):
        while True:
            try:
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout)
                break
            except KafkaException as err:
                failed = security_error(topic, [err.args[0], *seen], client_config)
                if failed is not None:
                    raise failed from None
                # A broker that has just started (or a partition whose leader moved) answers
                # "not leader" for a moment while it elects leaders: wait for it, within the
                # same timeout, instead of failing the run.
                if not _leader_moving(err.args[0]) or time.monotonic() >= deadline:
                    raise
                time.sleep(0.5)
        result[partition] = (int(low), int(high))
    return result


def consumer_watermarks(
    consumer: Any, seen: list[Any], client_config: Mapping[str, str], topic: str, timeout: float
) -> dict[int, tuple[int, int]]:
    """:func:`watermarks` through a consumer of :func:`open_consumer` the caller keeps open."""
    return _topic_watermarks(consumer, seen, client_config, topic, timeout)


def topic_names(client_config: Mapping[str, str], timeout: float = 15.0) -> set[str]:
    """Every topic the cluster has (a family's members are chosen among them)."""
    consumer, seen = open_consumer(client_config, "kafkalake-preflight")
    try:
        return set(_metadata(consumer, None, timeout, seen, client_config).topics)
    finally:
        consumer.close()


def _leader_moving(error: object) -> bool:
    from confluent_kafka import KafkaError

    return isinstance(error, KafkaError) and error.code() in (
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_LEADER_EPOCH,
        KafkaError.FENCED_LEADER_EPOCH,
    )


def end_offsets(client_config: Mapping[str, str], topic: str, timeout: float = 15.0) -> Offsets:
    """Kafka's end offset (high watermark) of every partition of ``topic``."""
    return {p: high for p, (_low, high) in watermarks(client_config, topic, timeout).items()}


def topic_config(client_config: Mapping[str, str], topic: str, timeout: float = 15.0) -> dict[str, str]:
    """The topic's configuration on the cluster (``cleanup.policy``, ``retention.ms``, ...)."""
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

    admin = AdminClient(dict(client_config))
    resource = ConfigResource(ResourceType.TOPIC, topic)
    entries = admin.describe_configs([resource], request_timeout=timeout)[resource].result(timeout=timeout)
    return {name: str(entry.value) for name, entry in entries.items() if entry.value is not None}


def is_compacted(config: Mapping[str, str]) -> bool:
    """Whether Kafka compacts the topic: its offsets then start at 0 while older versions are gone."""
    return "compact" in config.get("cleanup.policy", "delete").replace(" ", "").split(",")


def topic_id(client_config: Mapping[str, str], topic: str, timeout: float = 10.0) -> str | None:
    """Kafka's ID of the topic (new each time a topic of that name is created).

    None when the cluster cannot say (an old broker, a principal not allowed to describe the topic,
    no answer): the identity check is then skipped, and the offsets checks still run.
    """
    from confluent_kafka import KafkaException, TopicCollection
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(dict(client_config))
    try:
        described = admin.describe_topics(TopicCollection([topic]), request_timeout=timeout)[topic]
        found = described.result(timeout=timeout).topic_id
    except (KafkaException, TimeoutError) as err:
        log.warning("cannot read the topic ID of %r, its identity is not checked: %s", topic, err)
        return None
    return str(found) if found is not None else None


def topic_ids(
    client_config: Mapping[str, str], topics: Iterable[str], timeout: float = 10.0
) -> dict[str, str | None]:
    """:func:`topic_id` of several topics (a family's members), in one request."""
    from confluent_kafka import KafkaException, TopicCollection
    from confluent_kafka.admin import AdminClient

    names = list(topics)
    if not names:
        return {}
    admin = AdminClient(dict(client_config))
    described = admin.describe_topics(TopicCollection(names), request_timeout=timeout)
    ids: dict[str, str | None] = {}
    for name in names:
        try:
            found = described[name].result(timeout=timeout).topic_id
        except (KafkaException, TimeoutError) as err:
            log.warning("cannot read the topic ID of %r, its identity is not checked: %s", name, err)
            found = None
        ids[name] = str(found) if found is not None else None
    return ids
