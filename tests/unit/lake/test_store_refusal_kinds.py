"""A refusal of the object store, met by a reader in this process, raised as its failure kind."""

from __future__ import annotations

import pytest

from kafkalake.core.errors import (
    AuthenticationFailedError,
    BadConfigError,
    CheckpointLockedError,
    NonRetryableError,
    StoreUnreachableError,
)
from kafkalake.lake import store_refusal_kinds

PYARROW_SIGNATURE = (
    "When listing objects under key 't1/' in bucket 'lake': AWS Error SIGNATURE_DOES_NOT_MATCH during "
    "ListObjectsV2 operation: The request signature we calculated does not match the signature you provided."
)


def test_a_refused_key_becomes_authentication_failed_naming_the_connection():
    with pytest.raises(AuthenticationFailedError) as raised:
        with store_refusal_kinds.named("orders", "lake_s3"):
            raise OSError(PYARROW_SIGNATURE)
    message = str(raised.value)
    assert message.startswith(
        "[authentication_failed] topic 'orders': the object store refused the credentials"
    )
    assert "connection 'lake_s3'" in message and "SIGNATURE_DOES_NOT_MATCH (bucket 'lake')" in message
    assert isinstance(raised.value.__cause__, OSError)


def test_a_missing_bucket_is_bad_config():
    with pytest.raises(BadConfigError, match="no such bucket"):
        with store_refusal_kinds.named("orders", None):
            raise OSError("Generic S3 error: <Error><Code>NoSuchBucket</Code></Error>")


def test_a_store_that_does_not_answer_is_its_transient_kind():
    with pytest.raises(StoreUnreachableError, match=r"the object store at 127\.0\.0\.1:9 did not answer"):
        with store_refusal_kinds.named("orders", "lake_s3"):
            raise OSError(
                "Generic S3 error: Error performing GET http://127.0.0.1:9/lake?list-type=2 - HTTP "
                "error: error sending request: tcp connect error: Connection refused (os error 111)"
            )


@pytest.mark.parametrize(
    "error",
    [
        FileNotFoundError("no such file"),
        CheckpointLockedError("[checkpoint_locked] held by pid 7"),
    ],
    ids=["other OSError", "a typed error"],
)
def test_anything_else_passes_through_unchanged(error):
    with pytest.raises(type(error)) as raised:
        with store_refusal_kinds.named("orders", "lake_s3"):
            raise error
    assert raised.value is error
    assert not isinstance(raised.value, NonRetryableError)


def test_an_unknown_error_loses_only_its_colour_escapes():
    # delta-rs's shape: a coloured error chain in an OSError's message.
    error = OSError("\x1b[1m\x1b[31mGeneric error\x1b[0m: \x1b[33mcaused by\x1b[0m: something new")
    with pytest.raises(OSError) as raised:
        with store_refusal_kinds.named("orders", "lake_s3"):
            raise error
    assert raised.value is error
    assert str(raised.value) == "Generic error: caused by: something new"
