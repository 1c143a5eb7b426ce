"""Object-store settings from a connection, and what each client (delta-rs, S3A, the job) gets."""

from __future__ import annotations

import os

import pytest

from kafkalake.lake import store_settings


def test_an_aws_connection_gives_every_client_the_same_endpoint_and_keys():
    settings = store_settings.from_connection(
        "minio",
        "AKIA1",
        "s3cr3t-value",
        {"endpoint_url": "http://127.0.0.1:9000", "region_name": "eu-west-1"},
    )

    assert settings.delta_options() == {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
        "AWS_REGION": "eu-west-1",
        "AWS_ACCESS_KEY_ID": "AKIA1",
        "AWS_SECRET_ACCESS_KEY": "s3cr3t-value",
        "AWS_ALLOW_HTTP": "true",
        "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false",
    }
    assert settings.hadoop_conf() == {
        "fs.s3a.endpoint": "http://127.0.0.1:9000",
        "fs.s3a.endpoint.region": "eu-west-1",
        "fs.s3a.path.style.access": "true",
        "fs.s3a.connection.ssl.enabled": "false",
        "fs.s3a.access.key": "AKIA1",
        "fs.s3a.secret.key": "s3cr3t-value",
    }
    assert settings.secrets() == ["s3cr3t-value"]
    assert "s3cr3t-value" not in repr(settings)


def test_a_session_token_switches_s3a_to_temporary_credentials():
    settings = store_settings.from_connection("aws", "AKIA1", "secret", {"aws_session_token": "tok"})

    assert settings.hadoop_conf()["fs.s3a.aws.credentials.provider"].endswith(
        "TemporaryAWSCredentialsProvider"
    )
    assert settings.delta_options()["AWS_SESSION_TOKEN"] == "tok"
    assert settings.secrets() == ["secret", "tok"]


def test_no_fields_means_the_environment_decides():
    settings = store_settings.from_connection("aws_default", None, None, {})
    assert settings == store_settings.StorageSettings()
    assert settings.delta_options() == {} and settings.hadoop_conf() == {}


@pytest.mark.parametrize(
    ("login", "password", "extra", "message"),
    [
        ("AKIA1", None, {}, "give both the access key"),
        (None, "secret", {}, "give both the access key"),
        (None, None, {"endpoint_url": "127.0.0.1:9000"}, r"must be an http\(s\) URL"),
    ],
)
def test_half_a_key_pair_or_an_endpoint_without_a_scheme_is_refused_naming_the_connection(
    login, password, extra, message
):
    with pytest.raises(ValueError, match=message) as refused:
        store_settings.from_connection("my_store", login, password, extra)
    assert "'my_store'" in str(refused.value)


def test_the_settings_file_is_deleted_once_read(tmp_path, monkeypatch):
    settings = store_settings.StorageSettings("http://127.0.0.1:1", "us-east-1", "AKIA1", "secret")
    path = tmp_path / "store_settings.json"
    path.write_text(settings.to_json())
    monkeypatch.setenv(store_settings.ENV_STORAGE_CONFIG_FILE, str(path))
    try:
        assert store_settings.use_file_from_environment() == settings
        assert not path.exists()
        assert store_settings.ENV_STORAGE_CONFIG_FILE not in os.environ
        # A second call (another session in the same job) keeps what it read.
        assert store_settings.use_file_from_environment() == settings
    finally:
        store_settings.use(store_settings.StorageSettings())


def test_only_object_store_locations_get_storage_options():
    assert store_settings.delta_options("/data/lake/bronze/t") is None
    assert store_settings.delta_options("file:///data/lake/bronze/t") is None
    assert store_settings.delta_options("s3a://bucket/bronze/t") == {}
