"""Failure classification: the job's one-line report and the Airflow side's reading of it.

The DAGs' retry policy, which needs Airflow, is tested in
tests/unit/airflow/test_dag_spark_tasks.py. The Spark texts below are trimmed from real runs of
jobs/ingest_topic.py against a local broker (Spark 4.2.0, kafka-clients 3.9.2): offsets deleted
past the checkpoint with the AdminClient's delete_records, and the broker stopped during a run.
"""

from __future__ import annotations

import pytest

from kafkalake.core import errors
from kafkalake.core.errors import (
    BadConfigError,
    BrokerUnreachableError,
    DriverLostError,
    JobKilledError,
    Kind,
    NonRetryableError,
    OffsetsExpiredError,
    failure,
)
from kafkalake.core.job_failures import (
    classify_job_failure,
    classify_spark_error,
    classify_text,
    exit_code,
    failure_line,
    offsets_expired_message,
    parse_failure_line,
    store_failure,
)

DATA_LOSS = """\
[STREAM_FAILED] Query [id = 3b4e410f, runId = be2b14f7] terminated with exception: Some data may have \
been lost because they are not available in Kafka any more;
either the data was aged out by Kafka or the topic may have been deleted before all the data in the
topic was processed.
If you don't want your streaming query to fail on such cases, set the source option failOnDataLoss to false.
Reason: Could not read records in offset [350, 500) for topic partition x1-1
with consumer group spark-kafka-source-cf4bf308--999086619-executor. SQLSTATE: XXKST
=== Streaming Query ===
Current Committed Offsets: {KafkaV2[Subscribe[x1]]: {"x1":{"0":350,"1":350}}}
"""

# The same loss met inside the Delta write: the message hides it, the JVM trace's causes hold it.
DATA_LOSS_IN_WRITE = """\
[STREAM_FAILED] Query [id = 448906e6, runId = d8f659ae] terminated with exception: [TASK_WRITE_FAILED] \
Task failed while writing rows to file:/lake/bronze/it_expired. SQLSTATE: 58030
org.apache.spark.SparkException: [TASK_WRITE_FAILED] Task failed while writing rows to file:/lake/x.
\tat org.apache.spark.sql.errors.QueryExecutionErrors$.taskFailedWhileWritingRowsError(...)
Caused by: org.apache.spark.sql.kafka010.KafkaIllegalStateException: Some data may have been lost \
because they are not available in Kafka any more;
either the data was aged out by Kafka or the topic may have been deleted before all the data in the
topic was processed.
If you don't want your streaming query to fail on such cases, set the source option failOnDataLoss to false.
Reason: Could not read records in offset [100, 200) for topic partition it-expired-0
with consumer group spark-kafka-source-29887e23--1473057708-executor.
Caused by: org.apache.kafka.clients.consumer.OffsetOutOfRangeException: Fetch position \
FetchPosition{offset=100, offsetEpoch=Optional.empty} is out of range for partition it-expired-0
"""

BROKER_DOWN_EXECUTOR = """\
[STREAM_FAILED] Query [id = 3b4e410f, runId = fa6d918f] terminated with exception: Job aborted due to \
stage failure: Task 1 in stage 6.0 failed 1 times, most recent failure: Lost task 1.0 in stage 6.0 (TID 6) \
(localhost executor driver): org.apache.kafka.common.errors.TimeoutException: Timeout of 20000ms expired \
before the position for partition x1-1 could be determined
Driver stacktrace: SQLSTATE: XXKST
"""

BROKER_DOWN_DRIVER = """\
[STREAM_FAILED] Query [id = 3b4e410f, runId = 06c6d25c] terminated with exception: \
org.apache.kafka.common.errors.TimeoutException: Timed out waiting for a node assignment. Call: listNodes \
SQLSTATE: XXKST
=== Streaming Query ===
"""


def submit_error(code: int, *tail: str) -> str:
    """The text of the Spark provider's AirflowException for a failed spark-submit."""
    text = (
        f"Cannot execute: spark-submit --master local[*] ingest_topic.py --topic x1. Error code is: {code}."
    )
    return text + ("\nLast spark-submit output:\n" + "\n".join(tail) if tail else "")


# ---------------------------------------------------------------------------------------------
# the job side


