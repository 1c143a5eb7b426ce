"""Spark's shared secret: a 0600 properties file, refused when it could not protect the cluster."""

from __future__ import annotations

import pytest

from kafkalake.core.errors import BadConfigError
from kafkalake.launch import spark_auth


def test_a_written_file_is_private_and_turns_authentication_and_encryption_on(tmp_path):
    path = spark_auth.write_auth_file(tmp_path / "auth.properties")
    assert path.stat().st_mode & 0o777 == 0o600
    settings = spark_auth.read_properties(path.read_text())
    assert settings["spark.authenticate"] == "true"
    assert settings["spark.network.crypto.enabled"] == "true"
    assert len(settings[spark_auth.SECRET_KEY]) >= 32
    spark_auth.check_auth_file(path)
    # Two clusters never share a secret by accident.
    other = spark_auth.write_auth_file(tmp_path / "other.properties")
    assert (
        spark_auth.read_properties(other.read_text())[spark_auth.SECRET_KEY]
        != settings[spark_auth.SECRET_KEY]
    )


@pytest.mark.parametrize(
    ("text", "mode", "said"),
    [
        ("spark.authenticate.secret=change-me-spark\n", 0o600, "placeholder"),
        ("spark.authenticate.secret=\n", 0o600, "no value"),
        ("spark.authenticate=true\n", 0o600, "no value"),
        ("spark.authenticate.secret=a-real-one\n", 0o644, "chmod 600"),
    ],
)
def test_an_unusable_file_is_refused_by_name_not_by_value(tmp_path, monkeypatch, text, mode, said):
    path = tmp_path / "auth.properties"
    path.write_text(text)
    path.chmod(mode)
    monkeypatch.setenv(spark_auth.ENV_SPARK_AUTH_FILE, str(path))
    with pytest.raises(BadConfigError, match=said) as raised:
        spark_auth.auth_file()
    assert str(path) in str(raised.value)
    assert "change-me-spark" not in str(raised.value) and "a-real-one" not in str(raised.value)


def test_a_missing_file_is_refused_and_unset_means_no_authentication(tmp_path, monkeypatch):
    monkeypatch.delenv(spark_auth.ENV_SPARK_AUTH_FILE, raising=False)
    assert spark_auth.auth_file() is None
    monkeypatch.setenv(spark_auth.ENV_SPARK_AUTH_FILE, str(tmp_path / "nowhere.properties"))
    with pytest.raises(BadConfigError, match="cannot be read"):
        spark_auth.auth_file()
