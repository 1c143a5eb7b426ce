"""kafkalake's own Spark code (``kafkalake/spark/jvm``): built once at set-up into a jar.

The Scala source is compiled with the Scala compiler pyspark ships (``scala-compiler`` is among its
jars), against pyspark's own jars and the Delta jars set-up resolved into the same set, so a fresh
machine needs only Java and the venv, and nothing more is fetched. The jar lands with the ``spark``
jar set (``.jars/spark``), so everything that hands that set to Spark (``spark-submit --jars``, the
tests' session, the class archive's training run) has it. Its name carries a digest of the source
and of pyspark's, delta-spark's and protobuf-java's versions: a changed source, another Spark, Delta
or protobuf-java makes ``make setup`` build again, and the class archive (keyed by the jars' names,
sizes and times) follows.

The extension is behind a switch, :data:`ENV_JVM_EXTENSION` (``on`` by default, ``off``): it reaches
into Spark's and Delta's internals (``private[sql]``, ``private[delta]``, reflection), so a Spark or
Delta upgrade that moves them would stop every topic. Off, a job's settings leave its class out of
``spark.sql.extensions`` (:mod:`.spark_conf`), its jar out of the job's jars (:mod:`.jars`), set-up
does not build it, and the Spark side uses Spark's and Delta's public APIs instead: it asks its
session whether the extension is loaded (:mod:`kafkalake.spark.extension`), never the environment.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import zipfile
from collections.abc import Mapping
from pathlib import Path

from kafkalake.core.errors import BadConfigError, JarsMissingError
from kafkalake.core.paths import jars_dir
from kafkalake.launch.installed import version

log = logging.getLogger(__name__)

#: The session extension that registers the functions (``spark.sql.extensions``).
EXTENSION_CLASS = "org.apache.spark.sql.kafkalake.KafkalakeExtensions"
#: Where the source is: Spark-side code, kept beside the Python that calls it.
SOURCE_DIR = Path(__file__).resolve().parents[1] / "spark" / "jvm"
_PREFIX = "kafkalake-spark-"
#: The classes that depend on Hadoop alone (LocalFileSystems.scala) go into a jar of their own,
#: which a job's driver has on its class path from the JVM's start (launch/spark_conf).
HADOOP_PACKAGE = "kafkalake/hadoop/"
_HADOOP_PREFIX = "kafkalake-hadoop-"

#: Whether the jobs run with kafkalake's JVM extension: ``on`` (the default) or ``off`` (Spark's and
#: Delta's public APIs only, for an upgrade that breaks the extension; docs/scale.md).
ENV_JVM_EXTENSION = "KAFKALAKE_JVM_EXTENSION"
SWITCH_VALUES = ("on", "off")
#: The protobuf-java the ``spark`` set carries (:mod:`.jars`): KafkalakeProtobuf.scala decodes
#: ``format: protobuf`` records with it, so the build compiles against it.
PROTOBUF_JAVA_VERSION = "4.36.2"


def enabled(environ: Mapping[str, str] | None = None) -> bool:
    """Whether :data:`ENV_JVM_EXTENSION` (in ``environ``, by default this process's) has the jobs
    use the extension; unset or empty means ``on``.

    Raises:
        BadConfigError: any other value than ``on`` or ``off`` (in any case, spaces around).
    """
    raw = (os.environ if environ is None else environ).get(ENV_JVM_EXTENSION, "")
    value = raw.strip().lower() or "on"
    if value not in SWITCH_VALUES:
        raise BadConfigError(
            f"{ENV_JVM_EXTENSION}={raw!r}: accepted values are {' or '.join(SWITCH_VALUES)} "
            "(on, the default: kafkalake's JVM extension; off: Spark's and Delta's public APIs only)"
        )
    return value == "on"


def loaded_by(extensions: str) -> bool:
    """Whether a ``spark.sql.extensions`` value (class names, comma-separated) loads the extension."""
    return EXTENSION_CLASS in (name.strip() for name in extensions.split(","))


def is_extension_jar(jar: Path) -> bool:
    """Whether ``jar`` is a build of the extension (either of its jars, of any digest)."""
    return jar.name.startswith((_PREFIX, _HADOOP_PREFIX)) and jar.suffix == ".jar"


def _sources() -> list[Path]:
    return sorted(SOURCE_DIR.glob("*.scala"))


def digest() -> str:
    """Of the sources and the Spark and Delta they are compiled against."""
    # Hashed again only when a source's file changed (size, times, inode): a job's settings name
    # the jar (the DAG factory, for each Spark task of each topic), and reading and hashing the
    # sources cost ~2 ms a call, more than the rest of the settings.
    against = f"{version('pyspark')} {version('delta-spark')} {PROTOBUF_JAVA_VERSION}"
    return _digest(against, tuple((str(source), *_file_state(source)) for source in _sources()))


def _file_state(path: Path) -> tuple[int, int, int, int]:
    stat = path.stat()
    return stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino


@functools.lru_cache(maxsize=8)
def _digest(against: str, files: tuple[tuple[str, int, int, int, int], ...]) -> str:
    h = hashlib.sha256(against.encode())
    for name, *_state in files:
        source = Path(name)
        h.update(source.name.encode() + b"\0" + source.read_bytes())
    return h.hexdigest()[:12]


def _build_path(prefix: str, target: Path | None) -> Path:
    return (target or jars_dir()) / "spark" / f"{prefix}{digest()}.jar"


def jar_path(target: Path | None = None) -> Path:
    return _build_path(_PREFIX, target)


def hadoop_jar_path(target: Path | None = None) -> Path:
    """The jar of the extension's :data:`HADOOP_PACKAGE`, built with :func:`jar_path`."""
    return _build_path(_HADOOP_PREFIX, target)


def is_built(target: Path | None = None) -> bool:
    return jar_path(target).is_file() and hadoop_jar_path(target).is_file()


def delta_jars(spark_set: Path) -> list[Path]:
    """The jars of a resolved ``spark`` set that the sources compile against beside pyspark's: Delta's
    (IdempotentAppend.scala) and protobuf-java (KafkalakeProtobuf.scala)."""
    return sorted([*spark_set.glob("delta-*.jar"), *spark_set.glob("protobuf-java-*.jar")])


def build(target: Path | None = None, *, pyspark_jars: Path, delta: list[Path] | None = None) -> Path:
    """Compile the sources into :func:`jar_path` and :func:`hadoop_jar_path` unless they are there;
    older builds are removed.

    ``delta``: the Delta jars to compile against; by default those of the target's ``spark`` set.
    """
    jar, hadoop_jar = jar_path(target), hadoop_jar_path(target)
    if is_built(target):
        log.info("kafkalake's JVM extension already built: %s", jar.name)
        return jar
    java = shutil.which("java")
    if java is None:
        raise JarsMissingError("java is not on PATH: install a JDK 17 and set JAVA_HOME")
    jar.parent.mkdir(parents=True, exist_ok=True)
    delta = delta_jars(jar.parent) if delta is None else delta
    if not any(p.name.startswith("delta-") for p in delta):
        raise JarsMissingError(
            f"no Delta jars in {jar.parent} to compile kafkalake's JVM extension against: "
            "run `make setup` (or `python -m kafkalake.launch.jars`)"
        )
    with tempfile.TemporaryDirectory() as tmp:
        classes = Path(tmp, "classes")
        classes.mkdir()
        cmd = [
            java,
            "-cp",
            os.pathsep.join([str(pyspark_jars / "*"), *(str(p) for p in delta)]),
            "scala.tools.nsc.Main",
            "-usejavacp",
            "-deprecation",
            "-d",
            str(classes),
            *(str(s) for s in _sources()),
        ]
        log.info("compiling kafkalake's JVM extension (%s)", ", ".join(s.name for s in _sources()))
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise JarsMissingError(
                f"the Scala compiler could not build {SOURCE_DIR} (exit {done.returncode}):\n"
                f"{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
            )
        classes_of = sorted(classes.rglob("*.class"))
        hadoop = {p for p in classes_of if p.relative_to(classes).as_posix().startswith(HADOOP_PACKAGE)}
        # The Hadoop jar first: a build that stops between the two leaves the main jar missing,
        # which is_built notices.
        _write_jar(hadoop_jar, classes, sorted(hadoop))
        _write_jar(jar, classes, [p for p in classes_of if p not in hadoop])
    for old in jar.parent.glob("kafkalake-*.jar"):
        if is_extension_jar(old) and old not in (jar, hadoop_jar):
            old.unlink()
    log.info("built %s", jar)
    return jar


def _write_jar(jar: Path, classes: Path, files: list[Path]) -> None:
    """The ``files`` (under ``classes``) as ``jar``: written beside it, then put in place in one
    step, so a job never sees a half-written jar."""
    partial = jar.with_name(f".{jar.name}.{os.getpid()}")
    try:
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as out:
            out.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\nCreated-By: kafkalake\r\n\r\n")
            for path in files:
                out.write(path, path.relative_to(classes).as_posix())
        partial.replace(jar)
    finally:
        partial.unlink(missing_ok=True)