def test_spark_data_loss_is_offsets_expired_with_the_lost_range_and_the_action():
    failed = classify_spark_error("x1", DATA_LOSS)
    assert failed.kind is Kind.OFFSETS_EXPIRED
    assert not failed.retryable
    assert "Could not read records in offset [350, 500) for topic partition x1-1" in failed.message
    assert "cannot be recovered" in failed.message
    assert "fail_on_data_loss: false" in failed.message
    assert "Do NOT delete or move the checkpoint" in failed.message
    assert isinstance(failed.error(), OffsetsExpiredError)


@pytest.mark.parametrize(
    ("text", "cause"),
    [
        (
            BROKER_DOWN_EXECUTOR,
            "TimeoutException: Timeout of 20000ms expired before the position for partition x1-1",
        ),
        (BROKER_DOWN_DRIVER, "TimeoutException: Timed out waiting for a node assignment. Call: listNodes"),
    ],
    ids=["executor-fetch", "driver-offsets"],
)
def test_kafka_timeouts_are_broker_unreachable_and_retryable(text, cause):
    failed = classify_spark_error("x1", text)
    assert failed.kind is Kind.BROKER_UNREACHABLE
    assert failed.retryable
    assert cause in failed.message
    assert "retrying with backoff" in failed.message
    assert isinstance(failed.error(), BrokerUnreachableError)


def test_data_loss_found_in_the_causes_of_a_write_failure():
    failed = classify_spark_error("it-expired", DATA_LOSS_IN_WRITE)
    assert failed.kind is Kind.OFFSETS_EXPIRED
    assert "Could not read records in offset [100, 200) for topic partition it-expired-0" in failed.message


def test_data_loss_wins_over_a_timeout_in_the_same_trace():
    assert classify_text(BROKER_DOWN_DRIVER + DATA_LOSS) is Kind.OFFSETS_EXPIRED


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        (
            "org.apache.kafka.common.errors.UnknownTopicOrPartitionException: This server does not host",
            Kind.TOPIC_MISSING,
        ),
        (
            "org.apache.kafka.common.config.ConfigException: Invalid value foo for configuration acks",
            Kind.BAD_CONFIG,
        ),
        ("java.lang.OutOfMemoryError: Java heap space", Kind.DRIVER_LOST),
        ("py4j.protocol.Py4JNetworkError: Answer from Java side is empty", Kind.DRIVER_LOST),
        ("[DELTA_CONCURRENT_APPEND] something new", Kind.UNKNOWN),
    ],
)
def test_classify_text(text, kind):
    assert classify_text(text) is kind


def test_failure_line_round_trips_through_the_log_tail():
    failed = classify_spark_error("x1", DATA_LOSS)
    line = failure_line(failed)
    assert line.startswith("KAFKALAKE_FAILURE kind=offsets_expired [offsets_expired] topic 'x1'")
    assert "\n" not in line
    assert parse_failure_line(f"some log\n{line}\nmore log") == failed


def test_the_last_failure_line_wins():
    first = failure_line(failure(Kind.BROKER_UNREACHABLE, "first"))
    last = failure_line(failure(Kind.BAD_CONFIG, "last"))
    assert parse_failure_line(f"{first}\n{last}").kind is Kind.BAD_CONFIG


def test_an_unknown_kind_in_a_line_is_unknown_and_retryable():
    parsed = parse_failure_line("KAFKALAKE_FAILURE kind=from_the_future something")
    assert parsed is not None and parsed.kind is Kind.UNKNOWN and parsed.retryable


def test_no_failure_line():
    assert parse_failure_line("INFO all good\nKAFKALAKE_FAILURE without a kind") is None


def test_every_kind_raises_its_typed_error():
    for kind in Kind:
        error = failure(kind, "x").error()
        assert isinstance(error, NonRetryableError) == (kind in errors.NON_RETRYABLE), kind
        assert error.kind is kind or kind is Kind.UNKNOWN


def test_exit_codes_are_distinct_and_leave_python_and_signals_alone():
    codes = list(errors.EXIT_CODES.values())
    assert len(set(codes)) == len(codes)
    assert all(1 < code < 126 for code in codes)
    assert exit_code(Kind.OFFSETS_EXPIRED) == 65
    assert exit_code(Kind.UNKNOWN) == 1


# ---------------------------------------------------------------------------------------------
# the Airflow side: spark-submit's error text


def test_the_jobs_own_line_is_trusted_first():
    line = failure_line(classify_spark_error("x1", DATA_LOSS))
    failed = classify_job_failure("ingest_topic.py", "x1", submit_error(65, "WARN shutdown", line))
    assert failed.kind is Kind.OFFSETS_EXPIRED
    assert failed.message == parse_failure_line(line).message


