"""Which table locations the catalog takes."""

from __future__ import annotations

import pytest

from kafkalake.config.locations import is_object_store, unsupported


@pytest.mark.parametrize("location", ["/data/t", "file:///data/t", "s3a://bucket/raw/t", "S3A://bucket/t"])
def test_local_paths_and_s3a_are_supported(location):
    assert unsupported(location) is None


@pytest.mark.parametrize(
    ("location", "reason"),
    [
        ("abfss://c@account.dfs.core.windows.net/t", "abfss:// are not supported yet"),
        ("gs://bucket/t", "gs:// are not supported yet"),
        ("s3://bucket/t", "s3:// are not supported yet"),
        ("s3a:///t", "names no bucket"),
        ("s3a://bucket", "bucket's root"),
        ("s3a://bucket/", "bucket's root"),
    ],
)
def test_other_stores_are_refused_with_what_works(location, reason):
    message = unsupported(location)
    assert message is not None and reason in message


def test_only_s3a_is_an_object_store():
    assert is_object_store("s3a://b/t")
    assert not is_object_store("/data/s3a/t")
    assert not is_object_store("file:///data/t")
