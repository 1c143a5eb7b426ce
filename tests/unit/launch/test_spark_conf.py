"""Spark settings: the same dict serves spark-submit --conf and in-process sessions."""

from __future__ import annotations

import re
import shutil
import subprocess
from datetime import timedelta

import pytest

from kafkalake.config.topic import TopicConfig
from kafkalake.core.errors import BadConfigError
from kafkalake.core.paths import ENV_JARS_DIR, metastore_dir
from kafkalake.launch import jvm_extension
from kafkalake.launch.jvm_extension import ENV_JVM_EXTENSION, EXTENSION_CLASS
from kafkalake.launch.spark_conf import (
    DELTA_SETTINGS,
    DRIVER_CLASS_PATH,
    ENV_DRIVER_JAVA_OPTIONS,
    JVM_OPTIONS,
    LOCAL_FS_SETTINGS,
    MACHINERY_CLASSES,
    MACHINERY_JIT_OPTIONS,
    SHORT_RUN_JAVA_OPTIONS,
    SHORT_RUN_RECORDS,
    base_conf,
    delta_settings,
    for_run,
    is_short_run,
    merged_java_options,
    topic_conf,
)


def test_base_conf_enables_delta_and_keeps_state_under_the_lake_root(tmp_path):
    conf = base_conf(tmp_path)
    for key, value in DELTA_SETTINGS.items():
        assert conf[key] == value
    assert conf["spark.sql.warehouse.dir"] == str(tmp_path / "_warehouse")
    assert (
        str(metastore_dir(tmp_path) / "metastore_db") in conf["spark.hadoop.javax.jdo.option.ConnectionURL"]
    )
    # Then the class archive's option, when setup made one (tests/unit/launch/test_class_archive.py).
    assert (
        conf["spark.driver.extraJavaOptions"].split()[0] == f"-Dderby.system.home={metastore_dir(tmp_path)}"
    )
    assert metastore_dir(tmp_path).parent == tmp_path
    assert all(isinstance(v, str) for v in conf.values())
    # The throughput collector and C2's raised thresholds, in the driver (local mode: it runs the
    # tasks) and in executors.
    driver = conf["spark.driver.extraJavaOptions"].split()
    assert "-XX:+UseParallelGC" in driver and "-XX:Tier4InvocationThreshold=50000" in driver
    # An executor runs C2 in every run: the per-batch machinery's thresholds are raised there too.
    assert conf["spark.executor.extraJavaOptions"] == f"{JVM_OPTIONS} {MACHINERY_JIT_OPTIONS}"
    assert MACHINERY_JIT_OPTIONS not in conf["spark.driver.extraJavaOptions"]  # for_run's choice
    assert JVM_OPTIONS.split()[0] == "-XX:+UseParallelGC"
    assert {o.split("=")[0] for o in JVM_OPTIONS.split()[1:]} == {
        "-XX:Tier4InvocationThreshold",
        "-XX:Tier4MinInvocationThreshold",
        "-XX:Tier4CompileThreshold",
    }


def test_extra_driver_java_options_come_last_and_blank_adds_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_DRIVER_JAVA_OPTIONS, " -XX:TieredStopAtLevel=1 ")
    options = base_conf(tmp_path)["spark.driver.extraJavaOptions"].split()
    assert options[0].startswith("-Dderby.system.home=")
    assert options[1] == "-XX:+UseParallelGC"
    assert options[-1] == "-XX:TieredStopAtLevel=1"
    monkeypatch.setenv(ENV_DRIVER_JAVA_OPTIONS, "  ")
    assert "TieredStopAtLevel" not in base_conf(tmp_path)["spark.driver.extraJavaOptions"]
    assert not base_conf(tmp_path)["spark.driver.extraJavaOptions"].endswith(" ")
    # A collector chosen there replaces the project's (two would stop the JVM).
    monkeypatch.setenv(ENV_DRIVER_JAVA_OPTIONS, "-XX:+UseSerialGC")
    options = base_conf(tmp_path)["spark.driver.extraJavaOptions"].split()
    assert options[-1] == "-XX:+UseSerialGC" and "-XX:+UseParallelGC" not in options