def test_the_exit_code_alone_classifies_when_the_line_was_cut_off():
    failed = classify_job_failure("ingest_topic.py", "x1", submit_error(78))
    assert failed.kind is Kind.BAD_CONFIG
    assert "ingest_topic.py for topic 'x1' exited 78" in failed.message
    assert isinstance(failed.error(), BadConfigError)


@pytest.mark.parametrize("code", [-9, 137, -15, 143])
def test_a_killed_driver_is_transient(code):
    failed = classify_job_failure("ingest_topic.py", "x1", submit_error(code, "INFO batch 3"))
    assert failed.kind is Kind.JOB_KILLED
    assert failed.retryable
    assert "was killed" in failed.message
    # A kind of its own, still a lost driver to whatever catches those.
    assert isinstance(failed.error(), JobKilledError) and isinstance(failed.error(), DriverLostError)


def test_without_the_jobs_line_a_spark_data_loss_in_the_tail_still_stops_retries():
    failed = classify_job_failure("ingest_topic.py", "x1", submit_error(1, *DATA_LOSS.splitlines()))
    assert failed.kind is Kind.OFFSETS_EXPIRED


def test_without_the_jobs_line_other_non_retryable_patterns_are_only_retried():
    # A pattern seen in a log tail is a hint, not the job's verdict: keep retrying.
    tail = "org.apache.kafka.common.errors.UnknownTopicOrPartitionException: gone"
    failed = classify_job_failure("register_table.py", "x1", submit_error(1, tail))
    assert failed.kind is Kind.UNKNOWN
    assert failed.retryable


def test_the_command_line_is_not_searched_for_patterns():
    text = "Cannot execute: spark-submit --conf x=TimeoutException job.py. Error code is: 1."
    assert classify_job_failure("job.py", "x1", text).kind is Kind.UNKNOWN


def test_broker_timeouts_in_the_tail_are_broker_unreachable():
    failed = classify_job_failure("ingest_topic.py", "x1", submit_error(1, *BROKER_DOWN_DRIVER.splitlines()))
    assert failed.kind is Kind.BROKER_UNREACHABLE


# ---------------------------------------------------------------------------------------------
# the pre-flight's message


def test_offsets_expired_message_lists_partitions_ranges_and_counts():
    message = offsets_expired_message("orders", {2: (30, 31), 0: (10, 25)})
    assert message.startswith("[offsets_expired] topic 'orders': 16 records expired in Kafka")
    assert "partition 0: offsets 10..24 (15 records), partition 2: offsets 30..30 (1 records)" in message
    assert "NOT retrying" in message
    assert "fail_on_data_loss: false" in message


# ---------------------------------------------------------------------------------------------
# security failures: the Java client's words (the job) and librdkafka's (the pre-flight)

SASL_JAVA = (
    "[STREAM_FAILED] Query [id = 1] terminated with exception: ...\n"
    "Caused by: org.apache.kafka.common.errors.SaslAuthenticationException: Authentication failed "
    "during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512"
)
TLS_JAVA = (
    "org.apache.kafka.common.errors.SslAuthenticationException: SSL handshake failed\n"
    "Caused by: javax.net.ssl.SSLHandshakeException: PKIX path building failed: "
    "sun.security.provider.certpath.SunCertPathBuilderException: unable to find valid certification "
    "path to requested target"
)
ACL_JAVA = (
    "org.apache.kafka.common.errors.TopicAuthorizationException: "
    "Not authorized to access topics: [sec-denied]"
)


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        (SASL_JAVA, Kind.AUTHENTICATION_FAILED),
        (TLS_JAVA, Kind.TLS_UNTRUSTED),
        (ACL_JAVA, Kind.AUTHORIZATION_FAILED),
        (
            "org.apache.kafka.common.errors.GroupAuthorizationException: Not authorized to access group: g",
            Kind.AUTHORIZATION_FAILED,
        ),
        ("javax.net.ssl.SSLHandshakeException: Received fatal alert: bad_certificate", Kind.TLS_UNTRUSTED),
        (
            "KafkaError{code=_AUTHENTICATION} sasl_ssl://b:9093/bootstrap: SASL authentication error: "
            "Authentication failed during authentication due to invalid credentials",
            Kind.AUTHENTICATION_FAILED,
        ),
        (
            "KafkaError{code=_SSL} SSL handshake failed: error:0A000086:SSL routines::"
            "certificate verify failed",
            Kind.TLS_UNTRUSTED,
        ),
        (
            "KafkaError{code=_TRANSPORT} ssl://b:9094/bootstrap: Receive failed: error:0A000412:SSL "
            "routines::ssl/tls alert bad certificate: SSL alert number 42",
            Kind.TLS_UNTRUSTED,
        ),
        (
            'KafkaError{code=TOPIC_AUTHORIZATION_FAILED,val=29,str="Broker: Topic authorization failed"}',
            Kind.AUTHORIZATION_FAILED,
        ),
        (
            "KafkaError{code=_TRANSPORT} Connect to ipv4#127.0.0.1:9093 failed: Connection refused",
            Kind.BROKER_UNREACHABLE,
        ),
    ],
)
def test_security_failures_are_their_own_non_retryable_kinds(text, kind):
    assert classify_text(text) is kind
    failed = classify_spark_error("orders", text)
    assert failed.kind is kind
    if kind is not Kind.BROKER_UNREACHABLE:
        assert not failed.retryable
        assert f"See RUNBOOK.md, section {kind}." in failed.message
        assert isinstance(failed.error(), NonRetryableError)


