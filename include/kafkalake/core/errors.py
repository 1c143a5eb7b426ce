"""Why a run failed, and what on-call should do: retry with backoff, or fail at once and say why.

Two kinds of failure, two answers:

* **transient** (broker unreachable, timeouts, a lost Spark driver, a checkpoint another run holds):
  the same run will likely work a little later, so the task retries with exponential backoff;
* **non-retryable** (offsets expired in Kafka before they were read, bad configuration, a topic
  that does not exist): retrying cannot help and only delays the page, so the task fails at once
  with a message that says what happened and what to do.

The ingest job classifies its own failure where the whole JVM exception, causes included, is at
hand, prints one ``KAFKALAKE_FAILURE kind=... <message>`` line and exits with a distinct code
(:data:`EXIT_CODES`). The Airflow side reads that line and code back from the spark-submit error
(never parsing a Java stack trace when the job could say it plainly) and raises one of the typed
exceptions below, which the DAGs' retry policy maps to retry or fail. Everything here is pure: no
Airflow, no Spark, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

#: The one line a job prints when it knows why it failed: ``KAFKALAKE_FAILURE kind=<kind> <message>``.
FAILURE_MARKER = "KAFKALAKE_FAILURE"


class Kind(StrEnum):
    OFFSETS_EXPIRED = "offsets_expired"
    TOPIC_MISSING = "topic_missing"
    BAD_CONFIG = "bad_config"
    SCHEMA_REJECTED = "schema_rejected"
    EXPECTATION_FAILED = "expectation_failed"
    TABLE_STATE = "table_state"
    INGEST_UNFINISHED = "ingest_unfinished"
    BROKER_UNREACHABLE = "broker_unreachable"
    DRIVER_LOST = "driver_lost"
    CHECKPOINT_LOCKED = "checkpoint_locked"
    REINGEST_REFUSED = "reingest_refused"
    UNKNOWN = "unknown"


NON_RETRYABLE = frozenset(
    {
        Kind.OFFSETS_EXPIRED,
        Kind.TOPIC_MISSING,
        Kind.BAD_CONFIG,
        Kind.SCHEMA_REJECTED,
        Kind.EXPECTATION_FAILED,
        Kind.TABLE_STATE,
        Kind.INGEST_UNFINISHED,
        Kind.REINGEST_REFUSED,
    }
)

#: Exit codes of the jobs, after sysexits.h: data error, no input, temporary failure, config error.
EXIT_CODES: Mapping[Kind, int] = {
    Kind.REINGEST_REFUSED: 64,  # EX_USAGE: the re-ingest's parameters ask for what cannot be done
    Kind.OFFSETS_EXPIRED: 65,
    Kind.TOPIC_MISSING: 66,
    Kind.SCHEMA_REJECTED: 67,
    Kind.EXPECTATION_FAILED: 68,
    Kind.TABLE_STATE: 74,
    Kind.INGEST_UNFINISHED: 69,  # EX_UNAVAILABLE: the tables are mid-batch until the ingest finishes
    Kind.BROKER_UNREACHABLE: 75,
    Kind.BAD_CONFIG: 78,
    Kind.CHECKPOINT_LOCKED: 73,  # EX_CANTCREAT: the run could not take its checkpoint's lock
}
_KIND_OF_EXIT = {code: kind for kind, code in EXIT_CODES.items()}

RUNBOOK_OFFSETS_EXPIRED = (
    "These records are gone from Kafka and cannot be recovered from it (re-publish them from the "
    "source system if it still has them). To accept the loss and move on: set "
    "`fail_on_data_loss: false` on this topic in the catalog, run the DAG once (the ingest skips "
    "the missing offsets and lands everything Kafka still has), then set it back to true. Do NOT "
    "delete or move the checkpoint: that re-reads the topic from starting_offsets and duplicates "
    "rows. To keep it from happening again, raise the topic's retention.ms well above the "
    "freshness SLA or fix what kept the DAG from running."
)
RUNBOOK_TOPIC_MISSING = (
    "Create the topic (or fix its name in the catalog), or remove the topic from the catalog if it "
    "was retired. Check the DAG's Kafka connection points at the right cluster."
)
RUNBOOK_BAD_CONFIG = (
    "Fix the named setting in the catalog or in the Airflow connection, then clear the task. "
    "Retrying without a change fails the same way."
)
RUNBOOK_SCHEMA_REJECTED = (
    "The topic's evolution mode is failOnNewColumns and its events gained the fields named above. "
    "Bronze already holds these records; the parsed tables wait. To accept the new fields, run "
    "`python -m kafkalake.schema_cli accept --topic <topic>` (it makes the proposed schema, shown "
    "by `python -m kafkalake.schema_cli show --topic <topic>`, the current version), then clear the "
    "task: the run lands everything from where it stopped, nothing twice. To refuse them, fix the "
    "producer; the records stay in bronze."
)
RUNBOOK_EXPECTATION_FAILED = (
    "Records broke an expectation whose action is `fail` (named above, with example offsets). "
    "Bronze already holds them; the parsed tables wait. Fix the producer or the rule, or change the "
    "expectation's action to `drop` (the records go to the dead-letter table) or `warn`, then clear "
    "the task: the run resumes from the failed batch, nothing twice."
)
RUNBOOK_TABLE_STATE = (
    "The table and its checkpoint disagree, and starting the stream now would lose or duplicate "
    "data. Find out what removed one of them (a manual delete, a restore from backup, a changed "
    "'path' in the catalog) and put it back. To start over on purpose, run `python -m "
    "kafkalake.full_refresh --topic <topic>`: it deletes table and checkpoint together, and only "
    "while Kafka still holds every record. Never delete only the checkpoint or only the table."
)
RUNBOOK_INGEST_UNFINISHED = (
    "The topic's last ingest stopped in the middle of a micro-batch: bronze may already hold records "
    "the parsed tables do not, and the ingest will write them when it resumes. A replay now would "
    "make that resumed batch write them twice. Run the topic's ingest first (trigger its DAG, or "
    "clear its failed `ingest` task) and let it succeed, then run the replay again"
)
RUNBOOK_REINGEST_REFUSED = (
    "Nothing was written. Fix what the message names and trigger again: `reingest_from` must be an "
    "ISO timestamp in the past (e.g. 2026-05-01T10:00:00Z) and `confirm_reingest` must be true; when "
    "Kafka no longer holds the window's first records, choose a later `reingest_from` (what Kafka "
    "deleted cannot be re-read; re-publish it from the source system if it still has it)"
)
_RUNBOOK_TRANSIENT = "Transient: the task retries with backoff; if every retry fails, {what}"
RUNBOOK_BROKER = _RUNBOOK_TRANSIENT.format(
    what="check the brokers are up and reachable from the Airflow worker (bootstrap.servers, "
    "network, credentials), then clear the task"
)
RUNBOOK_DRIVER_LOST = _RUNBOOK_TRANSIENT.format(
    what="check the worker's memory (spark.driver.memory in the topic's spark_conf) and the "
    "Spark cluster, then clear the task. The checkpoint makes a rerun safe: no row is written twice"
)
RUNBOOK_CHECKPOINT_LOCKED = _RUNBOOK_TRANSIENT.format(
    what="find the process named above (another run of this topic, or a hand-started job): let it "
    "finish, or stop it if it is stuck, then clear the task. Never delete the lock file or the "
    "checkpoint to get past this"
)
RUNBOOK_UNKNOWN = _RUNBOOK_TRANSIENT.format(what="read the job's log above for the cause")

_RUNBOOKS = {
    Kind.OFFSETS_EXPIRED: RUNBOOK_OFFSETS_EXPIRED,
    Kind.TOPIC_MISSING: RUNBOOK_TOPIC_MISSING,
    Kind.BAD_CONFIG: RUNBOOK_BAD_CONFIG,
    Kind.SCHEMA_REJECTED: RUNBOOK_SCHEMA_REJECTED,
    Kind.EXPECTATION_FAILED: RUNBOOK_EXPECTATION_FAILED,
    Kind.TABLE_STATE: RUNBOOK_TABLE_STATE,
    Kind.INGEST_UNFINISHED: RUNBOOK_INGEST_UNFINISHED,
    Kind.BROKER_UNREACHABLE: RUNBOOK_BROKER,
    Kind.DRIVER_LOST: RUNBOOK_DRIVER_LOST,
    Kind.CHECKPOINT_LOCKED: RUNBOOK_CHECKPOINT_LOCKED,
    Kind.REINGEST_REFUSED: RUNBOOK_REINGEST_REFUSED,
    Kind.UNKNOWN: RUNBOOK_UNKNOWN,
}


# ---------------------------------------------------------------------------------------------
# typed exceptions: what the DAGs' retry policy matches on


class KafkalakeError(Exception):
    """A failure whose cause is known; ``str()`` is the on-call message."""

    kind: Kind = Kind.UNKNOWN


class NonRetryableError(KafkalakeError):
    """Retrying cannot help: the task fails at once."""


class OffsetsExpiredError(NonRetryableError):
    kind = Kind.OFFSETS_EXPIRED


class TopicMissingError(NonRetryableError):
    kind = Kind.TOPIC_MISSING


class BadConfigError(NonRetryableError):
    kind = Kind.BAD_CONFIG


class SchemaRejectedError(NonRetryableError):
    kind = Kind.SCHEMA_REJECTED


class ExpectationFailedError(NonRetryableError):
    kind = Kind.EXPECTATION_FAILED


class TableStateError(NonRetryableError):
    """Table and checkpoint disagree: starting the stream would lose or duplicate data."""

    kind = Kind.TABLE_STATE


class IngestUnfinishedError(NonRetryableError):
    """A replay refused: the topic's last ingest left a micro-batch half written."""

    kind = Kind.INGEST_UNFINISHED


