"""The build of kafkalake's JVM extension (Spark functions, Delta writer) with pyspark's Scala compiler."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from kafkalake.core.errors import BadConfigError, JarsMissingError
from kafkalake.core.paths import jars_dir
from kafkalake.launch import jvm_extension
from kafkalake.launch.jars import pyspark_jars_dir

#: The Delta jars and protobuf-java set-up resolved: the build compiles against them.
DELTA = jvm_extension.delta_jars(jars_dir() / "spark")


def test_the_build_compiles_the_source_once_and_removes_older_builds(tmp_path):
    stale = tmp_path / "spark" / "kafkalake-spark-000000000000.jar"
    stale.parent.mkdir()
    stale.write_bytes(b"PK")
    stale_hadoop = tmp_path / "spark" / "kafkalake-hadoop-000000000000.jar"
    stale_hadoop.write_bytes(b"PK")
    other = tmp_path / "spark" / "kafka-clients-3.9.2.jar"
    other.write_bytes(b"PK")

    jar = jvm_extension.build(tmp_path, pyspark_jars=pyspark_jars_dir(), delta=DELTA)

    assert jar == jvm_extension.jar_path(tmp_path) and jvm_extension.is_built(tmp_path)
    with zipfile.ZipFile(jar) as built:
        names = set(built.namelist())
    package = "org/apache/spark/sql/kafkalake/"
    assert f"{package}KafkalakeExtensions.class" in names
    assert {f"{package}KafkalakeFromJson.class", f"{package}KafkalakeFromJsonKeyed.class"} <= names
    assert f"{package}KafkalakeProtobufDecode.class" in names
    assert jvm_extension.EXTENSION_CLASS.replace(".", "/") + ".class" in names
    assert "org/apache/spark/sql/delta/kafkalake/IdempotentAppend.class" in names
    # The classes that depend on Hadoop alone, in their own jar for the driver's class path.
    with zipfile.ZipFile(jvm_extension.hadoop_jar_path(tmp_path)) as built:
        hadoop = set(built.namelist())
    assert "kafkalake/hadoop/KafkalakeLocalFileSystem.class" in hadoop
    assert "kafkalake/hadoop/KafkalakeLocalFs.class" in hadoop
    assert not {n for n in names if n.startswith(jvm_extension.HADOOP_PACKAGE)}
    assert {n for n in hadoop if n.endswith(".class")} == {
        n for n in hadoop if n.startswith(jvm_extension.HADOOP_PACKAGE)
    }
    assert not stale.exists() and not stale_hadoop.exists() and other.exists()
    built_at = jar.stat().st_mtime_ns
    assert jvm_extension.build(tmp_path, pyspark_jars=pyspark_jars_dir(), delta=DELTA) == jar
    assert jar.stat().st_mtime_ns == built_at


def test_a_changed_source_is_another_build(tmp_path, monkeypatch):
    source = tmp_path / "src"
    source.mkdir()
    (source / "A.scala").write_text("object A\n")
    monkeypatch.setattr(jvm_extension, "SOURCE_DIR", source)
    first = jvm_extension.jar_path(tmp_path)
    (source / "A.scala").write_text("object A { val x = 1 }\n")
    assert jvm_extension.jar_path(tmp_path) != first


def test_the_sources_are_read_again_only_when_one_changed(tmp_path, monkeypatch):
    """The digest names the jar in every job's settings: the DAG factory asks for it for each Spark
    task of each topic, so unchanged sources are not read and hashed again."""
    source = tmp_path / "jvm"
    source.mkdir()
    (source / "A.scala").write_text("object A\n")
    monkeypatch.setattr(jvm_extension, "SOURCE_DIR", source)
    first = jvm_extension.digest()
    reads = []
    real = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda self: reads.append(self.name) or real(self))

    assert jvm_extension.digest() == first and reads == []

    (source / "A.scala").write_text("object A { val x = 1 }\n")
    changed = jvm_extension.digest()
    assert changed != first and reads == ["A.scala"]
    (source / "A.scala").write_text("object A\n")  # the same text again: the same digest
    assert jvm_extension.digest() == first


def test_a_source_that_does_not_compile_says_so_with_the_compiler_s_words(tmp_path, monkeypatch):
    source = tmp_path / "src"
    source.mkdir()
    (source / "Broken.scala").write_text('object Broken { val x: Int = "text" }\n')
    monkeypatch.setattr(jvm_extension, "SOURCE_DIR", source)
    with pytest.raises(JarsMissingError, match=r"(?s)could not build .*Broken\.scala.*type mismatch"):
        jvm_extension.build(tmp_path, pyspark_jars=pyspark_jars_dir(), delta=DELTA)
    assert not jvm_extension.is_built(tmp_path)
    assert list((tmp_path / "spark").glob("*")) == []


def test_without_delta_jars_the_build_says_to_run_set_up(tmp_path):
    with pytest.raises(JarsMissingError, match=r"no Delta jars in .*make setup"):
        jvm_extension.build(tmp_path, pyspark_jars=pyspark_jars_dir())
    assert not jvm_extension.is_built(tmp_path)


def test_another_delta_is_another_build(tmp_path, monkeypatch):
    first = jvm_extension.jar_path(tmp_path)
    real = jvm_extension.version
    monkeypatch.setattr(
        jvm_extension, "version", lambda name: "9.9.9" if name == "delta-spark" else real(name)
    )
    assert jvm_extension.jar_path(tmp_path) != first


@pytest.mark.parametrize(
    ("environ", "on"),
    [
        ({}, True),
        ({jvm_extension.ENV_JVM_EXTENSION: ""}, True),
        ({jvm_extension.ENV_JVM_EXTENSION: "on"}, True),
        ({jvm_extension.ENV_JVM_EXTENSION: " ON "}, True),
        ({jvm_extension.ENV_JVM_EXTENSION: "off"}, False),
        ({jvm_extension.ENV_JVM_EXTENSION: "Off"}, False),
    ],
)
def test_the_switch_is_on_unless_set_off(environ, on):
    assert jvm_extension.enabled(environ) is on


@pytest.mark.parametrize("value", ["maybe", "0", "false", "yes", "on,off"])
def test_any_other_value_of_the_switch_is_refused_naming_the_variable_and_the_accepted_values(value):
    with pytest.raises(BadConfigError) as excinfo:
        jvm_extension.enabled({jvm_extension.ENV_JVM_EXTENSION: value})
    message = str(excinfo.value)
    assert f"KAFKALAKE_JVM_EXTENSION={value!r}" in message
    assert "accepted values are on or off" in message


def test_the_switch_reads_this_process_s_environment_by_default(monkeypatch):
    monkeypatch.setenv(jvm_extension.ENV_JVM_EXTENSION, "off")
    assert jvm_extension.enabled() is False
    monkeypatch.setenv(jvm_extension.ENV_JVM_EXTENSION, "maybe")
    with pytest.raises(BadConfigError, match="KAFKALAKE_JVM_EXTENSION"):
        jvm_extension.enabled()


@pytest.mark.parametrize(
    ("extensions", "loaded"),
    [
        (f"io.delta.sql.DeltaSparkSessionExtension,{jvm_extension.EXTENSION_CLASS}", True),
        (f"io.delta.sql.DeltaSparkSessionExtension, {jvm_extension.EXTENSION_CLASS} ", True),
        ("io.delta.sql.DeltaSparkSessionExtension", False),
        (f"{jvm_extension.EXTENSION_CLASS}Other", False),
        ("", False),
    ],
)
def test_the_extension_is_loaded_by_its_class_among_the_sessions_extensions(extensions, loaded):
    assert jvm_extension.loaded_by(extensions) is loaded