def test_the_job_s_security_failure_line_and_exit_code_reach_airflow():
    line = failure_line(classify_spark_error("orders", SASL_JAVA))
    assert exit_code(Kind.AUTHENTICATION_FAILED) == 79
    failed = classify_job_failure("ingest_topic.py", "orders", submit_error(79, "WARN x", line))
    assert failed.kind is Kind.AUTHENTICATION_FAILED
    assert "invalid credentials" in failed.message
    # The exit code alone, when the line was cut off.
    for kind, code in ((Kind.AUTHORIZATION_FAILED, 77), (Kind.TLS_UNTRUSTED, 76)):
        assert classify_job_failure("ingest_topic.py", "orders", submit_error(code, "x")).kind is kind


@pytest.mark.parametrize(
    ("text", "where"),
    [
        (
            "StreamingQueryException: [TASK_WRITE_FAILED] Task failed while writing rows\n"
            "Caused by: java.io.IOException: No space left on device\n\tat java.base/java.io.Out",
            None,
        ),
        (
            "PythonException: An exception was thrown from the Python worker\nOSError: [Errno 28] No space "
            "left on device: '/lake/bronze/orders/_kafkalake/schemas/v3.json.tmp'",
            "/lake/bronze/orders/_kafkalake/schemas/v3.json.tmp",
        ),
    ],
)
def test_a_full_disk_is_its_own_non_retryable_kind_naming_the_file(text, where):
    failed = classify_spark_error("orders", text)
    assert failed.kind is Kind.DISK_FULL and Kind.DISK_FULL in errors.NON_RETRYABLE
    assert failed.message.startswith("[disk_full] topic 'orders': no space left on device")
    assert (
        (f"writing {where}" in failed.message) if where else ("writing" not in failed.message.split(".")[0])
    )
    assert "Do not delete the checkpoint" in failed.message
    assert exit_code(Kind.DISK_FULL) == 71
    # A full disk's trace mentions timeouts too (a stalled write): the disk is the cause.
    assert classify_text(text + "\nTimeoutException: Timed out waiting for a node") is Kind.DISK_FULL