class ReingestRefusedError(NonRetryableError):
    """A re-ingest asked for what cannot be done safely (bad parameters, expired offsets)."""

    kind = Kind.REINGEST_REFUSED


class TransientError(KafkalakeError):
    """Likely to work later: the task retries with backoff."""


class BrokerUnreachableError(TransientError):
    kind = Kind.BROKER_UNREACHABLE


class DriverLostError(TransientError):
    kind = Kind.DRIVER_LOST


class CheckpointLockedError(TransientError):
    """Another process holds the checkpoint's run lock (:mod:`kafkalake.run_lock`)."""

    kind = Kind.CHECKPOINT_LOCKED


_ERRORS: Mapping[Kind, type[KafkalakeError]] = {
    Kind.OFFSETS_EXPIRED: OffsetsExpiredError,
    Kind.TOPIC_MISSING: TopicMissingError,
    Kind.BAD_CONFIG: BadConfigError,
    Kind.SCHEMA_REJECTED: SchemaRejectedError,
    Kind.EXPECTATION_FAILED: ExpectationFailedError,
    Kind.TABLE_STATE: TableStateError,
    Kind.INGEST_UNFINISHED: IngestUnfinishedError,
    Kind.BROKER_UNREACHABLE: BrokerUnreachableError,
    Kind.DRIVER_LOST: DriverLostError,
    Kind.CHECKPOINT_LOCKED: CheckpointLockedError,
    Kind.REINGEST_REFUSED: ReingestRefusedError,
    Kind.UNKNOWN: TransientError,
}


