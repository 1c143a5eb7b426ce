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

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

#: The one line a job prints when it knows why it failed: ``KAFKALAKE_FAILURE kind=<kind> <message>``.
FAILURE_MARKER = "KAFKALAKE_FAILURE"


class Kind(StrEnum):
    OFFSETS_EXPIRED = "offsets_expired"
    TOPIC_MISSING = "topic_missing"
    BAD_CONFIG = "bad_config"
    SCHEMA_REJECTED = "schema_rejected"
    SCHEMA_UNUSABLE = "schema_unusable"
    PARSED_UNWRITABLE = "parsed_unwritable"
    EXPECTATION_FAILED = "expectation_failed"
    TABLE_STATE = "table_state"
    INGEST_UNFINISHED = "ingest_unfinished"
    BROKER_UNREACHABLE = "broker_unreachable"
    DRIVER_LOST = "driver_lost"
    JOB_KILLED = "job_killed"
    CHECKPOINT_LOCKED = "checkpoint_locked"
    REINGEST_REFUSED = "reingest_refused"
    AUTHENTICATION_FAILED = "authentication_failed"
    AUTHORIZATION_FAILED = "authorization_failed"
    TLS_UNTRUSTED = "tls_untrusted"
    TOPIC_RECREATED = "topic_recreated"
    DISK_FULL = "disk_full"
    STORE_UNREACHABLE = "store_unreachable"
    REGISTRY_UNREACHABLE = "registry_unreachable"
    WEBHOOK_FAILED = "webhook_failed"
    UNKNOWN = "unknown"


