"""Jar resolution helpers that need no network: names, the Ivy module, pruning and the marker."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from importlib.metadata import version
from pathlib import Path

import pytest

from kafkalake.core.errors import BadConfigError, JarsMissingError
from kafkalake.launch import jars, jvm_extension
from kafkalake.launch.jars import (
    EXCLUDES,
    GROUPS,
    Coordinate,
    artifact_name,
    drop_jars_spark_ships,
    hadoop_version,
    is_resolved,
    ivy_module_xml,
    jar_files,
    kafka_coordinates,
    metastore_coordinates,
    pyspark_jars_dir,
    s3a_coordinates,
    s3proxy_coordinates,
    spark_coordinates,
)


@pytest.mark.parametrize(
    ("jar", "artifact"),
    [
        ("spark-sql-kafka-0-10_2.13-4.2.0.jar", "spark-sql-kafka-0-10_2.13"),
        ("delta-spark_4.2_2.13-4.4.0.jar", "delta-spark_4.2_2.13"),
        ("jsr305-3.0.0.jar", "jsr305"),
        ("log4j-core-2.25.4.jar", "log4j-core"),
        ("kafka-clients-3.9.2.jar", "kafka-clients"),
        ("commons-lang3-3.17.0.jar", "commons-lang3"),
        ("jackson-module-scala_2.13-2.18.2.jar", "jackson-module-scala_2.13"),
        ("netty-handler-4.1.118.Final.jar", "netty-handler"),
        ("zstd-jni-1.5.6-10.jar", "zstd-jni"),
        ("py4j-0.10.9.9.jar", "py4j"),
        ("netty-transport-native-epoll-4.1.118.Final-linux-x86_64.jar", "netty-transport-native-epoll"),
    ],
)
def test_artifact_name(jar, artifact):
    assert artifact_name(jar) == artifact


@pytest.mark.parametrize("name", ["README.txt", "no-version.jar", "spark.jar", "foo-1.jar.asc"])
def test_artifact_name_of_something_else_is_none(name):
    assert artifact_name(name) is None


@pytest.mark.parametrize(
    ("jar", "artifact"),
    [("log4j-1.2-api-2.25.4.jar", "log4j-1.2-api"), ("hive-shims-0.23-2.3.10.jar", "hive-shims-0.23")],
)
def test_artifact_name_with_a_version_like_part_in_the_name(jar, artifact):
    assert artifact_name(jar) == artifact


def make_jars(folder: Path, *names: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_bytes(b"PK\x03\x04")
    return folder


def test_drop_jars_spark_ships_removes_only_jars_of_shipped_artifacts(tmp_path):
    shipped = make_jars(
        tmp_path / "pyspark-jars",
        "kafka-clients-3.9.1.jar",
        "commons-pool2-2.12.0.jar",
        "jsr305-3.0.0.jar",
        "scala-library-2.13.16.jar",
    )
    resolved = make_jars(
        tmp_path / "spark",
        "kafka-clients-3.9.2.jar",  # same artifact, other version: dropped
        "commons-pool2-2.12.0.jar",  # same artifact and version: dropped
        "spark-sql-kafka-0-10_2.13-4.2.0.jar",
        "delta-spark_4.2_2.13-4.4.0.jar",
        "jsr305-extra-1.0.0.jar",  # a name that merely starts like a shipped one: kept
        "commons-pool-1.6.jar",  # kept: commons-pool is not commons-pool2
    )
    (resolved / "notes.txt").write_text("not a jar")

    dropped = drop_jars_spark_ships(resolved, shipped)

    assert dropped == ["commons-pool2-2.12.0.jar", "kafka-clients-3.9.2.jar"]
    assert sorted(p.name for p in resolved.iterdir()) == [
        "commons-pool-1.6.jar",
        "delta-spark_4.2_2.13-4.4.0.jar",
        "jsr305-extra-1.0.0.jar",
        "notes.txt",
        "spark-sql-kafka-0-10_2.13-4.2.0.jar",
    ]
    # pyspark's own folder is never touched.
    assert len(list(shipped.iterdir())) == 4


def test_drop_jars_spark_ships_with_nothing_in_common(tmp_path):
    shipped = make_jars(tmp_path / "pyspark-jars", "scala-library-2.13.16.jar")
    resolved = make_jars(tmp_path / "spark", "delta-spark_4.2_2.13-4.4.0.jar")
    assert drop_jars_spark_ships(resolved, shipped) == []
    assert (resolved / "delta-spark_4.2_2.13-4.4.0.jar").exists()


def test_drop_jars_spark_ships_keeps_an_artifact_only_named_like_a_shipped_one(tmp_path):
    shipped = make_jars(tmp_path / "pyspark-jars", "log4j-1.2-api-2.25.4.jar")
    resolved = make_jars(tmp_path / "spark", "log4j-1.2.17.jar")
    assert drop_jars_spark_ships(resolved, shipped) == []


def test_ivy_module_xml_is_well_formed_with_one_dependency_per_coordinate():
    sets = {"spark": spark_coordinates(), "kafka": kafka_coordinates()}
    root = ET.fromstring(ivy_module_xml(sets))

    assert root.tag == "ivy-module"
    assert root.get("version") == "2.0"
    assert [c.get("name") for c in root.iter("conf")] == ["spark", "kafka"]
    dependencies = [
        (d.get("org"), d.get("name"), d.get("rev"), d.get("conf")) for d in root.find("dependencies")
    ]
    expected = [
        (c.org, c.name, c.rev, f"{conf}->default(runtime)") for conf, coords in sets.items() for c in coords
    ]
    assert dependencies == expected
    assert len(dependencies) == 6


def test_the_metastore_set_brings_its_tarball_one_intransitive_jar_and_leaves_out_what_breaks_it():
    root = ET.fromstring(ivy_module_xml({"metastore": metastore_coordinates()}, EXCLUDES))
    maven = "{http://ant.apache.org/ivy/maven}classifier"
    server = next(d for d in root.iter("dependency") if d.get("name") == "hive-standalone-metastore-server")
    assert [(a.get("type"), a.get(maven)) for a in server.iter("artifact")] == [
        ("jar", None),
        ("tar.gz", "bin"),
    ]
    hdfs = next(d for d in root.iter("dependency") if d.get("name") == "hadoop-hdfs")
    assert hdfs.get("transitive") == "false"
    excluded = {(e.get("org"), e.get("module"), e.get("conf")) for e in root.iter("exclude")}
    assert ("org.apache.hadoop", "hadoop-client-api", "metastore") in excluded
    # Excludes of a set that is not resolved are left out.
    assert ET.fromstring(ivy_module_xml({"kafka": kafka_coordinates()}, EXCLUDES)).find(".//exclude") is None


def test_ivy_module_xml_escapes_attribute_values():
    odd = Coordinate('org.example"&<', "name'x", "1.0>")
    root = ET.fromstring(ivy_module_xml({"only": [odd]}))
    dependency = root.find("dependencies/dependency")
    assert (dependency.get("org"), dependency.get("name"), dependency.get("rev")) == (
        odd.org,
        odd.name,
        odd.rev,
    )


def test_spark_coordinates_follow_the_installed_python_packages():
    pyspark_version = version("pyspark")
    spark_minor = ".".join(pyspark_version.split(".")[:2])
    assert [str(c) for c in spark_coordinates()] == [
        f"io.delta:delta-spark_{spark_minor}_2.13:{version('delta-spark')}",
        f"org.apache.spark:spark-sql-kafka-0-10_2.13:{pyspark_version}",
        "com.google.protobuf:protobuf-java:4.36.2",
    ]


def test_spark_coordinates_for_the_pinned_versions():
    # requirements.txt pins pyspark 4.2.0 and delta-spark 4.4.0.
    if (version("pyspark"), version("delta-spark")) != ("4.2.0", "4.4.0"):
        pytest.skip("not the pinned versions")
    assert [str(c) for c in spark_coordinates()] == [
        "io.delta:delta-spark_4.2_2.13:4.4.0",
        "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0",
        "com.google.protobuf:protobuf-java:4.36.2",
    ]


def marker_text() -> str:
    sets = {"spark": spark_coordinates(), "kafka": kafka_coordinates()}
    return "".join(f"{conf} {c}\n" for conf, coords in sets.items() for c in coords)


def test_unresolved_folder_is_not_resolved_and_jar_files_says_run_make_setup(tmp_path):
    assert is_resolved(tmp_path) is False
    with pytest.raises(JarsMissingError) as excinfo:
        jar_files("spark", tmp_path)
    assert "make setup" in str(excinfo.value)
    assert str(tmp_path) in str(excinfo.value)


def test_missing_folder_is_not_resolved(tmp_path):
    with pytest.raises(JarsMissingError, match="make setup"):
        jar_files("kafka", tmp_path / "never-created")


def test_jars_resolved_for_other_versions_are_not_resolved(tmp_path):
    make_jars(tmp_path / "spark", "delta-spark_4.1_2.13-4.0.0.jar")
    (tmp_path / "resolved.txt").write_text(marker_text().replace(version("delta-spark"), "0.0.1"))
    assert is_resolved(tmp_path) is False
    with pytest.raises(JarsMissingError, match="make setup"):
        jar_files("spark", tmp_path)


def built_extension(target: Path) -> None:
    """Both jars of a build of kafkalake's JVM extension, as jvm_extension.build leaves them."""
    jvm_extension.jar_path(target).write_bytes(b"PK")
    jvm_extension.hadoop_jar_path(target).write_bytes(b"PK")