@dataclass(frozen=True)
class Failure:
    """A classified failure; ``message`` is the whole on-call message."""

    kind: Kind
    message: str

    @property
    def retryable(self) -> bool:
        return self.kind not in NON_RETRYABLE

    def error(self) -> KafkalakeError:
        """The typed exception to raise, so the DAGs' retry policy can act on the kind."""
        return _ERRORS[self.kind](self.message)


def failure_of(error: KafkalakeError) -> Failure:
    """The failure a typed error stands for, e.g. for a job to report it with :func:`failure_line`."""
    return Failure(error.kind, str(error))


def failure(kind: Kind, detail: str) -> Failure:
    """A failure whose message says what happened, whether it retries, and what to do."""
    verdict = (
        "retrying with backoff" if kind not in NON_RETRYABLE else "NOT retrying: a retry cannot fix this"
    )
    what = _RUNBOOKS[kind].rstrip(".")
    runbook = f"See RUNBOOK.md, section {kind}."
    return Failure(kind, f"[{kind}] {detail} ({verdict}). What to do: {what}. {runbook}")


# ---------------------------------------------------------------------------------------------
# the job side: from a Spark/Kafka error text to a kind, and the one line that reports it

# Spark's Kafka source, failOnDataLoss=true: condition KAFKA_DATA_LOSS.* (spark-sql-kafka 4.2,
# error/kafka-error-conditions.json), raised as KafkaIllegalStateException whose message, not the
# condition's name, is what reaches the trace; often only as a "Caused by" of a write failure.
_DATA_LOSS = re.compile(
    r"KAFKA_DATA_LOSS|Some data may have been lost because they are not available in Kafka"
)
# The sub-condition's sentence, e.g. "Could not read records in offset [0, 50) for topic
# partition t-0 with consumer group ...", "Starting offset for t-0 was 50 but consumer reset to 80."
_DATA_LOSS_REASON = re.compile(
    r"(Could not read records in offset \[\d+, \d+\) for topic partition \S+"
    r"|Starting offset for \S+ was \d+ but consumer reset to \d+"
    r"|Partition \S+ offset was changed from \d+ to \d+"
    r"|Added partition \S+ starts from \d+ instead of 0"
    r"|Cannot find initial offsets for partitions .*?(?=\. )"
    r"|Partitions .*? have been deleted)"
)
_TOPIC_MISSING = re.compile(r"UnknownTopicOrPartitionException|UNKNOWN_TOPIC_OR_PART")
_BAD_CONFIG = re.compile(
    r"ConfigException|KafkaConfigError|CatalogError|Invalid value .* for configuration"
    r"|IllegalArgumentException: .*(?:option|kafka\.)"
)
_BROKER = re.compile(
    r"TimeoutException|Timed out waiting for|could not be established|DisconnectException"
    r"|NetworkException|Failed to get records for .* after polling|Connection refused"
    r"|_TRANSPORT|_TIMED_OUT|_ALL_BROKERS_DOWN"
)
# A JVM or driver killed by a signal, out of memory, or the cluster losing its driver.
_DRIVER_LOST = re.compile(
    r"OutOfMemoryError|SparkContext was shut down|Driver .* (?:lost|disassociated|KILLED)"
    r"|Py4JNetworkError|Answer from Java side is empty|Connection reset by peer"
)