# The object store refusing a request, as each reader met it against a real s3proxy (a wrong
# secret key, an unknown access key, a bucket that does not exist): delta-rs (colours included),
# pyarrow, Hadoop's S3A in Spark (a HEAD request's 403 carries no code).
DELTA_RS_SIGNATURE = (
    "Generic S3 error\n  \x1b[31m↳\x1b[0m Error performing list request\n   \x1b[31m↳\x1b[0m Error "
    "performing GET http://127.0.0.1:48077/lake?list-type=2&prefix=t1%2F_delta_log%2F in 6.48ms - "
    "Server returned non-2xx status code\n    \x1b[31m↳\x1b[0m 403 Forbidden\n     \x1b[31m↳\x1b[0m "
    "<?xml version='1.0' encoding='UTF-8'?><Error><Code>SignatureDoesNotMatch</Code><Message>The "
    "request signature we calculated does not match the signature you provided.</Message></Error>"
)
PYARROW_UNKNOWN_KEY = (
    "When listing objects under key 't1/_kafkalake/checkpoint/offsets/' in bucket 'lake': AWS Error "
    "INVALID_ACCESS_KEY_ID during ListObjectsV2 operation: Forbidden (Request ID: B33E646A820C627D)"
)
S3A_HEAD_FORBIDDEN = (
    "An error occurred while calling o68.load.\n: java.nio.file.AccessDeniedException: "
    "s3a://lake/t2/_delta_log: getFileStatus on s3a://lake/t2/_delta_log: software.amazon.awssdk."
    "services.s3.model.S3Exception: Forbidden (Service: S3, Status Code: 403, Request ID: "
    "C16F7890CA56875A):null\n\tat org.apache.hadoop.fs.s3a.S3AUtils.translateException(S3AUtils.java:277)"
)
S3A_LIST_SIGNATURE = (
    "java.nio.file.AccessDeniedException: s3a://lake/t2/_delta_log: listObjects() on s3a://lake/t2/"
    "_delta_log: software.amazon.awssdk.services.s3.model.S3Exception: The request signature we "
    "calculated does not match the signature you provided. Check your key and signing method. "
    "(Service: S3, Status Code: 403, Request ID: 7D167C3DF16BF0C3) (SDK Attempt Count: 1)"
    ":SignatureDoesNotMatch"
)
S3A_NO_BUCKET = (
    "org.apache.hadoop.fs.s3a.UnknownStoreException: `s3a://nosuchbucket/t2/_delta_log': getFileStatus "
    "on s3a://nosuchbucket/t2/_delta_log: software.amazon.awssdk.services.s3.model.NoSuchBucketException: "
    "The specified bucket does not exist (Service: S3, Status Code: 404, Request ID: 632448715CA7E11B)"
)
BOTO_ACCESS_DENIED = "An error occurred (AccessDenied) when calling the PutObject operation: Access Denied"


@pytest.mark.parametrize(
    ("text", "kind", "says"),
    [
        (DELTA_RS_SIGNATURE, Kind.AUTHENTICATION_FAILED, "SignatureDoesNotMatch (bucket 'lake')"),
        (PYARROW_UNKNOWN_KEY, Kind.AUTHENTICATION_FAILED, "INVALID_ACCESS_KEY_ID (bucket 'lake')"),
        (S3A_LIST_SIGNATURE, Kind.AUTHENTICATION_FAILED, "SignatureDoesNotMatch (bucket 'lake')"),
        (S3A_HEAD_FORBIDDEN, Kind.AUTHORIZATION_FAILED, "HTTP 403 Forbidden, no code given (bucket 'lake')"),
        (BOTO_ACCESS_DENIED, Kind.AUTHORIZATION_FAILED, "AccessDenied"),
        (S3A_NO_BUCKET, Kind.BAD_CONFIG, "no such bucket (bucket 'nosuchbucket')"),
        (
            "botocore.exceptions.ClientError: An error occurred (ExpiredToken) when calling the "
            "PutObject operation: The provided token has expired.",
            Kind.AUTHENTICATION_FAILED,
            "ExpiredToken",
        ),
    ],
    ids=["delta-rs signature", "pyarrow key", "S3A signature", "S3A HEAD 403", "boto3", "bucket", "token"],
)
def test_object_store_refusals_fail_at_once_naming_the_connection(text, kind, says):
    refused = store_failure("orders", text, "lake_s3")
    assert refused is not None and refused.kind is kind, refused
    assert not refused.retryable and isinstance(refused.error(), NonRetryableError)
    assert says in refused.message
    assert "topic 'orders'" in refused.message and "connection 'lake_s3'" in refused.message
    assert "object store" in refused.message and "\x1b" not in refused.message
    assert f"See RUNBOOK.md, section {kind}." in refused.message
    # The ingest job meets the same in Spark's trace: the same kind and message, not Kafka's words.
    assert classify_text(text) is kind
    assert classify_spark_error("orders", text, "lake_s3") == refused
    assert "Kafka" not in classify_spark_error("orders", text).message.split(" (NOT retrying")[0]


