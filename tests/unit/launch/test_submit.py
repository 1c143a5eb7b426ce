"""One builder of a job's spark-submit: what the operators hand the provider, and the command line."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kafkalake.config.catalog import load_catalog
from kafkalake.core.paths import ENV_CATALOG, ENV_LAKE_ROOT, jobs_dir
from kafkalake.core.run_metrics import ENV_METRICS_FILE
from kafkalake.lake.table_position import ENV_TOPIC_ID
from kafkalake.launch import jobs, jvm_extension, spark_auth, submit
from kafkalake.launch.handover import ENV_CLIENT_CONFIG_FILE
from kafkalake.launch.spark_conf import (
    DELTA_SETTINGS,
    MACHINERY_JIT_OPTIONS,
    SHORT_RUN_JAVA_OPTIONS,
    for_run,
    topic_conf,
)

CATALOG = Path(__file__).resolve().parents[2] / "fixtures" / "catalogs" / "good.yaml"


@pytest.fixture
def lake(tmp_path) -> Path:
    return tmp_path / "lake"


@pytest.fixture(autouse=True)
def resolved_jars(monkeypatch, tmp_path) -> dict[str, list[Path]]:
    """A resolved jar set is a list of local files; which sets a job gets is under test here."""
    sets = {name: [tmp_path / "jars" / name / f"{name}-1.0.jar"] for name in ("spark", "s3a")}
    monkeypatch.setattr(submit, "jar_files", lambda conf, **_: sets[conf])
    return sets


def topic(name: str, lake: Path):
    return load_catalog(CATALOG, lake).topic(name)


def test_a_submission_names_the_job_the_topic_and_the_topics_settings(lake, resolved_jars):
    built = submit.submission("ingest_topic.py", topic("orders-v2", lake), catalog=CATALOG, lake=lake)
    assert built.application == jobs_dir() / "ingest_topic.py"
    assert built.application.is_file()
    assert built.application_args == ("--topic", "orders-v2")
    assert built.conf == topic_conf(topic("orders-v2", lake), lake)
    assert built.conf["spark.sql.shuffle.partitions"] == "4"  # the topic's own
    assert built.jars == tuple(resolved_jars["spark"])  # local tables: no S3A
    assert built.name == "kafkalake-ingest_topic-orders-v2"


@pytest.mark.parametrize("job", ["ingest_topic", "ingest_topic.py"])
def test_a_job_is_named_with_or_without_its_suffix(job):
    assert submit.application(job) == jobs_dir() / "ingest_topic.py"
    assert submit.app_name(job, "t") == "kafkalake-ingest_topic-t"


def test_a_topic_on_an_object_store_gets_the_s3a_jars_too(lake, resolved_jars):
    built = submit.submission("maintain_table", topic("payments", lake), catalog=CATALOG, lake=lake)
    assert built.jars == (*resolved_jars["spark"], *resolved_jars["s3a"])
    assert built.jars_arg() == ",".join(str(p) for p in built.jars)


def test_settings_chosen_before_are_kept_and_a_run_length_adds_its_compilers(lake):
    chosen = {"spark.driver.extraJavaOptions": "-Dx=1", "spark.executor.memory": "3g"}
    orders = topic("orders-v2", lake)
    kept = submit.submission("ingest_topic", orders, catalog=CATALOG, lake=lake, conf=chosen)
    assert kept.conf == chosen
    short = submit.submission("ingest_topic", orders, catalog=CATALOG, lake=lake, conf=chosen, short_run=True)
    assert short.conf == for_run(chosen, True)
    assert short.conf["spark.driver.extraJavaOptions"].endswith(SHORT_RUN_JAVA_OPTIONS)
    long = submit.submission("ingest_topic", orders, catalog=CATALOG, lake=lake, short_run=False)
    assert long.conf["spark.driver.extraJavaOptions"].endswith(MACHINERY_JIT_OPTIONS)
    assert chosen == {"spark.driver.extraJavaOptions": "-Dx=1", "spark.executor.memory": "3g"}


def test_the_hand_over_is_named_in_the_environment_never_in_the_arguments(lake, tmp_path):
    settings, metrics = tmp_path / "kafka-client.json", tmp_path / "metrics.json"
    built = submit.submission(
        "ingest_topic",
        topic("orders-v2", lake),
        catalog=CATALOG,
        lake=lake,
        args=["--reingest-from", "2026-11-01T00:00:00+00:00"],
        kafka_settings=settings,
        metrics_file=metrics,
        topic_id="id-1",
        env={"EXTRA": "1", ENV_CLIENT_CONFIG_FILE: "a stale one"},
        path="/usr/bin",
    )
    assert built.application_args == ("--topic", "orders-v2", "--reingest-from", "2026-11-01T00:00:00+00:00")
    assert built.env[ENV_CLIENT_CONFIG_FILE] == str(settings)  # the hand-over wins over the caller's env
    assert built.env[ENV_METRICS_FILE] == str(metrics)
    assert built.env[ENV_TOPIC_ID] == "id-1"
    assert built.env["EXTRA"] == "1"
    assert built.env[ENV_CATALOG] == str(CATALOG) and built.env[ENV_LAKE_ROOT] == str(lake)
    assert built.env["PATH"].split(":") == [str(Path(sys.executable).parent), "/usr/bin"]
    assert built.env["PYSPARK_PYTHON"] == sys.executable
    assert not any(str(settings) in arg for arg in built.command("local[1]"))


def test_without_a_hand_over_the_environment_holds_only_the_jobs_own(lake):
    built = submit.submission("show_table", topic("clickstream", lake), catalog=CATALOG, lake=lake, path="")
    assert built.env == submit.job_environment(CATALOG, lake, "")


def test_the_command_line_is_the_submission_rendered(lake, resolved_jars):
    cmd = jobs.command(
        "show_table", "orders-v2", catalog=CATALOG, lake=lake, master="local[2]", extra_args=["-v"]
    )
    built = submit.submission(
        "show_table", topic("orders-v2", lake), catalog=CATALOG, lake=lake, args=["-v"], short_run=False
    )
    assert cmd == built.command("local[2]")
    assert cmd[:3] == [str(Path(sys.executable).parent / "spark-submit"), "--master", "local[2]"]
    assert cmd[cmd.index("--jars") + 1] == str(resolved_jars["spark"][0])
    assert f"spark.executor.memory={built.conf['spark.executor.memory']}" in cmd
    assert cmd[-4:] == [str(jobs_dir() / "show_table.py"), "--topic", "orders-v2", "-v"]
    assert "--name" not in cmd  # by hand, Spark names the application after the script


def test_a_jobs_environment_extends_its_parents(lake):
    env = jobs.environment(CATALOG, lake, {"PATH": "/bin", "HOME": "/home/x"})
    assert env["HOME"] == "/home/x"
    assert env == {"HOME": "/home/x", **submit.job_environment(CATALOG, lake, "/bin", {"HOME": "/home/x"})}


def test_spark_submits_launcher_gets_the_quick_compiler_unless_the_parent_chose_its_options(lake):
    env = jobs.environment(CATALOG, lake, {"PATH": "/bin"})
    assert (
        env[submit.ENV_LAUNCHER_OPTS]
        == submit.LAUNCHER_JAVA_OPTIONS
        == "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
    )
    own = jobs.environment(CATALOG, lake, {"PATH": "/bin", submit.ENV_LAUNCHER_OPTS: "-Xmx256m"})
    assert own[submit.ENV_LAUNCHER_OPTS] == "-Xmx256m"


def test_with_the_switch_off_the_job_gets_neither_the_extension_s_class_nor_its_jar(
    lake, tmp_path, monkeypatch
):
    """The job's settings decide its jars: a DAG's settings were chosen at parse time."""
    spark_set = tmp_path / "jars" / "spark"
    spark_jars = [spark_set / "delta-spark_4.2_2.13-4.4.0.jar", jvm_extension.jar_path(tmp_path / "jars")]
    asked: list[bool | None] = []

    def jar_files(conf: str, *, extension: bool | None = None) -> list[Path]:
        asked.append(extension)
        return [j for j in spark_jars if extension or not jvm_extension.is_extension_jar(j)]

    monkeypatch.setattr(submit, "jar_files", jar_files)
    orders = topic("orders-v2", lake)
    monkeypatch.setenv(jvm_extension.ENV_JVM_EXTENSION, "off")
    off = submit.submission("ingest_topic", orders, catalog=CATALOG, lake=lake)
    assert off.conf["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"
    assert off.jars == (spark_set / "delta-spark_4.2_2.13-4.4.0.jar",)
    assert jvm_extension.EXTENSION_CLASS not in " ".join(off.command("local[1]"))
    # Settings chosen with the extension (at a DAG's parse time) bring its jar, whatever the switch says now.
    with_it = {**off.conf, "spark.sql.extensions": DELTA_SETTINGS["spark.sql.extensions"]}
    chosen = submit.submission("ingest_topic", orders, catalog=CATALOG, lake=lake, conf=with_it)
    assert chosen.jars == tuple(spark_jars)
    monkeypatch.delenv(jvm_extension.ENV_JVM_EXTENSION)
    on = submit.submission("ingest_topic", orders, catalog=CATALOG, lake=lake)
    assert jvm_extension.EXTENSION_CLASS in on.conf["spark.sql.extensions"]
    assert on.jars == tuple(spark_jars)
    assert asked == [False, True, True]


def test_on_an_authenticating_cluster_the_secret_goes_by_file_never_on_the_command_line(
    lake, tmp_path, monkeypatch
):
    auth = spark_auth.write_auth_file(tmp_path / "spark-auth.properties", "canary-spark-secret")
    monkeypatch.setenv(spark_auth.ENV_SPARK_AUTH_FILE, str(auth))
    built = submit.submission("ingest_topic", topic("orders-v2", lake), catalog=CATALOG, lake=lake)
    cmd = built.command("spark://127.0.0.1:7077")
    assert cmd[cmd.index("--properties-file") + 1] == str(auth)
    assert built.conf["spark.authenticate"] == "true"
    assert built.conf["spark.network.crypto.enabled"] == "true"
    assert not any("canary-spark-secret" in part for part in cmd)
    assert not any("canary-spark-secret" in value for value in built.env.values())
    monkeypatch.delenv(spark_auth.ENV_SPARK_AUTH_FILE)
    unset = submit.submission("ingest_topic", topic("orders-v2", lake), catalog=CATALOG, lake=lake)
    assert unset.properties_file is None and "spark.authenticate" not in unset.conf