def classify_text(text: str) -> Kind:
    """The kind of failure an error text (a Spark exception, a log tail) shows; first match wins.

    Non-retryable kinds are checked first: a data-loss failure's trace also mentions timeouts.
    """
    for kind, pattern in (
        (Kind.OFFSETS_EXPIRED, _DATA_LOSS),
        (Kind.TOPIC_MISSING, _TOPIC_MISSING),
        (Kind.BAD_CONFIG, _BAD_CONFIG),
        (Kind.BROKER_UNREACHABLE, _BROKER),
        (Kind.DRIVER_LOST, _DRIVER_LOST),
    ):
        if pattern.search(text):
            return kind
    return Kind.UNKNOWN


_KAFKA_CAUSE = re.compile(r"org\.apache\.kafka\.common\.errors\.\w+: [^\n]*?(?= SQLSTATE|\n|$)")


def _cause(text: str, limit: int = 300) -> str:
    """The sentence that says why: Kafka's own exception if there is one, else the first line."""
    kafka = _KAFKA_CAUSE.search(text)
    line = kafka.group(0) if kafka else next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    line = line.removeprefix("org.apache.kafka.common.errors.")
    return line if len(line) <= limit else line[: limit - 1] + "…"


def classify_spark_error(topic: str, text: str) -> Failure:
    """Classify the failure of the ingest job's streaming query from its exception text."""
    kind = classify_text(text)
    if kind is Kind.OFFSETS_EXPIRED:
        reason = _DATA_LOSS_REASON.search(text)
        return failure(
            kind,
            f"topic {topic!r}: Kafka no longer holds offsets the table has not read yet (expired by "
            "retention, deleted, or the topic was re-created)" + (f": {reason.group(0)}" if reason else ""),
        )
    if kind is Kind.TOPIC_MISSING:
        return failure(kind, f"topic {topic!r} does not exist on the cluster")
    if kind is Kind.BROKER_UNREACHABLE:
        return failure(kind, f"topic {topic!r}: Kafka did not answer in time: {_cause(text)}")
    return failure(kind, f"topic {topic!r}: {_cause(text)}")


