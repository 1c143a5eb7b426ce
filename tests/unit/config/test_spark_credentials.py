"""Which Spark settings of a topic are credentials (the catalog refuses them on the command line)."""

from __future__ import annotations

import pytest

from kafkalake.config.spark_credentials import credential_settings


@pytest.mark.parametrize(
    "key",
    [
        "spark.hadoop.fs.s3a.access.key",
        "spark.hadoop.fs.s3a.secret.key",
        "spark.hadoop.fs.s3a.session.token",
        "spark.hadoop.fs.azure.account.key.acct.dfs.core.windows.net",
        "spark.hadoop.fs.azure.account.oauth2.client.secret",
        "spark.hadoop.fs.azure.sas.fixed.token.acct.dfs.core.windows.net",
        "spark.hadoop.fs.gs.auth.service.account.private.key",
        "spark.hadoop.javax.jdo.option.ConnectionPassword",
        "spark.kafka.sasl.jaas.config",
        "spark.hadoop.fs.s3a.server-side-encryption.key",
        "spark.executorEnv.AWS_SECRET_ACCESS_KEY",
    ],
)
def test_credential_settings_are_found(key):
    assert credential_settings([key, "spark.executor.memory"]) == [key]


@pytest.mark.parametrize(
    "key",
    [
        "spark.hadoop.fs.s3a.aws.credentials.provider",
        "spark.hadoop.hadoop.security.credential.provider.path",
        "spark.hadoop.fs.azure.account.oauth.provider.type",
        "spark.hadoop.fs.azure.sas.token.provider.type",
        "spark.security.credentials.hive.enabled",
        "spark.redaction.regex",
        "spark.sql.shuffle.partitions",
    ],
)
def test_providers_switches_and_paths_are_not_credentials(key):
    assert credential_settings([key]) == []


@pytest.mark.parametrize(
    "options",
    [
        "-Dfs.s3a.secret.key=abc",
        "-XX:+UseG1GC -Dfs.s3a.access.key=AKIA -Dx=1",
        "-Djavax.net.ssl.keyStorePassword=changeit",
        '"-Dspark.hadoop.fs.azure.account.key.acct.dfs.core.windows.net=k"',
        "-Dsasl.jaas.config",
    ],
)
def test_java_options_that_set_a_credential_property_are_found(options):
    for key in ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions"):
        found = credential_settings({key: options, "spark.executor.memory": "1g"})
        assert len(found) == 1 and found[0].startswith(f"{key} (-D"), found


def test_java_options_without_a_credential_property_pass():
    conf = {
        "spark.driver.extraJavaOptions": "-XX:+UseG1GC -Dlog4j.configurationFile=x -Da.credentials.provider",
        "spark.executorEnv.JAVA_HOME": "/usr/lib/jvm",
    }
    assert credential_settings(conf) == []


def test_an_executor_environment_variable_named_like_a_credential_is_found():
    conf = {"spark.executorEnv.AWS_SECRET_ACCESS_KEY": "x", "spark.executorEnv.DB_PASSWD": "y"}
    assert credential_settings(conf) == sorted(conf)