# The object store not answering (s3proxy stopped), as each reader met it.
DELTA_RS_DOWN = (
    "Generic S3 error\n  \x1b[31m↳\x1b[0m Error performing list request\n   \x1b[31m↳\x1b[0m Error "
    "performing GET http://127.0.0.1:57717/lake?list-type=2&prefix=t1%2F_delta_log%2F in 3.27s, after 10 "
    "retries, max_retries\n    \x1b[31m↳\x1b[0m 10, retry_timeout\n     \x1b[31m↳\x1b[0m 180s  - HTTP "
    "error\n      \x1b[31m↳\x1b[0m error sending request\n       \x1b[31m↳\x1b[0m client error "
    "(Connect)\n        \x1b[31m↳\x1b[0m tcp connect error\n         \x1b[31m↳\x1b[0m Connection refused "
    "(os error 111)\n"
)
PYARROW_DOWN = (
    "When listing objects under key 't1/_kafkalake/checkpoint/offsets/' in bucket 'lake': AWS Error "
    "NETWORK_CONNECTION during ListObjectsV2 operation: curlCode: 7, Could not connect to server; "
    "Details: Failed to connect to 127.0.0.1:33451 after 0 ms: Could not connect to server"
)
S3A_DOWN = (
    "An error occurred while calling o68.load.\n: java.net.ConnectException: getFileStatus on "
    "s3a://lake/t2/_delta_log: software.amazon.awssdk.core.exception.SdkClientException: Unable to "
    "execute HTTP request: Connect to 127.0.0.1:57717 [/127.0.0.1] failed: Connection refused (SDK "
    "Attempt Count: 6): Connection refused\n\tat java.base/jdk.internal.reflect.NativeConstructor"
)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (DELTA_RS_DOWN, "the object store at 127.0.0.1:57717 did not answer (Connection refused)"),
        (PYARROW_DOWN, "the object store at 127.0.0.1:33451 did not answer (Could not connect to server)"),
        (S3A_DOWN, "the object store at 127.0.0.1:57717 did not answer (Connection refused)"),
    ],
    ids=["delta-rs", "pyarrow", "S3A"],
)
def test_an_object_store_that_does_not_answer_is_transient_and_not_called_kafka(text, says):
    failed = store_failure("orders", text, "lake_s3")
    assert failed is not None and failed.kind is Kind.STORE_UNREACHABLE and failed.retryable
    assert says in failed.message and "connection 'lake_s3'" in failed.message, failed.message
    assert "\x1b" not in failed.message
    assert isinstance(failed.error(), errors.StoreUnreachableError)
    # Spark's trace also says "Connection refused", which alone would be Kafka's.
    assert classify_text(text) is Kind.STORE_UNREACHABLE
    assert classify_spark_error("orders", text, "lake_s3") == failed
    assert exit_code(Kind.STORE_UNREACHABLE) == 81


@pytest.mark.parametrize(
    "text",
    [
        # A local lake's permission problem is not the object store's.
        "java.nio.file.AccessDeniedException: /lake/bronze/orders/_delta_log/00000.json",
        "PermissionError: [Errno 13] Permission denied: '/lake/bronze/orders'",
        # A wrong Airflow fernet key while a connection is read: Fernet's InvalidToken, not S3's.
        "cryptography.fernet.InvalidToken",
        "airflow.exceptions.AirflowException: Could not decrypt: InvalidToken",
        # An OAuth token endpoint's 403 for Kafka's OAUTHBEARER.
        "KafkaError{code=_AUTHENTICATION} Failed to acquire SASL OAUTHBEARER token: HTTP 403 Forbidden",
        # Kafka's own refusals keep their words.
        SASL_JAVA,
        ACL_JAVA,
    ],
)
def test_what_is_not_an_object_store_refusal(text):
    assert store_failure("orders", text, "lake_s3") is None


def test_without_a_connection_the_message_points_at_the_topic_s_setting():
    refused = store_failure("orders", PYARROW_UNKNOWN_KEY)
    assert refused is not None
    assert "the topic's storage connection (storage_conn_id)" in refused.message


def test_an_unknown_error_in_colour_reaches_the_failure_line_without_the_escapes():
    # delta-rs colours its error chain for a terminal; a task log would show the escapes as noise.
    text = (
        "\x1b[31mGeneric DeltaTable error\x1b[0m: \x1b[1mVersion mismatch\x1b[0m\n  \x1b[31m↳\x1b[0m detail"
    )
    failed = classify_spark_error("orders", text)
    assert failed.kind is Kind.UNKNOWN
    assert "topic 'orders': Generic DeltaTable error: Version mismatch (" in failed.message
    assert "\x1b" not in failure_line(failed)


def test_a_typed_error_s_failure_keeps_its_message_and_gains_the_advice_it_lacks():
    made = failure(Kind.BAD_CONFIG, "topic 'orders': no such bucket")
    assert errors.failure_of(BadConfigError(made.message)) == made
    bare = errors.failure_of(BadConfigError("topic 'orders': no such bucket"))
    assert bare == made