def test_resolved_folder_lists_its_jars_sorted(tmp_path):
    make_jars(tmp_path / "spark", "spark-sql-kafka-0-10_2.13-4.2.0.jar", "delta-spark_4.2_2.13-4.4.0.jar")
    make_jars(tmp_path / "kafka", "kafka_2.13-4.2.0.jar")
    (tmp_path / "spark" / "readme.txt").write_text("x")
    (tmp_path / "resolved.txt").write_text(marker_text())
    assert is_resolved(tmp_path) is True
    with pytest.raises(JarsMissingError, match=r"JVM extension .* not built .* run `make setup`"):
        jar_files("spark", tmp_path)
    built_extension(tmp_path)
    assert jar_files("spark", tmp_path) == [
        tmp_path / "spark" / "delta-spark_4.2_2.13-4.4.0.jar",
        jvm_extension.hadoop_jar_path(tmp_path),
        jvm_extension.jar_path(tmp_path),
        tmp_path / "spark" / "spark-sql-kafka-0-10_2.13-4.2.0.jar",
    ]
    assert jar_files("kafka", tmp_path) == [tmp_path / "kafka" / "kafka_2.13-4.2.0.jar"]


def test_with_the_switch_off_the_spark_set_leaves_the_extension_out_built_or_not(tmp_path, monkeypatch):
    make_jars(tmp_path / "spark", "spark-sql-kafka-0-10_2.13-4.2.0.jar", "delta-spark_4.2_2.13-4.4.0.jar")
    (tmp_path / "resolved.txt").write_text(marker_text())
    without = [
        tmp_path / "spark" / "delta-spark_4.2_2.13-4.4.0.jar",
        tmp_path / "spark" / "spark-sql-kafka-0-10_2.13-4.2.0.jar",
    ]
    # Not built: no error without it.
    assert jar_files("spark", tmp_path, extension=False) == without
    built_extension(tmp_path)
    (tmp_path / "spark" / "kafkalake-spark-000000000000.jar").write_bytes(b"PK")  # a stale build too
    (tmp_path / "spark" / "kafkalake-hadoop-000000000000.jar").write_bytes(b"PK")
    assert jar_files("spark", tmp_path, extension=False) == without
    assert jvm_extension.jar_path(tmp_path) in jar_files("spark", tmp_path, extension=True)
    # By default, the switch decides.
    monkeypatch.setenv(jvm_extension.ENV_JVM_EXTENSION, "off")
    assert jar_files("spark", tmp_path) == without
    monkeypatch.setenv(jvm_extension.ENV_JVM_EXTENSION, "on")
    assert jvm_extension.jar_path(tmp_path) in jar_files("spark", tmp_path)
    monkeypatch.setenv(jvm_extension.ENV_JVM_EXTENSION, "maybe")
    with pytest.raises(BadConfigError, match="KAFKALAKE_JVM_EXTENSION"):
        jar_files("spark", tmp_path)


