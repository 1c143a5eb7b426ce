"""How a job's failure crosses the process boundary, and how Spark's errors are classified.

The ingest job classifies its own failure where the whole JVM exception is at hand
(:func:`classify_spark_error`), prints one :func:`failure_line` and exits with :func:`exit_code`.
The Airflow side reads the line and the code back from spark-submit's output
(:func:`classify_job_failure`). Pure: no Airflow, no Spark, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from kafkalake.core.errors import (
    EXIT_CODES,
    FAILURE_MARKER,
    KIND_OF_EXIT,
    NON_RETRYABLE,
    Failure,
    Kind,
    failure,
)

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
# Security failures, as the Java client (Spark's job) and librdkafka (the pre-flight) word them. TLS
# first: the Java client's SslAuthenticationException is an AuthenticationException too.
_TLS_UNTRUSTED = re.compile(
    r"SslAuthenticationException|SSLHandshakeException|PKIX path (?:building|validation) failed"
    r"|unable to find valid certification path|No subject alternative \w+ matching"
    r"|SSL handshake failed|certificate verify failed|KafkaError\{code=_SSL\b"
    # The broker refused the client's certificate (mutual TLS), in OpenSSL's and in Java's words.
    r"|ssl/tls alert (?:bad certificate|certificate required|certificate unknown|unknown ca)"
    r"|Received fatal alert: (?:bad_certificate|certificate_required|certificate_unknown|unknown_ca)"
)
_AUTHENTICATION = re.compile(
    r"SaslAuthenticationException|AuthenticationException|SASL authentication error"
    r"|Authentication failed during authentication|KafkaError\{code=_AUTHENTICATION\b"
)
_AUTHORIZATION = re.compile(
    r"(?:Topic|Group|Cluster|TransactionalId|DelegationToken)AuthorizationException"
    r"|Not authorized to access|(?:TOPIC|GROUP|CLUSTER)_AUTHORIZATION_FAILED"
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
# ENOSPC as the JVM (IOException), Python (OSError errno 28) and Hadoop's quota checks word it.
_DISK_FULL = re.compile(r"No space left on device|\[Errno 28\]|DiskSpaceQuotaExceeded|Disk quota exceeded")
# A JVM or driver killed by a signal, out of memory, or the cluster losing its driver.
_DRIVER_LOST = re.compile(
    r"OutOfMemoryError|SparkContext was shut down|Driver .* (?:lost|disassociated|KILLED)"
    r"|Py4JNetworkError|Answer from Java side is empty|Connection reset by peer"
)


# The object store refusing a request: S3's error code, read only where the readers put it,
# <Code>X</Code> (the XML body delta-rs shows), "An error occurred (X)" (boto3), "...):X" (the AWS
# SDK under S3A), "AWS Error X" (pyarrow). Bare, a name like InvalidToken is also Fernet's (a wrong
# Airflow fernet key) and must not read as the store's. A code that says the key or signature is
# unknown is the credentials; AccessDenied, or S3A's 403 without a code (a HEAD request has no
# body), is a refusal of access, which a wrong key can look like too.
_S3_CODE = r"(?:<Code>|An error occurred \(|\):|AWS Error )"
_STORE_CREDENTIALS = re.compile(
    _S3_CODE + r"(?P<code>SignatureDoesNotMatch|InvalidAccessKeyId|InvalidToken|ExpiredToken"
    r"|InvalidClientTokenId|SIGNATURE_DOES_NOT_MATCH|INVALID_ACCESS_KEY_ID|INVALID_TOKEN"
    r"|EXPIRED_TOKEN)\b"
)
_STORE_DENIED = re.compile(
    _S3_CODE + r"(?P<code>AccessDenied|ACCESS_DENIED)\b"
    r"|(?P<status>AccessDeniedException: s3a://|S3Exception: Forbidden"
    r"|Generic S3 error[\s\S]{0,2000}?403 Forbidden)"
)
_STORE_NO_BUCKET = re.compile(
    _S3_CODE + r"(?:NoSuchBucket|NO_SUCH_BUCKET)\b"
    r"|NoSuchBucketException|UnknownStoreException|The specified bucket does not exist"
)
# The object store not answering, as delta-rs, pyarrow, S3A (the AWS SDK) and boto3 word it. Before
# the broker's patterns: "Connection refused" is in both.
_STORE_UNREACHABLE = re.compile(
    r"Generic S3 error[\s\S]{0,2000}?(?:tcp connect error|dns error|error sending request|timed out)"
    r"|AWS Error NETWORK_CONNECTION"
    r"|(?:ConnectException|UnknownHostException|SocketTimeoutException|ConnectTimeoutException|"
    r"NoRouteToHostException): [^\n]*? on s3a://"
    r"|SdkClientException: Unable to execute HTTP request"
    r"|Could not connect to the endpoint URL|Connect timeout on endpoint URL"
)
_STORE_ENDPOINT = re.compile(
    r"(?:[Cc]onnect to |endpoint URL: \"?|https?://)"
    # A host with a dot (a name or an address) or a port: not "connect to server".
    r"(?P<at>[\w\-]+(?:\.[\w\-]+)+(?::\d+)?|[\w\-]+:\d+)"
)
_STORE_WHY = re.compile(
    r"Connection refused|timed out|Read timed out|UnknownHostException|Name or service not known"
    r"|dns error|No route to host|Could not connect to server",
    re.IGNORECASE,
)
# The bucket a refused request was for: s3a://bucket/..., "in bucket 'b'" (pyarrow), /bucket?list (delta-rs).
_STORE_BUCKET = re.compile(
    r"s3a?://(?P<a>[^/\s'`]+)|in bucket '(?P<b>[^']+)'|https?://[^/\s]+/(?P<c>[^/?\s]+)\?"
)
# delta-rs colours its error chain for a terminal; a log shows the escapes as garbage.
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def without_colour(err: BaseException) -> None:
    """Take a terminal's colour escapes out of ``err``'s message, in place: the same exception, with
    its type and traceback, reads cleanly in a task log (delta-rs colours its error chains)."""
    if any(isinstance(a, str) and "\x1b[" in a for a in err.args):
        err.args = tuple(_ANSI.sub("", a) if isinstance(a, str) else a for a in err.args)


def store_refusal(text: str) -> tuple[Kind, str] | None:
    """``(kind, cause)`` when an error text shows the object store refusing a request, else None.

    Unknown credentials are ``authentication_failed``, a refused access ``authorization_failed``, a
    missing bucket ``bad_config``: none of them is mended by a retry. An unreachable store is not
    a refusal (it stays transient).
    """
    text = _ANSI.sub("", text)
    bucket = _STORE_BUCKET.search(text)
    where = next((g for g in bucket.groups() if g), None) if bucket else None
    on = f" (bucket {where!r})" if where else ""
    found = _STORE_CREDENTIALS.search(text)
    if found:
        return Kind.AUTHENTICATION_FAILED, f"{found.group('code')}{on}"
    found = _STORE_NO_BUCKET.search(text)
    if found:
        return Kind.BAD_CONFIG, f"no such bucket{on}"
    found = _STORE_DENIED.search(text)
    if found:
        code = found.group("code") or "HTTP 403 Forbidden, no code given"
        return Kind.AUTHORIZATION_FAILED, f"{code}{on}"
    return None


def store_unreachable(text: str) -> str | None:
    """Where and why, when an error text shows the object store not answering; else None."""
    text = _ANSI.sub("", text)
    if not _STORE_UNREACHABLE.search(text):
        return None
    endpoint = _STORE_ENDPOINT.search(text)
    why = _STORE_WHY.search(text)
    at = f" at {endpoint.group('at')}" if endpoint else ""
    return f"{at} did not answer" + (f" ({why.group(0)})" if why else "")


def store_failure(topic: str, text: str, conn_id: str | None = None) -> Failure | None:
    """The on-call failure of an object-store refusal in ``text`` (see :func:`store_refusal`), or of
    a store that does not answer (``store_unreachable``, transient); None for anything else.

    ``conn_id`` is the topic's ``storage_conn_id``, when the caller knows it: the message names it.
    """
    whose = f"connection {conn_id!r}" if conn_id else "the topic's storage connection (storage_conn_id)"
    unreachable = store_unreachable(text)
    if unreachable is not None:
        detail = f"topic {topic!r}: the object store{unreachable}, reached with {whose}"
        return failure(Kind.STORE_UNREACHABLE, detail)
    refused = store_refusal(text)
    if refused is None:
        return None
    kind, cause = refused
    if kind is Kind.AUTHENTICATION_FAILED:
        detail = f"the object store refused the credentials of {whose}: {cause}"
    elif kind is Kind.AUTHORIZATION_FAILED:
        detail = (
            f"the object store denied access to {whose}: {cause}; a permission the key lacks on the "
            "bucket, or a wrong key where the store does not say which"
        )
    else:
        detail = (
            f"the object store has {cause}: check the topic's path (or the lake root) in the catalog "
            f"and the endpoint of {whose}"
        )
    return failure(kind, f"topic {topic!r}: {detail}")


def exception_text(err: BaseException) -> str:
    """The exception's message and its JVM stack trace with every "Caused by".

    The message alone can hide the cause: a data-loss failure inside a Delta write surfaces as
    ``[TASK_WRITE_FAILED] Task failed while writing rows``, with Kafka's error only in the causes.
    pyspark keeps the JVM trace on the exception (``_stackTrace``, set by CapturedException).
    """
    return f"{err}\n{getattr(err, '_stackTrace', '') or ''}"


def classify_text(text: str) -> Kind:
    """The kind of failure an error text (a Spark exception, a log tail) shows; first match wins.

    Non-retryable kinds are checked first: a data-loss failure's trace also mentions timeouts.
    """
    for kind, pattern in (
        (Kind.OFFSETS_EXPIRED, _DATA_LOSS),
        (Kind.TLS_UNTRUSTED, _TLS_UNTRUSTED),
        (Kind.AUTHENTICATION_FAILED, _AUTHENTICATION),
        (Kind.AUTHORIZATION_FAILED, _AUTHORIZATION),
        (Kind.TOPIC_MISSING, _TOPIC_MISSING),
    ):
        if pattern.search(text):
            return kind
    if store_unreachable(text) is not None:
        return Kind.STORE_UNREACHABLE
    refused = store_refusal(text)
    if refused is not None:
        return refused[0]
    for kind, pattern in (
        (Kind.BAD_CONFIG, _BAD_CONFIG),
        (Kind.DISK_FULL, _DISK_FULL),
        (Kind.BROKER_UNREACHABLE, _BROKER),
        (Kind.DRIVER_LOST, _DRIVER_LOST),
    ):
        if pattern.search(text):
            return kind
    return Kind.UNKNOWN


# The file the failed write was for, when the trace names one (java.io and Python word it alike).
_DISK_FULL_WHERE = re.compile(r"(?:No space left on device|\[Errno 28\][^:]*):? *'?(/[^\s':]+)")

_KAFKA_CAUSE = re.compile(r"org\.apache\.kafka\.common\.errors\.\w+: [^\n]*?(?= SQLSTATE|\n|$)")


def _cause(text: str, limit: int = 300) -> str:
    """The sentence that says why: Kafka's own exception if there is one, else the first line."""
    text = _ANSI.sub("", text)
    kafka = _KAFKA_CAUSE.search(text)
    line = kafka.group(0) if kafka else next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    line = line.removeprefix("org.apache.kafka.common.errors.")
    return line if len(line) <= limit else line[: limit - 1] + "…"