NON_RETRYABLE = frozenset(
    {
        Kind.OFFSETS_EXPIRED,
        Kind.TOPIC_MISSING,
        Kind.BAD_CONFIG,
        Kind.SCHEMA_REJECTED,
        # The same records (or the same pinned schema) give the same schema a minute later.
        Kind.SCHEMA_UNUSABLE,
        # The parsed side failed on the same records twice (in the stream, then catching up from
        # bronze) with an error of no transient kind: a third try reads the same records.
        Kind.PARSED_UNWRITABLE,
        Kind.EXPECTATION_FAILED,
        Kind.TABLE_STATE,
        Kind.INGEST_UNFINISHED,
        Kind.REINGEST_REFUSED,
        # The cluster refused who we are, what we asked, or we refused the cluster: the same
        # credentials, ACLs and certificates fail the same way a minute later.
        Kind.AUTHENTICATION_FAILED,
        Kind.AUTHORIZATION_FAILED,
        Kind.TLS_UNTRUSTED,
        # The topic's offsets started again at 0: the table's position means nothing for it.
        Kind.TOPIC_RECREATED,
        # Space comes back when someone frees it, not a minute later; the next scheduled run (or a
        # cleared task) resumes from the checkpoint once it has.
        Kind.DISK_FULL,
        # An SLA-miss alert the webhook did not take: nothing sends it again (the triggerer runs a
        # Deadline Alert's callback once); the miss itself is in the triggerer's log.
        Kind.WEBHOOK_FAILED,
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
    Kind.TLS_UNTRUSTED: 76,  # EX_PROTOCOL: the TLS handshake with the broker failed
    Kind.AUTHORIZATION_FAILED: 77,  # EX_NOPERM: an ACL denies the pipeline's principal
    Kind.AUTHENTICATION_FAILED: 79,  # past sysexits' range: it has no "bad credentials" code
    Kind.TOPIC_RECREATED: 80,
    Kind.DISK_FULL: 71,  # EX_OSERR: the operating system refused the write
    Kind.STORE_UNREACHABLE: 81,
    Kind.SCHEMA_UNUSABLE: 82,
    Kind.PARSED_UNWRITABLE: 83,
    Kind.REGISTRY_UNREACHABLE: 84,
}
KIND_OF_EXIT = {code: kind for kind, code in EXIT_CODES.items()}

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
    "`python -m kafkalake.cli.schema accept --topic <topic>` (it makes the proposed schema, shown "
    "by `python -m kafkalake.cli.schema show --topic <topic>`, the current version), then clear the "
    "task: the run lands everything from where it stopped, nothing twice. To refuse them, fix the "
    "producer; the records stay in bronze."
)
RUNBOOK_SCHEMA_UNUSABLE = (
    "The schema the run was about to record (pinned in the catalog's `parsed.schema`, inferred from "
    "the records, or proposed for new fields) is one no parsed table could take or another engine "
    "could not open: the message names why (two fields whose names differ only in case, a struct "
    "without fields, nesting past delta-rs' limit). Nothing was recorded; bronze holds the records. "
    "Fix a pinned schema (or `parsed.type_hints`) in the catalog, then clear the task. Inferred "
    "schemas are repaired before they are recorded, so one that is not is a bug: report it with the "
    "message"
)
RUNBOOK_PARSED_UNWRITABLE = (
    "The parsed tables could not take records that bronze holds: parsing or writing them failed in "
    "the stream and again catching up from bronze, with an error of no transient kind (the message "
    "gives its first line). Bronze keeps landing on every run; the parsed side waits at the first "
    "record it could not take. Read the task log for the whole error; if a catalog setting can "
    "route around it (parsed.evolution, max_columns, a pinned schema or type hints), change it and "
    "clear the task; otherwise report it with the message: the records are kept in bronze and the "
    "parsed tables catch up, exactly once, from where they stopped once a fix is deployed"
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
    "kafkalake.cli.full_refresh --topic <topic>`: it deletes table and checkpoint together, and only "
    "while Kafka still holds every record. Never delete only the checkpoint or only the table."
)
RUNBOOK_TOPIC_RECREATED = (
    "Kafka's topic was deleted and created again under the same name: its offsets started over at "
    "0, so the offsets the table records belong to the old topic and reading the new one from them "
    "would skip its first records. Nothing was written. To keep the old data and land the new "
    "topic: give the topic a new `table` (or `path`) in the catalog, e.g. `orders_v2`; its next run "
    "is a first run and the old table stays readable. If the old data may go: `python -m "
    "kafkalake.cli.full_refresh --topic <topic>` deletes the tables, and the next run lands the new "
    "topic from its start."
)
RUNBOOK_DISK_FULL = (
    "The lake's disk (or the checkpoint's, or the schema history's) is full: a write failed with "
    "'No space left on device'. Nothing half-written counts: a data file without its Delta commit is "
    "ignored by readers and removed by VACUUM, and the checkpoint's planned batch is replayed. Free "
    "space (or grow the volume), then clear the task or wait for the next run: it resumes from the "
    "checkpoint, nothing lost or twice. Do not delete the checkpoint or `_delta_log` to make room."
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
RUNBOOK_AUTHENTICATION_FAILED = (
    "The brokers, or the object store, refused the credentials of the connection named in the "
    "message. Kafka: a wrong or expired password, a SCRAM user that does not exist or lacks this "
    "mechanism, a rejected OAuth client: fix the login/password (or oauth_client_id/"
    "oauth_client_secret) of the Kafka connection, or create the user on the cluster. Object store "
    "(SignatureDoesNotMatch, InvalidAccessKeyId, ExpiredToken): fix the access key (login) and "
    "secret key (password) of the topic's storage_conn_id connection, or renew its session token. "
    "Schema registry (HTTP 401, or a client certificate it refused in the TLS handshake): fix the "
    "login/password or ssl_certificate_pem/ssl_key_pem of the topic's registry_conn_id connection; "
    "bronze kept landing and the parsed tables catch up from it. "
    "Then clear the task: the run resumes from the checkpoint, nothing lost or twice"
)
RUNBOOK_AUTHORIZATION_FAILED = (
    "Kafka or the object store denied the pipeline what it asked. Kafka: an ACL denies the "
    "principal READ/DESCRIBE on the topic (kafkalake uses no consumer group; if a group is named, "
    "READ on the prefixes 'spark-kafka-source' and 'kafkalake'); ask the cluster's admins to grant it "
    "(e.g. `kafka-acls.sh --add --allow-principal User:<name> --operation Read --topic <topic>`). "
    "Object store (AccessDenied, HTTP 403): "
    "the key of the topic's storage_conn_id needs to list, read, write and delete under the table's "
    "path in its bucket; a store that answers 403 without a code may also mean a wrong key. Or "
    "point the topic at a connection that has them. Then clear the task: the run resumes from the "
    "checkpoint, nothing lost or twice"
)
RUNBOOK_TLS_UNTRUSTED = (
    "The TLS handshake with the brokers (or the schema registry) failed: the server's certificate is "
    "not signed by the CA the connection trusts (ssl_ca_pem / ssl_ca_location), its name does not "
    "match the address in bootstrap.servers (the registry connection's URL), it expired, or (mutual "
    "TLS) the server did not accept the client certificate. Check with `openssl s_client -connect "
    "<host:port> -CAfile <ca.pem>`, fix the connection's CA or client certificate, then clear the "
    "task. Never turn verification off"
)
RUNBOOK_WEBHOOK_FAILED = (
    "The SLA-miss alert did not reach the webhook: the HTTP connection named in the message did not "
    "answer, or answered with an HTTP error. The miss itself is in the triggerer's log (see 'SLA "
    "miss alert'), and nothing sends the alert again: act on it from the log. Check the "
    "connection's host, schema, port and extra (its `headers`, its login/password for basic "
    "auth), and that the endpoint answers from the triggerer"
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
RUNBOOK_JOB_KILLED = _RUNBOOK_TRANSIENT.format(
    what="find who sent the signal: the kernel's OOM killer (`dmesg`, the worker's memory), a node "
    "drain or a restart of the worker, or someone's kill. The run history holds the killed run's row "
    "with what its tables received before the signal; the checkpoint makes a rerun safe: no row is "
    "written twice"
)
RUNBOOK_CHECKPOINT_LOCKED = _RUNBOOK_TRANSIENT.format(
    what="find the process named above (another run of this topic, or a hand-started job): let it "
    "finish, or stop it if it is stuck, then clear the task. Never delete the lock file or the "
    "checkpoint to get past this"
)
RUNBOOK_STORE_UNREACHABLE = _RUNBOOK_TRANSIENT.format(
    what="check that the object store answers from the Airflow worker and the Spark driver (the "
    "endpoint_url of the topic's storage_conn_id connection, DNS, network, the store itself), then "
    "clear the task. The checkpoint makes a rerun safe: no row is written twice"
)
RUNBOOK_REGISTRY_UNREACHABLE = _RUNBOOK_TRANSIENT.format(
    what="check that the schema registry answers from the Spark driver (the URL of the topic's "
    "registry_conn_id connection, DNS, network, the registry itself), then clear the task. Bronze "
    "kept landing; the parsed tables catch up from bronze, exactly once, once it answers"
)
RUNBOOK_UNKNOWN = _RUNBOOK_TRANSIENT.format(what="read the job's log above for the cause")

_RUNBOOKS = {
    Kind.OFFSETS_EXPIRED: RUNBOOK_OFFSETS_EXPIRED,
    Kind.TOPIC_MISSING: RUNBOOK_TOPIC_MISSING,
    Kind.BAD_CONFIG: RUNBOOK_BAD_CONFIG,
    Kind.SCHEMA_REJECTED: RUNBOOK_SCHEMA_REJECTED,
    Kind.SCHEMA_UNUSABLE: RUNBOOK_SCHEMA_UNUSABLE,
    Kind.PARSED_UNWRITABLE: RUNBOOK_PARSED_UNWRITABLE,
    Kind.EXPECTATION_FAILED: RUNBOOK_EXPECTATION_FAILED,
    Kind.TABLE_STATE: RUNBOOK_TABLE_STATE,
    Kind.INGEST_UNFINISHED: RUNBOOK_INGEST_UNFINISHED,
    Kind.BROKER_UNREACHABLE: RUNBOOK_BROKER,
    Kind.DRIVER_LOST: RUNBOOK_DRIVER_LOST,
    Kind.JOB_KILLED: RUNBOOK_JOB_KILLED,
    Kind.CHECKPOINT_LOCKED: RUNBOOK_CHECKPOINT_LOCKED,
    Kind.REINGEST_REFUSED: RUNBOOK_REINGEST_REFUSED,
    Kind.AUTHENTICATION_FAILED: RUNBOOK_AUTHENTICATION_FAILED,
    Kind.AUTHORIZATION_FAILED: RUNBOOK_AUTHORIZATION_FAILED,
    Kind.TLS_UNTRUSTED: RUNBOOK_TLS_UNTRUSTED,
    Kind.TOPIC_RECREATED: RUNBOOK_TOPIC_RECREATED,
    Kind.DISK_FULL: RUNBOOK_DISK_FULL,
    Kind.STORE_UNREACHABLE: RUNBOOK_STORE_UNREACHABLE,
    Kind.REGISTRY_UNREACHABLE: RUNBOOK_REGISTRY_UNREACHABLE,
    Kind.WEBHOOK_FAILED: RUNBOOK_WEBHOOK_FAILED,
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


class BadConfigError(NonRetryableError, ValueError):
    """The base of every configuration error: a catalog, a connection, a job's arguments, set-up."""

    kind = Kind.BAD_CONFIG


class CatalogError(BadConfigError):
    """A catalog file that cannot be used, with the file, topic and field it is about."""

    def __init__(self, file: Path, message: str, topic: str | None = None, field: str | None = None) -> None:
        where = str(file)
        if topic is not None:
            where += f": topic {topic!r}"
        if field is not None:
            where += f": field {field!r}"
        super().__init__(f"{where}: {message}")
        self.file = file
        self.topic = topic
        self.field = field


class ParsedConfigError(BadConfigError):
    """A bad `parsed:` setting; `field` is its dotted name, e.g. ``parsed.expectations[0].rule``.

    The catalog turns it into a :class:`CatalogError` that names the file and the topic too.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class KafkaConfigError(BadConfigError):
    """A Kafka connection whose settings cannot be used."""


class JarsMissingError(BadConfigError):
    """The JVM jars were never resolved on this machine (or for other versions)."""


class SchemaRejectedError(NonRetryableError):
    kind = Kind.SCHEMA_REJECTED


class UnusableSchemaError(NonRetryableError, ValueError):
    """A schema the parsed table, or another engine reading it, cannot take."""

    kind = Kind.SCHEMA_UNUSABLE


class ParsedUnwritableError(NonRetryableError):
    """Records bronze holds that the parsed tables could not take, twice."""

    kind = Kind.PARSED_UNWRITABLE


class ExpectationFailedError(NonRetryableError):
    kind = Kind.EXPECTATION_FAILED


class TopicRecreatedError(NonRetryableError):
    """The topic's Kafka topic ID is not the one the table's offsets were read from."""

    kind = Kind.TOPIC_RECREATED


class DiskFullError(NonRetryableError):
    """A write of the lake, a checkpoint or the schema history found no space left."""

    kind = Kind.DISK_FULL


class TableStateError(NonRetryableError):
    """Table and checkpoint disagree: starting the stream would lose or duplicate data."""

    kind = Kind.TABLE_STATE


class IngestUnfinishedError(NonRetryableError):
    """A replay refused: the topic's last ingest left a micro-batch half written."""

    kind = Kind.INGEST_UNFINISHED


class ReingestRefusedError(NonRetryableError):
    """A re-ingest asked for what cannot be done safely (bad parameters, expired offsets)."""

    kind = Kind.REINGEST_REFUSED


class AuthenticationFailedError(NonRetryableError):
    """The brokers, the object store or the schema registry refused the connection's credentials
    (the registry: its login, or its client certificate in the TLS handshake)."""

    kind = Kind.AUTHENTICATION_FAILED


class AuthorizationFailedError(NonRetryableError):
    """An ACL denies the pipeline's principal a topic, a consumer group or the cluster; or the
    object store denies its key access to the table's bucket or path."""

    kind = Kind.AUTHORIZATION_FAILED


class TlsUntrustedError(NonRetryableError):
    """The TLS handshake failed: an untrusted or mismatched broker certificate, or a refused client one."""

    kind = Kind.TLS_UNTRUSTED


class WebhookError(NonRetryableError):
    """The SLA webhook could not be reached or refused the alert; the message names no secret."""

    kind = Kind.WEBHOOK_FAILED


class TransientError(KafkalakeError):
    """Likely to work later: the task retries with backoff."""


class BrokerUnreachableError(TransientError):
    kind = Kind.BROKER_UNREACHABLE


class DriverLostError(TransientError):
    kind = Kind.DRIVER_LOST


class JobKilledError(DriverLostError):
    """The job's process died by a signal (SIGKILL, SIGTERM): it could report nothing itself."""

    kind = Kind.JOB_KILLED


class StoreUnreachableError(TransientError):
    """The object store did not answer (refused connections, unknown host, timeouts)."""

    kind = Kind.STORE_UNREACHABLE


class RegistryUnreachableError(TransientError):
    """The schema registry did not answer (refused connections, unknown host, timeouts, 5xx)."""

    kind = Kind.REGISTRY_UNREACHABLE


class CheckpointLockedError(TransientError):
    """Another process holds the checkpoint's run lock (:mod:`kafkalake.lake.checkpoint_lock`)."""

    kind = Kind.CHECKPOINT_LOCKED


_ERRORS: Mapping[Kind, type[KafkalakeError]] = {
    Kind.OFFSETS_EXPIRED: OffsetsExpiredError,
    Kind.TOPIC_MISSING: TopicMissingError,
    Kind.BAD_CONFIG: BadConfigError,
    Kind.SCHEMA_REJECTED: SchemaRejectedError,
    Kind.SCHEMA_UNUSABLE: UnusableSchemaError,
    Kind.PARSED_UNWRITABLE: ParsedUnwritableError,
    Kind.EXPECTATION_FAILED: ExpectationFailedError,
    Kind.TABLE_STATE: TableStateError,
    Kind.INGEST_UNFINISHED: IngestUnfinishedError,
    Kind.BROKER_UNREACHABLE: BrokerUnreachableError,
    Kind.DRIVER_LOST: DriverLostError,
    Kind.JOB_KILLED: JobKilledError,
    Kind.CHECKPOINT_LOCKED: CheckpointLockedError,
    Kind.REINGEST_REFUSED: ReingestRefusedError,
    Kind.AUTHENTICATION_FAILED: AuthenticationFailedError,
    Kind.AUTHORIZATION_FAILED: AuthorizationFailedError,
    Kind.TLS_UNTRUSTED: TlsUntrustedError,
    Kind.TOPIC_RECREATED: TopicRecreatedError,
    Kind.DISK_FULL: DiskFullError,
    Kind.STORE_UNREACHABLE: StoreUnreachableError,
    Kind.REGISTRY_UNREACHABLE: RegistryUnreachableError,
    Kind.WEBHOOK_FAILED: WebhookError,
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
    """The failure a typed error stands for, e.g. for a job to report it with :func:`failure_line`;
    with the on-call advice when its message lacks it (one not made by :func:`failure`)."""
    message = str(error)
    if message.startswith(f"[{error.kind}]"):
        return Failure(error.kind, message)
    return failure(error.kind, message)


def failure(kind: Kind, detail: str) -> Failure:
    """A failure whose message says what happened, whether it retries, and what to do."""
    verdict = (
        "retrying with backoff" if kind not in NON_RETRYABLE else "NOT retrying: a retry cannot fix this"
    )
    what = _RUNBOOKS[kind].rstrip(".")
    runbook = f"See RUNBOOK.md, section {kind}."
    return Failure(kind, f"[{kind}] {detail} ({verdict}). What to do: {what}. {runbook}")