def test_an_unbuilt_extension_names_the_switch_that_does_without_it(tmp_path):
    make_jars(tmp_path / "spark", "delta-spark_4.2_2.13-4.4.0.jar")
    (tmp_path / "resolved.txt").write_text(marker_text())
    with pytest.raises(JarsMissingError, match="KAFKALAKE_JVM_EXTENSION=off"):
        jar_files("spark", tmp_path, extension=True)


def test_the_object_store_jars_have_their_own_marker(tmp_path):
    """Resolving the object-store group never unsettles the core group's marker, and vice versa."""
    make_jars(tmp_path / "spark", "delta-spark_4.2_2.13-4.4.0.jar")
    built_extension(tmp_path)
    (tmp_path / "resolved.txt").write_text(marker_text())
    assert jar_files("spark", tmp_path)
    with pytest.raises(JarsMissingError, match="make setup"):
        jar_files("s3a", tmp_path)

    make_jars(tmp_path / "s3a", f"hadoop-aws-{hadoop_version()}.jar")
    sets = {"s3a": s3a_coordinates(), "s3proxy": s3proxy_coordinates()}
    (tmp_path / "resolved-objectstore.txt").write_text(
        "".join(f"{conf} {c}\n" for conf, coords in sets.items() for c in coords)
    )
    assert is_resolved(tmp_path, "objectstore") and is_resolved(tmp_path)
    assert jar_files("s3a", tmp_path) == [tmp_path / "s3a" / f"hadoop-aws-{hadoop_version()}.jar"]


