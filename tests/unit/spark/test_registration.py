import pytest

from kafkalake.spark.registration import _normalise


@pytest.mark.parametrize(
    "catalog",
    ["/data/t", "/data/t/", "file:/data/t", "file:///data/t", "file:///data/t/", "file://localhost/data/t"],
)
def test_a_local_location_matches_the_metastore_spelling(catalog):
    # DESCRIBE DETAIL gives file:/data/t for a table created at file:///data/t: a second registration
    # (a cleared task, a dead-letter table appearing later) must not read that as another location.
    assert _normalise(catalog) == _normalise("file:/data/t") == "/data/t"


def test_other_locations_stay_apart():
    assert _normalise("s3a://bucket/data/t/") == "s3a://bucket/data/t"
    assert _normalise("/data/t") != _normalise("/data/u")
    assert _normalise("file://otherhost/data/t") != "/data/t"
