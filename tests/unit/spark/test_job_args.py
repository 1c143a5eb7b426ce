"""A Spark job's report of an object store that refused it or did not answer: the refusal met in
:func:`kafkalake.lake.store_refusal_kinds.named` (the JVM's trace read too), reported as a typed error."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkalake.config.catalog import load_catalog
from kafkalake.config.topic import TopicConfig
from kafkalake.core.errors import CheckpointLockedError, KafkalakeError, Kind, failure_of
from kafkalake.core.job_failures import exit_code, parse_failure_line
from kafkalake.lake import store_refusal_kinds
from kafkalake.spark.job_args import report, topic_from_args


@pytest.fixture
def topic(tmp_path: Path) -> TopicConfig:
    catalog = tmp_path / "topics.yaml"
    catalog.write_text(
        "defaults: {storage_conn_id: lake_s3}\n"
        "topics:\n  - {name: orders, freshness_sla: 1h, path: 's3a://bucket/raw/orders'}\n"
    )
    return load_catalog(catalog, tmp_path / "lake").topic("orders")


class JavaError(Exception):
    """What pyspark raises for a JVM failure: the JVM's trace kept beside the message."""

    def __init__(self, message: str, trace: str) -> None:
        super().__init__(message)
        self._stackTrace = trace


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (
            JavaError(
                "An error occurred while calling o41.save.",
                "java.nio.file.AccessDeniedException: s3a://bucket/raw/orders/_delta_log: listObjects() "
                "on s3a://bucket/raw/orders/_delta_log: software.amazon.awssdk.services.s3.model."
                "S3Exception: Forbidden (Service: S3, Status Code: 403) (SDK Attempt Count: 1)"
                ":InvalidAccessKeyId",
            ),
            Kind.AUTHENTICATION_FAILED,
        ),
        (
            OSError("When listing objects under key 'raw/' in bucket 'bucket': AWS Error NETWORK_CONNECTION"),
            Kind.STORE_UNREACHABLE,
        ),
    ],
    ids=["S3A in the JVM trace", "pyarrow"],
)
def test_a_store_failure_is_reported_with_its_kind_and_exit_code(topic, error, kind, capsys):
    with pytest.raises(KafkalakeError) as raised:
        with store_refusal_kinds.named(topic.name, topic.storage_conn_id):
            raise error
    assert report(failure_of(raised.value)) == exit_code(kind)
    reported = parse_failure_line(capsys.readouterr().err)
    assert reported is not None and reported.kind is kind
    assert "topic 'orders'" in reported.message and "connection 'lake_s3'" in reported.message


@pytest.mark.parametrize(
    "error", [ValueError("a bug"), CheckpointLockedError("[checkpoint_locked] held")], ids=["bug", "typed"]
)
def test_anything_else_passes_through(topic, error):
    with pytest.raises(type(error)) as raised:
        with store_refusal_kinds.named(topic.name, topic.storage_conn_id):
            raise error
    assert raised.value is error


def test_a_job_runs_for_its_topic_whatever_another_topics_entry_says(tmp_path, monkeypatch):
    """One broken entry costs its own topic's DAG (lenient DAG processor), not every topic's jobs."""
    catalog = tmp_path / "topics.yaml"
    catalog.write_text(
        "topics:\n"
        "  - {name: orders, freshness_sla: 15m}\n"
        "  - {name: payments, freshness_sla: 15m, priority: 0}\n"
    )
    monkeypatch.setenv("KAFKALAKE_CATALOG", str(catalog))
    monkeypatch.setenv("KAFKALAKE_LAKE_ROOT", str(tmp_path / "lake"))
    assert topic_from_args("A job.", ["--topic", "orders"]).name == "orders"