def test_topic_spark_conf_goes_on_top_of_the_base(tmp_path):
    topic = TopicConfig(
        name="orders",
        freshness_sla=timedelta(hours=6),
        spark_conf=(("spark.executor.memory", "2g"), ("spark.sql.shuffle.partitions", "8")),
    )
    conf = topic_conf(topic, tmp_path)
    assert conf["spark.sql.shuffle.partitions"] == "8"
    assert conf["spark.executor.memory"] == "2g"
    assert conf["spark.sql.extensions"] == DELTA_SETTINGS["spark.sql.extensions"]
    assert set(conf) == set(base_conf(tmp_path)) | {"spark.executor.memory"}


def test_with_the_switch_off_only_delta_s_extension_is_loaded(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV_JVM_EXTENSION, raising=False)
    assert base_conf(tmp_path)["spark.sql.extensions"] == DELTA_SETTINGS["spark.sql.extensions"]
    assert EXTENSION_CLASS in base_conf(tmp_path)["spark.sql.extensions"]
    monkeypatch.setenv(ENV_JVM_EXTENSION, "off")
    conf = base_conf(tmp_path)
    assert conf["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"
    assert conf["spark.sql.catalog.spark_catalog"] == DELTA_SETTINGS["spark.sql.catalog.spark_catalog"]
    # Nothing else changes, but Hadoop's own local file system (the extension's is in its jars).
    assert not set(LOCAL_FS_SETTINGS) & set(conf)
    assert {k: v for k, v in conf.items() if k not in ("spark.sql.extensions", DRIVER_CLASS_PATH)} == {
        k: v
        for k, v in base_conf(tmp_path, extension=True).items()
        if k != "spark.sql.extensions" and k not in LOCAL_FS_SETTINGS and k != DRIVER_CLASS_PATH
    }
    topic = TopicConfig(name="orders", freshness_sla=timedelta(hours=6))
    assert EXTENSION_CLASS not in topic_conf(topic, tmp_path)["spark.sql.extensions"]
    assert (
        base_conf(tmp_path, extension=True)["spark.sql.extensions"] == DELTA_SETTINGS["spark.sql.extensions"]
    )
    monkeypatch.setenv(ENV_JVM_EXTENSION, "maybe")
    with pytest.raises(
        BadConfigError, match="KAFKALAKE_JVM_EXTENSION='maybe': accepted values are on or off"
    ):
        base_conf(tmp_path)
    assert (
        delta_settings(extension=False)["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"
    )


def test_pyspark_call_site_capture_is_off_unless_a_topic_turns_it_on(tmp_path):
    key = "spark.python.sql.dataFrameDebugging.enabled"
    assert base_conf(tmp_path)[key] == "false"
    topic = TopicConfig(name="orders", freshness_sla=timedelta(hours=6), spark_conf=((key, "true"),))
    assert topic_conf(topic, tmp_path)[key] == "true"


def test_plan_descriptions_are_short_and_delta_caches_table_state_as_rows_unless_a_topic_says(tmp_path):
    conf = base_conf(tmp_path)
    assert conf["spark.sql.ui.explainMode"] == "simple"
    level = "spark.databricks.delta.snapshotCache.storageLevel"
    assert conf[level] == "MEMORY_AND_DISK"
    topic = TopicConfig(
        name="orders", freshness_sla=timedelta(hours=6), spark_conf=((level, "MEMORY_AND_DISK_SER"),)
    )
    assert topic_conf(topic, tmp_path)[level] == "MEMORY_AND_DISK_SER"


def test_topic_without_spark_conf_gets_exactly_the_base(tmp_path):
    topic = TopicConfig(name="orders", freshness_sla=timedelta(hours=6))
    assert topic_conf(topic, tmp_path) == base_conf(tmp_path)


def test_a_topic_can_raise_driver_memory(tmp_path):
    assert base_conf(tmp_path)["spark.driver.memory"] == "1g"
    topic = TopicConfig(
        name="big", freshness_sla=timedelta(hours=1), spark_conf=(("spark.driver.memory", "4g"),)
    )
    assert topic_conf(topic, tmp_path)["spark.driver.memory"] == "4g"


def test_every_job_hides_the_kafka_sources_secrets_where_spark_prints_settings(tmp_path):
    conf = base_conf(tmp_path)
    settings = re.compile(conf["spark.redaction.regex"])
    options = re.compile(conf["spark.sql.redaction.options.regex"])
    for key in ("kafka.sasl.jaas.config", "kafka.ssl.keystore.key", "kafka.ssl.key.password"):
        assert options.search(key) and settings.search(key), key
    assert not options.search("kafka.bootstrap.servers")


def test_a_metastore_service_replaces_derby_and_brings_the_hive_4_client(tmp_path, monkeypatch):
    from kafkalake.launch.spark_conf import ENV_METASTORE_URI

    monkeypatch.setenv(ENV_METASTORE_URI, "thrift://metastore:9083")
    conf = base_conf(tmp_path)
    assert conf["spark.hadoop.hive.metastore.uris"] == "thrift://metastore:9083"
    assert conf["spark.sql.hive.metastore.version"] == "4.0.1"
    assert conf["spark.sql.hive.metastore.jars"] == "path"
    assert conf["spark.sql.hive.metastore.jars.path"].endswith("/hive-client/*.jar")
    assert "spark.hadoop.javax.jdo.option.ConnectionURL" not in conf
    monkeypatch.delenv(ENV_METASTORE_URI)
    assert "spark.hadoop.hive.metastore.uris" not in base_conf(tmp_path)


def test_a_topic_on_an_object_store_gets_a_checkpoint_manager_that_needs_no_folders(tmp_path):
    on_s3 = TopicConfig(name="t", freshness_sla=timedelta(hours=1), path="s3a://bucket/raw/t")
    local = TopicConfig(name="t", freshness_sla=timedelta(hours=1), path=str(tmp_path / "t"))
    key = "spark.sql.streaming.checkpointFileManagerClass"

    assert topic_conf(on_s3, tmp_path)[key].endswith(".FileSystemBasedCheckpointFileManager")
    assert key not in topic_conf(local, tmp_path)


@pytest.mark.parametrize(
    ("records", "care_due", "short"),
    [
        (0, False, True),
        (SHORT_RUN_RECORDS, False, True),
        (SHORT_RUN_RECORDS + 1, False, False),
        (10, True, False),  # table care reads whole tables
    ],
)
def test_a_short_run_reads_few_records_with_no_table_care_due(records, care_due, short):
    assert is_short_run(records, care_due) is short


@pytest.mark.parametrize(
    ("short", "added"),
    [(True, SHORT_RUN_JAVA_OPTIONS), (False, MACHINERY_JIT_OPTIONS)],
    ids=["short", "long"],
)
def test_a_run_adds_its_compiler_options_after_the_drivers_own(tmp_path, short, added):
    """A short run: the quick compiler only. A long run: both, the machinery's thresholds raised."""
    conf = base_conf(tmp_path)
    options = conf["spark.driver.extraJavaOptions"]
    run = for_run(conf, short=short)
    assert run["spark.driver.extraJavaOptions"] == f"{options} {added}"
    assert {k: v for k, v in run.items() if k != "spark.driver.extraJavaOptions"} == {
        k: v for k, v in conf.items() if k != "spark.driver.extraJavaOptions"
    }
    assert conf["spark.driver.extraJavaOptions"] == options  # not changed in place
    # A topic with no driver options of its own gets only the run's.
    assert for_run({}, short=short) == {"spark.driver.extraJavaOptions": added}


def test_the_machinerys_commands_are_one_per_package_at_ten_times():
    assert "TieredStopAtLevel" not in MACHINERY_JIT_OPTIONS
    commands = MACHINERY_JIT_OPTIONS.split()
    assert commands[0] == "-XX:CompileCommand=quiet"  # before them, or the JVM prints each one
    assert commands[1:] == [
        f"-XX:CompileCommand=CompileThresholdScaling,{c}*.*,10.0" for c in MACHINERY_CLASSES
    ]


def test_the_jvm_takes_the_machinerys_commands_silently():
    """A JVM refuses a malformed CompileCommand only with a warning on its standard output, and
    prints a line for each one it takes unless told to be quiet: neither may reach a job's log."""
    java = shutil.which("java")
    if java is None:
        pytest.skip("no java on PATH")
    done = subprocess.run(
        [java, *MACHINERY_JIT_OPTIONS.split(), "-version"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert "CompileCommand" not in done.stderr


@pytest.mark.parametrize(
    "chosen", ["-XX:TieredStopAtLevel=4", "-XX:-TieredCompilation", "-Xmx2g -XX:+TieredCompilation"]
)
def test_a_compiler_choice_in_the_settings_stands_in_any_run(chosen):
    conf = {"spark.driver.extraJavaOptions": chosen}
    assert for_run(conf, short=True) == conf
    assert for_run(conf, short=False) == conf


def test_a_topics_jvm_options_come_after_the_projects_and_keep_them(tmp_path):
    """A topic that sets a JVM property (docs/security.md's OAuth example) keeps the metastore's home, the
    class archive and the collector; its own options come last, so they win where both set one."""
    own = "-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls=https://idp.example/token -Xss4m"
    topic = TopicConfig(
        name="orders",
        freshness_sla=timedelta(hours=1),
        spark_conf=(("spark.driver.extraJavaOptions", own), ("spark.executor.extraJavaOptions", "-Xss4m")),
    )
    base = base_conf(tmp_path)
    conf = topic_conf(topic, tmp_path)
    assert conf["spark.driver.extraJavaOptions"] == f"{base['spark.driver.extraJavaOptions']} {own}"
    assert conf["spark.driver.extraJavaOptions"].startswith(f"-Dderby.system.home={metastore_dir(tmp_path)}")
    assert conf["spark.executor.extraJavaOptions"] == f"{JVM_OPTIONS} {MACHINERY_JIT_OPTIONS} -Xss4m"


def test_with_the_switch_off_the_class_path_still_begins_as_the_class_archive_s(tmp_path, monkeypatch):
    """The class archive maps only into a JVM whose class path begins as its training run's (the
    extension's file system jar first): off, the jar stays there when it is built, its classes
    unnamed; never built, nothing names it (a missing entry would not match either)."""
    monkeypatch.setenv(ENV_JARS_DIR, str(tmp_path / "jars"))
    monkeypatch.setenv(ENV_JVM_EXTENSION, "off")
    jar = jvm_extension.hadoop_jar_path()
    assert DRIVER_CLASS_PATH not in base_conf(tmp_path)
    jar.parent.mkdir(parents=True)
    jar.write_bytes(b"PK")
    conf = base_conf(tmp_path)
    assert conf[DRIVER_CLASS_PATH] == str(jar) == base_conf(tmp_path, extension=True)[DRIVER_CLASS_PATH]
    assert not set(LOCAL_FS_SETTINGS) & set(conf)  # Hadoop's own file system: no class of the jar


def test_the_local_file_system_is_the_extensions_and_a_topics_class_path_comes_after_its_jar(tmp_path):
    """Hadoop's local file system without a process per chmod or readlink (LocalFileSystems.scala):
    its jar on the driver's class path from the start, which a topic's own class path extends."""
    base = base_conf(tmp_path, extension=True)
    assert {k: base[k] for k in LOCAL_FS_SETTINGS} == LOCAL_FS_SETTINGS
    assert base[DRIVER_CLASS_PATH] == str(jvm_extension.hadoop_jar_path())
    own = "/opt/jdbc/driver.jar"
    topic = TopicConfig(
        name="orders", freshness_sla=timedelta(hours=1), spark_conf=((DRIVER_CLASS_PATH, own),)
    )
    assert topic_conf(topic, tmp_path)[DRIVER_CLASS_PATH] == f"{jvm_extension.hadoop_jar_path()}:{own}"
    # A topic may still choose its own file system class: the last word is the topic's.
    topic = TopicConfig(
        name="orders", freshness_sla=timedelta(hours=1), spark_conf=(("spark.hadoop.fs.file.impl", "x.Fs"),)
    )
    assert topic_conf(topic, tmp_path)["spark.hadoop.fs.file.impl"] == "x.Fs"


@pytest.mark.parametrize("collector", ["-XX:+UseG1GC", "-XX:+UseSerialGC", "-XX:+UseZGC"])
def test_a_topics_own_collector_replaces_the_projects(tmp_path, collector):
    """Two collectors stop the JVM ("multiple garbage collectors selected"): the topic's stands alone."""
    merged = merged_java_options("-Dderby.system.home=/lake/m -XX:+UseParallelGC -Xshare:auto", collector)
    assert merged == f"-Dderby.system.home=/lake/m -Xshare:auto {collector}"
    assert merged_java_options("-XX:+UseParallelGC", "") == "-XX:+UseParallelGC"
    assert merged_java_options("", "-Xss4m") == "-Xss4m"