def test_hadoop_aws_matches_the_hadoop_pyspark_ships():
    shipped = {p.name for p in pyspark_jars_dir().glob("hadoop-client-api-*.jar")}
    assert shipped == {f"hadoop-client-api-{hadoop_version()}.jar"}
    assert [str(c) for c in s3a_coordinates()] == [f"org.apache.hadoop:hadoop-aws:{hadoop_version()}"]


@pytest.mark.parametrize(
    ("argv", "groups", "registry"),
    [
        # What `make demo` asks for: Spark's and Kafka's sets only, no Maven build of the registry.
        (["--group", "core"], ["core"], False),
        (["--group", "registry"], [], True),
        (["--group", "cdc", "--group", "core"], ["core", "cdc"], False),
        # `make runtime`: every jar group, not the tests' registry; `make setup`: everything.
        (["--no-registry"], list(GROUPS), False),
        ([], list(GROUPS), True),
    ],
)
def test_the_command_prepares_only_the_groups_asked_for(argv, groups, registry, monkeypatch, tmp_path):
    prepared: list[str] = []
    built: list[bool] = []
    monkeypatch.setattr(jars, "prepare", lambda group, **_: prepared.append(group) or tmp_path)
    monkeypatch.setattr(jars, "jar_files", lambda conf, target: [])
    monkeypatch.setattr(jars.registry_app, "build", lambda force: built.append(force) or tmp_path)
    assert jars.main(argv) == 0
    assert prepared == groups
    assert bool(built) is registry


def test_preparing_the_core_group_builds_the_extension_only_when_it_is_on(monkeypatch, tmp_path):
    built: list[Path] = []
    monkeypatch.setattr(jars, "resolve", lambda target, force, group: tmp_path)
    monkeypatch.setattr(jvm_extension, "build", lambda target, pyspark_jars: built.append(target) or target)
    monkeypatch.setenv(jvm_extension.ENV_JVM_EXTENSION, "off")
    assert jars.prepare("core") == tmp_path and built == []
    monkeypatch.setenv(jvm_extension.ENV_JVM_EXTENSION, "on")
    jars.prepare("objectstore")
    assert built == []
    jars.prepare("core")
    assert built == [tmp_path]


def test_a_missing_group_names_the_command_that_brings_it(tmp_path):
    with pytest.raises(JarsMissingError, match=r"'debezium' set .* --group cdc"):
        jar_files("debezium", tmp_path)
