"""The Spark driver's class-data-sharing (CDS) archive: where it lives and when a JVM may use it.

A Spark driver with Delta spends most of its start-up loading, parsing and verifying some 20,000
classes (measured here: ~20 s from ``spark-submit`` to a first job, ~11 s with the archive). Java 17
can map classes a training run loaded from an archive instead (``-XX:SharedArchiveFile``). The
archive is made once by ``make setup`` (:mod:`kafkalake.dev.class_archive_training`), next to the jars.

Only a JVM that matches the archive may use it: a stamp beside it records the Java binary, pyspark
and the jars it was made with, and its size. A truncated archive crashes the JVM instead of being
ignored, so anything that does not match, or ``KAFKALAKE_CLASS_ARCHIVE=off``, means no archive and
the ordinary (slower) start.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from kafkalake.core.paths import jars_dir
from kafkalake.launch.installed import version
from kafkalake.launch.jars import pyspark_jars_dir

ENV_CLASS_ARCHIVE = "KAFKALAKE_CLASS_ARCHIVE"
#: The option a training run gives the driver JVM to write the archive at its exit.
DUMP_OPTION = "-XX:ArchiveClassesAtExit="
USE_OPTION = "-XX:SharedArchiveFile="


def archive_file(target: Path | None = None) -> Path:
    return (target or jars_dir()) / "cds" / "spark-driver.jsa"


def stamp_file(target: Path | None = None) -> Path:
    return archive_file(target).with_suffix(".json")


def java_binary(env: dict[str, str] | None = None) -> Path | None:
    """The java spark-submit's launcher runs: ``$JAVA_HOME/bin/java``, else the one on PATH."""
    env = dict(os.environ) if env is None else env
    if home := env.get("JAVA_HOME"):
        return Path(home, "bin", "java").resolve()
    found = shutil.which("java", path=env.get("PATH"))
    return Path(found).resolve() if found else None


#: Raised when the training run loads more of what the jobs load (2: it reads Kafka too; 3: with the
#: jobs' garbage collector), so that `make setup` trains again rather than keep a narrower archive.
TRAINING_VERSION = 3


def fingerprint(target: Path | None = None, env: dict[str, str] | None = None) -> dict[str, object]:
    """What the archive depends on: a different JVM build or jar set makes its classes stale."""
    java = java_binary(env)
    stat = java.stat() if java is not None and java.exists() else None
    # Size and time too: the JVM refuses an archive whose jar changed under the same name (the
    # kafkalake jar rebuilt from an edited source), and would then start without it.
    folder = target or jars_dir()
    stats = [(p.name, p.stat()) for p in sorted((folder / "spark").glob("*.jar"))]
    jars = [[name, jar.st_size, jar.st_mtime_ns] for name, jar in stats]
    return {
        "java": str(java) if java else None,
        "java_size": stat.st_size if stat else None,
        "java_mtime_ns": stat.st_mtime_ns if stat else None,
        "pyspark": version("pyspark"),
        # Where the classes were: the archive holds the class path by its absolute paths, and a JVM
        # whose paths differ (a checkout moved or copied, its jars with it) ignores the whole
        # archive ("shared class paths mismatch"), so every driver started without it.
        "pyspark_jars": str(pyspark_jars_dir()),
        "jars_dir": str(folder.resolve()),
        "jars": jars,
        "training": TRAINING_VERSION,
    }


def usable_archive(target: Path | None = None, env: dict[str, str] | None = None) -> Path | None:
    """The archive if this process's JVM may map it, else None (never raises: it is only a speed-up)."""
    env = dict(os.environ) if env is None else env
    if env.get(ENV_CLASS_ARCHIVE, "").lower() in {"off", "0", "false", "no"}:
        return None
    archive, stamp = archive_file(target), stamp_file(target)
    try:
        recorded = json.loads(stamp.read_text())
        size = archive.stat().st_size
    except (OSError, ValueError):
        return None
    if not isinstance(recorded, dict) or recorded.get("size") != size:
        return None
    if recorded.get("fingerprint") != fingerprint(target, env):
        return None
    return archive


def driver_java_options(target: Path | None = None, env: dict[str, str] | None = None) -> list[str]:
    archive = usable_archive(target, env)
    return [f"{USE_OPTION}{archive}"] if archive is not None else []
