"""When a driver JVM may map the class archive: only the one it was made for, whole."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from kafkalake.launch import class_archive
from kafkalake.launch.class_archive import (
    ENV_CLASS_ARCHIVE,
    archive_file,
    driver_java_options,
    fingerprint,
    stamp_file,
    usable_archive,
)
from kafkalake.launch.spark_conf import JVM_OPTIONS, base_conf


@pytest.fixture
def java_home(tmp_path: Path) -> dict[str, str]:
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text("#!/bin/sh\n")
    return {"JAVA_HOME": str(tmp_path / "jdk"), "PATH": os.environ.get("PATH", "")}


@pytest.fixture
def target(tmp_path: Path, java_home: dict[str, str]) -> Path:
    """A jars folder with one jar and an archive stamped for it and for ``java_home``."""
    jars = tmp_path / "jars"
    (jars / "spark").mkdir(parents=True)
    (jars / "spark" / "delta-spark_2.13-4.4.0.jar").write_bytes(b"jar")
    archive = archive_file(jars)
    archive.parent.mkdir()
    archive.write_bytes(b"x" * 1000)
    stamp_file(jars).write_text(json.dumps({"size": 1000, "fingerprint": fingerprint(jars, java_home)}))
    return jars


def test_a_stamped_archive_is_used(target: Path, java_home: dict[str, str]) -> None:
    assert usable_archive(target, java_home) == archive_file(target)
    assert driver_java_options(target, java_home) == [f"-XX:SharedArchiveFile={archive_file(target)}"]


def test_a_truncated_archive_is_not_used(target: Path, java_home: dict[str, str]) -> None:
    # A JVM handed a truncated archive crashes rather than ignoring it.
    archive_file(target).write_bytes(b"x" * 999)
    assert usable_archive(target, java_home) is None
    assert driver_java_options(target, java_home) == []


def test_the_same_jars_in_another_folder_make_it_stale(
    target: Path, java_home: dict[str, str], tmp_path: Path
) -> None:
    # The JVM checks the class path's absolute paths: a copied archive would be ignored whole.
    moved = tmp_path / "moved"
    shutil.copytree(target, moved, copy_function=shutil.copy2)
    assert usable_archive(moved, java_home) is None
    assert usable_archive(target, java_home) == archive_file(target)


def test_other_jars_make_it_stale(target: Path, java_home: dict[str, str]) -> None:
    (target / "spark" / "hadoop-aws-3.4.1.jar").write_bytes(b"jar")
    assert usable_archive(target, java_home) is None


def test_a_jar_rewritten_under_its_name_makes_it_stale(target: Path, java_home: dict[str, str]) -> None:
    jar = target / "spark" / "delta-spark_2.13-4.4.0.jar"
    jar.write_bytes(b"jar, rebuilt")
    assert usable_archive(target, java_home) is None


def test_another_java_makes_it_stale(target: Path, java_home: dict[str, str], tmp_path: Path) -> None:
    other = tmp_path / "jdk21" / "bin" / "java"
    other.parent.mkdir(parents=True)
    other.write_text("#!/bin/sh\n# another build\n")
    assert usable_archive(target, {**java_home, "JAVA_HOME": str(tmp_path / "jdk21")}) is None


@pytest.mark.parametrize("stamp", ["", "{not json", "[]", '{"size": 1000}'])
def test_a_missing_or_broken_stamp_means_no_archive(
    target: Path, java_home: dict[str, str], stamp: str
) -> None:
    stamp_file(target).write_text(stamp)
    assert usable_archive(target, java_home) is None


def test_no_stamp_or_no_archive_means_no_archive(target: Path, java_home: dict[str, str]) -> None:
    stamp_file(target).unlink()
    assert usable_archive(target, java_home) is None
    archive_file(target).unlink()
    assert usable_archive(target, java_home) is None


@pytest.mark.parametrize("off", ["off", "0", "false", "NO"])
def test_it_can_be_switched_off(target: Path, java_home: dict[str, str], off: str) -> None:
    assert usable_archive(target, {**java_home, ENV_CLASS_ARCHIVE: off}) is None


def test_jobs_get_it_with_their_other_driver_options(
    target: Path, java_home: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(class_archive, "jars_dir", lambda: target)
    for key, value in java_home.items():
        monkeypatch.setenv(key, value)
    options = base_conf(tmp_path / "lake")["spark.driver.extraJavaOptions"].split()
    assert options == [
        f"-Dderby.system.home={tmp_path / 'lake' / '_metastore'}",
        *JVM_OPTIONS.split(),
        f"-XX:SharedArchiveFile={archive_file(target)}",
    ]
    monkeypatch.setenv(ENV_CLASS_ARCHIVE, "off")
    assert base_conf(tmp_path / "lake")["spark.driver.extraJavaOptions"].split() == options[:-1]