def failure_line(failed: Failure) -> str:
    """The single line a job prints before exiting with ``exit_code(kind)``."""
    one_line = " ".join(failed.message.split())
    return f"{FAILURE_MARKER} kind={failed.kind} {one_line}"


def exit_code(kind: Kind) -> int:
    """The job's exit code for a kind; 1 (Python's own) when the kind has none of its own."""
    return EXIT_CODES.get(kind, 1)


# ---------------------------------------------------------------------------------------------
# the Airflow side: from spark-submit's exit code and last log lines to a classification

_LINE = re.compile(rf"{FAILURE_MARKER} kind=(?P<kind>\w+) (?P<message>.*)")
_SUBMIT_EXIT = re.compile(r"Error code is: (-?\d+)")
_SIGNALS = {-9: "SIGKILL", -15: "SIGTERM", 137: "SIGKILL", 143: "SIGTERM"}


def parse_failure_line(text: str) -> Failure | None:
    """The job's own report (the last ``KAFKALAKE_FAILURE`` line), if the text holds one."""
    found = None
    for match in _LINE.finditer(text):
        found = match
    if found is None:
        return None
    try:
        kind = Kind(found.group("kind"))
    except ValueError:
        kind = Kind.UNKNOWN
    return Failure(kind, found.group("message").strip())


def submit_exit_code(text: str) -> int | None:
    """The exit code the Spark provider put in its error ("Error code is: N.")."""
    match = _SUBMIT_EXIT.search(text)
    return int(match.group(1)) if match else None


def classify_job_failure(job: str, topic: str, error_text: str) -> Failure:
    """Classify a failed spark-submit from the provider's error text (exit code + last log lines).

    In order of trust: the job's own ``KAFKALAKE_FAILURE`` line, its exit code, a signal that killed
    the driver, then known patterns in the log tail. Anything else is ``unknown`` and retried.
    """
    # Only the job's output is searched: the command line before it could hold any word.
    tail = (
        error_text.split("Last spark-submit output:", 1)[1]
        if "Last spark-submit output:" in error_text
        else ""
    )
    reported = parse_failure_line(tail)
    if reported is not None:
        return reported
    code = submit_exit_code(error_text)
    if code in _KIND_OF_EXIT:
        kind = _KIND_OF_EXIT[code]
        return failure(kind, f"{job} for topic {topic!r} exited {code}")
    if code in _SIGNALS:
        detail = f"the {job} driver for topic {topic!r} was killed ({_SIGNALS[code]}, exit {code})"
        return failure(Kind.DRIVER_LOST, detail)
    kind = classify_text(tail)
    # Without the job's own verdict, only a data-loss error class is trusted to stop retries: a
    # pattern match on a log tail is evidence, not proof, so the other kinds stay retryable.
    if kind in NON_RETRYABLE and kind is not Kind.OFFSETS_EXPIRED:
        kind = Kind.UNKNOWN
    detail = f"{job} for topic {topic!r} failed (exit {code})"
    if kind is Kind.OFFSETS_EXPIRED:
        return classify_spark_error(topic, tail)
    return failure(kind, detail)


def offsets_expired_message(topic: str, expired: Mapping[int, tuple[int, int]]) -> str:
    """On-call message for the pre-flight's finding: {partition: (committed, earliest in Kafka)}."""
    parts = ", ".join(
        f"partition {p}: offsets {committed}..{earliest - 1} ({earliest - committed} records)"
        for p, (committed, earliest) in sorted(expired.items())
    )
    total = sum(earliest - committed for committed, earliest in expired.values())
    detail = (
        f"topic {topic!r}: {total} records expired in Kafka before the table read them ({parts}); "
        "Kafka's earliest offset is above the table's checkpoint"
    )
    return failure(Kind.OFFSETS_EXPIRED, detail).message