_SECURITY_DETAIL = {
    Kind.TLS_UNTRUSTED: "the TLS handshake with Kafka failed",
    Kind.AUTHENTICATION_FAILED: "Kafka refused the connection's credentials",
    Kind.AUTHORIZATION_FAILED: "Kafka's ACLs deny the pipeline's principal",
}


def security_failure(topic: str, kind: Kind, cause: str) -> Failure:
    """The on-call message of a security failure the pre-flight saw (librdkafka's ``cause``)."""
    return failure(kind, f"topic {topic!r}: {_SECURITY_DETAIL[kind]}: {cause}")


def classify_spark_error(topic: str, text: str, storage_conn_id: str | None = None) -> Failure:
    """Classify the failure of the ingest job's streaming query from its exception text.

    ``storage_conn_id`` is named in the message of an object-store refusal.
    """
    kind = classify_text(text)
    refused = store_failure(topic, text, storage_conn_id)
    if refused is not None and refused.kind is kind:
        return refused
    if kind is Kind.OFFSETS_EXPIRED:
        reason = _DATA_LOSS_REASON.search(text)
        return failure(
            kind,
            f"topic {topic!r}: Kafka no longer holds offsets the table has not read yet (expired by "
            "retention, deleted, or the topic was re-created)" + (f": {reason.group(0)}" if reason else ""),
        )
    if kind is Kind.TOPIC_MISSING:
        return failure(kind, f"topic {topic!r} does not exist on the cluster")
    if kind is Kind.DISK_FULL:
        where = _DISK_FULL_WHERE.search(text)
        return failure(
            kind,
            f"topic {topic!r}: no space left on device" + (f" writing {where.group(1)}" if where else ""),
        )
    if kind is Kind.BROKER_UNREACHABLE:
        return failure(kind, f"topic {topic!r}: Kafka did not answer in time: {_cause(text)}")
    if kind in _SECURITY_DETAIL:
        return failure(kind, f"topic {topic!r}: {_SECURITY_DETAIL[kind]}: {_cause(text)}")
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
    if code in KIND_OF_EXIT:
        kind = KIND_OF_EXIT[code]
        return failure(kind, f"{job} for topic {topic!r} exited {code}")
    if code in _SIGNALS:
        detail = f"the {job} driver for topic {topic!r} was killed ({_SIGNALS[code]}, exit {code})"
        return failure(Kind.JOB_KILLED, detail)
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
