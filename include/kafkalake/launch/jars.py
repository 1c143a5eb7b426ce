"""Resolve the project's JVM jars from Maven Central once, into a git-ignored folder.

Two sets: ``spark`` (Delta and the Kafka connector, handed to spark-submit with ``--jars``) and
``kafka`` (Apache Kafka's broker, for the local KRaft broker). Two more for tables on object
storage: ``s3a`` (Hadoop's S3A filesystem with the AWS SDK bundle it needs, added to ``--jars`` only
for topics whose tables are on ``s3a://``) and ``s3proxy`` (the S3 API server the tests run); two for
the Hive metastore service (:mod:`kafkalake.dev.metastore`): ``metastore`` and ``hive-client``; one
for change data capture (:mod:`kafkalake.dev.cdc_source`): ``debezium`` (Kafka Connect and Debezium's
PostgreSQL connector). Each
group of sets has its own marker, so adding a group never invalidates another. After resolution
nothing is fetched at run time: Spark jobs get plain file paths, never ``--packages``. The set
``avro`` (Spark's Avro functions) is added to ``--jars`` only for topics in a schema registry's
format. One more step, ``registry``, builds the schema registry the tests run
(:mod:`.registry_app`, with Maven), with its own marker; ``--no-registry`` leaves it out (an image
that runs no tests).

Each make target brings only what it runs: ``--group core`` (Spark's and Kafka's sets and kafkalake's
JVM extension) is all ``make demo`` needs, and a newcomer's first table comes before the other sets
(~1.5 GB of ivy cache, a Maven build) were ever fetched; ``make test`` brings every group.

pyspark ships an Ivy jar; we drive it directly so a fresh machine needs only Java and the venv.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import quoteattr

from kafkalake.core.errors import JarsMissingError
from kafkalake.core.paths import jars_dir
from kafkalake.launch import jvm_extension, registry_app
from kafkalake.launch.installed import version

log = logging.getLogger(__name__)

SCALA_BINARY = "2.13"
KAFKA_VERSION = "4.2.0"
# Spark's own log4j version, so the broker logs the same way the Spark jobs do.
LOG4J_VERSION = "2.25.4"
# An S3 API server on the local filesystem, for the object-store tests (kafkalake.dev.s3_server).
# 3.0 or later: 2.x ignores If-None-Match and If-Match on PUT, which the run lock on S3 relies on.
S3PROXY_VERSION = "4.1.0"

# Greedy name: the version is the *last* '-<digits>.<digits>...' part (log4j-1.2-api-2.25.4.jar).
_JAR_NAME = re.compile(r"^(?P<name>.+)-(?P<version>\d+(?:\.\d+)+(?:[-.][A-Za-z0-9_]+)*)\.jar$")


@dataclass(frozen=True)
class Coordinate:
    org: str
    name: str
    rev: str
    #: False: this artifact alone, none of its dependencies.
    transitive: bool = True
    #: Also retrieve the Maven artifact of this classifier as a tar.gz (a distribution tarball).
    tarball: str | None = None

    def __str__(self) -> str:
        extra = ("" if self.transitive else " intransitive") + (
            f" +{self.tarball}.tar.gz" if self.tarball else ""
        )
        return f"{self.org}:{self.name}:{self.rev}{extra}"


def pyspark_jars_dir() -> Path:
    # Found, not imported: importing pyspark is slow and this runs where Spark never does.
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise JarsMissingError("pyspark is not installed in this Python: run `make setup`")
    return Path(spec.origin).parent / "jars"


def spark_coordinates() -> list[Coordinate]:
    """Delta and the Kafka connector, named from the installed Python packages; protobuf-java.

    Same rule as ``delta.pip_utils.configure_spark_with_delta_pip``: the Delta artifact carries the
    Spark major.minor, so Python package and jar can never drift apart.
    """
    spark_version = version("pyspark")
    spark_minor = ".".join(spark_version.split(".")[:2])
    return [
        Coordinate("io.delta", f"delta-spark_{spark_minor}_{SCALA_BINARY}", version("delta-spark")),
        Coordinate("org.apache.spark", f"spark-sql-kafka-0-10_{SCALA_BINARY}", spark_version),
        # kafkalake's JVM extension decodes format: protobuf with it (and compiles against it);
        # pyspark ships none (only ORC's shaded copy), so nothing on Spark's classpath clashes.
        Coordinate("com.google.protobuf", "protobuf-java", jvm_extension.PROTOBUF_JAVA_VERSION),
    ]


def kafka_coordinates() -> list[Coordinate]:
    # The broker's SLF4J binding is compile-only in Kafka's pom: add one, or it logs nothing.
    return [
        Coordinate("org.apache.kafka", f"kafka_{SCALA_BINARY}", KAFKA_VERSION),
        Coordinate("org.apache.logging.log4j", "log4j-slf4j2-impl", LOG4J_VERSION),
        Coordinate("org.apache.logging.log4j", "log4j-core", LOG4J_VERSION),
    ]


def hadoop_version() -> str:
    """The Hadoop version pyspark ships (``hadoop-client-api-<version>.jar``): hadoop-aws must match it."""
    for jar in sorted(pyspark_jars_dir().glob("hadoop-client-api-*.jar")):
        return jar.name.removeprefix("hadoop-client-api-").removesuffix(".jar")
    raise JarsMissingError(f"no hadoop-client-api jar in {pyspark_jars_dir()}: is pyspark installed?")


def s3a_coordinates() -> list[Coordinate]:
    # hadoop-aws's pom names the AWS SDK v2 bundle it was built with; Hadoop itself is pyspark's.
    return [Coordinate("org.apache.hadoop", "hadoop-aws", hadoop_version())]


def avro_coordinates() -> list[Coordinate]:
    """Spark's Avro functions (``from_avro``), at pyspark's version: for topics in a registry format."""
    return [Coordinate("org.apache.spark", f"spark-avro_{SCALA_BINARY}", version("pyspark"))]


def s3proxy_coordinates() -> list[Coordinate]:
    return [Coordinate("org.gaul", "s3proxy", S3PROXY_VERSION)]


def _dependency_xml(conf: str, c: Coordinate) -> str:
    head = (
        f"<dependency org={quoteattr(c.org)} name={quoteattr(c.name)} rev={quoteattr(c.rev)}"
        f' conf="{conf}->default(runtime)"' + ("" if c.transitive else ' transitive="false"')
    )
    if c.tarball is None:
        return head + "/>"
    name = quoteattr(c.name)
    artifacts = (
        f'<artifact name={name} type="jar"/>'
        f'<artifact name={name} type="tar.gz" ext="tar.gz" m:classifier={quoteattr(c.tarball)}/>'
    )
    return f"{head}>{artifacts}</dependency>"


def ivy_module_xml(
    sets: Mapping[str, Sequence[Coordinate]], excludes: Mapping[str, Sequence[tuple[str, str]]] | None = None
) -> str:
    confs = "".join(f'<conf name="{name}"/>' for name in sets)
    deps = "".join(_dependency_xml(conf, c) for conf, coords in sets.items() for c in coords)
    deps += "".join(
        f"<exclude org={quoteattr(org)} module={quoteattr(module)} conf={quoteattr(conf)}/>"
        for conf, modules in (excludes or {}).items()
        if conf in sets
        for org, module in modules
    )
    return (
        '<ivy-module version="2.0" xmlns:m="http://ant.apache.org/ivy/maven">'
        '<info organisation="kafkalake" module="jars"/>'
        f"<configurations>{confs}</configurations><dependencies>{deps}</dependencies></ivy-module>"
    )


# --- The Hive metastore service (kafkalake.dev.metastore) -----------------------------------------
HIVE_METASTORE_VERSION = "4.0.1"
POSTGRESQL_JDBC_VERSION = "42.7.4"


def metastore_coordinates() -> list[Coordinate]:
    """The standalone metastore server on PostgreSQL, runnable with ``java -cp 'metastore/*'``.

    Its distribution tarball comes too: schematool's schema scripts are only in there.
    """
    return [
        Coordinate(
            "org.apache.hive", "hive-standalone-metastore-server", HIVE_METASTORE_VERSION, tarball="bin"
        ),
        # The server loads org.apache.hadoop.hdfs.protocol.SnapshotException on every get_database,
        # and its pom does not bring HDFS: that one jar, without HDFS's server dependencies.
        Coordinate("org.apache.hadoop", "hadoop-hdfs", "3.3.6", transitive=False),
        # The pom brings log4j-core and the SLF4J binding but not the API they need.
        Coordinate("org.apache.logging.log4j", "log4j-api", "2.18.0"),
        Coordinate("org.postgresql", "postgresql", POSTGRESQL_JDBC_VERSION),
    ]


def hive_client_coordinates() -> list[Coordinate]:
    """The Hive 4 client Spark loads in isolation (``spark.sql.hive.metastore.jars=path``).

    Spark's built-in client is Hive 2.3, which calls ``get_table``: the 4.0 server no longer has it.
    These are the artifacts Spark itself would fetch for ``spark.sql.hive.metastore.version=4.0.1``;
    Hadoop, logging and Hive's execution engine dependencies come from Spark (excluded below).
    """
    hive = ("hive-metastore", "hive-exec", "hive-common", "hive-serde")
    return [
        *(Coordinate("org.apache.hive", name, HIVE_METASTORE_VERSION) for name in hive),
        Coordinate("com.google.guava", "guava", "14.0.1"),
    ]


#: Left out of a set. The server's pom names hadoop-client-api 2.7.3, never published (hadoop-common
#: comes anyway); Hadoop's reload4j binding would fight the log4j2 one Hive logs through.
EXCLUDES: dict[str, list[tuple[str, str]]] = {
    "metastore": [
        ("org.apache.hadoop", "hadoop-client-api"),
        ("ch.qos.reload4j", "reload4j"),
        ("org.slf4j", "slf4j-reload4j"),
    ],
    "hive-client": [
        ("org.apache.hadoop", "*"),
        ("org.apache.calcite", "*"),
        ("org.apache.calcite.avatica", "*"),
        ("org.apache.curator", "*"),
        ("org.apache.tez", "*"),
        ("org.apache.hbase", "*"),
        ("org.pentaho", "*"),
        ("org.apache.hive", "hive-vector-code-gen"),
        ("org.apache.hive", "hive-llap-tez"),
        ("org.apache.logging.log4j", "*"),
        ("org.slf4j", "*"),
        ("ch.qos.reload4j", "*"),
    ],
}
# ---------------------------------------------------------------------------------------------------

# --- Change data capture (kafkalake.dev.cdc_source) --------------------------------------------------
DEBEZIUM_VERSION = "3.6.1.Final"
#: The Kafka version Debezium 3.6.1 is built against (its pom brings kafka-clients and connect-api
#: of it): Connect's runtime of the same version, so one Kafka version is on Connect's classpath. It
#: talks to the broker (KAFKA_VERSION) over the wire only.
CONNECT_VERSION = "4.3.0"


def debezium_coordinates() -> list[Coordinate]:
    """Kafka Connect (``ConnectStandalone``) with Debezium's PostgreSQL connector on its classpath:
    ``java -cp 'debezium/*'``. Connect logs through SLF4J, whose binding its pom leaves out.
    """
    return [
        Coordinate("org.apache.kafka", "connect-runtime", CONNECT_VERSION),
        Coordinate("io.debezium", "debezium-connector-postgres", DEBEZIUM_VERSION),
        Coordinate("org.apache.logging.log4j", "log4j-slf4j2-impl", LOG4J_VERSION),
        Coordinate("org.apache.logging.log4j", "log4j-core", LOG4J_VERSION),
    ]


def artifact_name(jar_file: str) -> str | None:
    match = _JAR_NAME.match(jar_file)
    return match.group("name") if match else None


def drop_jars_spark_ships(spark_dir: Path, shipped: Path) -> list[str]:
    """Remove resolved jars whose artifact pyspark already has: Spark's own copy wins anyway."""
    shipped_names = {artifact_name(p.name) for p in shipped.glob("*.jar")} - {None}
    dropped = []
    for jar in sorted(spark_dir.glob("*.jar")):
        if artifact_name(jar.name) in shipped_names:
            jar.unlink()
            dropped.append(jar.name)
    return dropped


#: Groups of sets resolved together, each with its own marker file.
GROUPS = {
    "core": ("spark", "kafka"),
    "objectstore": ("s3a", "s3proxy"),
    "metastore": ("metastore", "hive-client"),
    "cdc": ("debezium",),
    "formats": ("avro",),
}
#: Sets whose jars go on Spark's classpath: what pyspark ships already is left out of them.
_SPARK_SETS = ("spark", "s3a", "avro")


def _group_of(conf: str) -> str:
    return next((group for group, sets in GROUPS.items() if conf in sets), "core")


def _marker(target: Path, group: str = "core") -> Path:
    return target / ("resolved.txt" if group == "core" else f"resolved-{group}.txt")


def _coordinates(conf: str) -> list[Coordinate]:
    return {
        "spark": spark_coordinates,
        "kafka": kafka_coordinates,
        "s3a": s3a_coordinates,
        "s3proxy": s3proxy_coordinates,
        "avro": avro_coordinates,
        "metastore": metastore_coordinates,
        "hive-client": hive_client_coordinates,
        "debezium": debezium_coordinates,
    }[conf]()


def _wanted(group: str = "core") -> dict[str, list[Coordinate]]:
    return {conf: _coordinates(conf) for conf in GROUPS[group]}


def _describe(sets: dict[str, list[Coordinate]]) -> str:
    return "\n".join(f"{conf} {c}" for conf, coords in sets.items() for c in coords) + "\n"


def is_resolved(target: Path | None = None, group: str = "core") -> bool:
    target = target or jars_dir()
    marker = _marker(target, group)
    return marker.exists() and marker.read_text() == _describe(_wanted(group))


def resolve(target: Path | None = None, *, force: bool = False, group: str = "core") -> Path:
    """Fetch a group's jar sets into ``target`` unless they are already there for these versions."""
    target = target or jars_dir()
    sets = _wanted(group)
    if is_resolved(target, group) and not force:
        log.info("%s jars already resolved in %s", group, target)
        return target
    ivy_jar = next(pyspark_jars_dir().glob("ivy-*.jar"), None)
    if ivy_jar is None:
        raise JarsMissingError(f"no ivy jar in {pyspark_jars_dir()}: is pyspark installed?")
    java = shutil.which("java")
    if java is None:
        raise JarsMissingError("java is not on PATH: install a JDK 17 and set JAVA_HOME")
    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        module = Path(tmp) / "ivy.xml"
        module.write_text(ivy_module_xml(sets, EXCLUDES))
        for conf in sets:
            shutil.rmtree(target / conf, ignore_errors=True)
        cmd = [
            java,
            "-jar",
            str(ivy_jar),
            "-ivy",
            str(module),
            "-confs",
            *sets,
            "-cache",
            str(target / "ivy-cache"),
            "-types",
            "jar",
            "bundle",
            "tar.gz",
            "-retrieve",
            str(target / "[conf]" / "[artifact]-[revision](-[classifier]).[ext]"),
        ]
        log.info("resolving jars from Maven Central: %s", _describe(sets).replace("\n", "; "))
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise JarsMissingError(
                f"Ivy could not resolve the jars (exit {done.returncode}):\n{done.stdout[-4000:]}"
                f"\n{done.stderr[-2000:]}"
            )
    dropped = [
        name
        for conf in sets
        if conf in _SPARK_SETS
        for name in drop_jars_spark_ships(target / conf, pyspark_jars_dir())
    ]
    log.info("left out %d jars pyspark already ships", len(dropped))
    _marker(target, group).write_text(_describe(sets))
    return target


def jar_files(conf: str, target: Path | None = None, *, extension: bool | None = None) -> list[Path]:
    """The resolved jars of one set; a clear error when set-up never ran.

    ``extension``: whether the ``spark`` set includes kafkalake's JVM extension (then it must be
    built); by default :func:`jvm_extension.enabled`'s answer. Without it, no build of it is listed.
    """
    target = target or jars_dir()
    if not is_resolved(target, _group_of(conf)):
        group = _group_of(conf)
        raise JarsMissingError(
            f"the JVM jars of the {conf!r} set are not resolved in {target}: run `make setup` "
            f"(or `python -m kafkalake.launch.jars --group {group}`) once, with access to Maven Central"
        )
    jars = sorted((target / conf).glob("*.jar"))
    if conf != "spark":
        return jars
    if not (jvm_extension.enabled() if extension is None else extension):
        return [jar for jar in jars if not jvm_extension.is_extension_jar(jar)]
    if not jvm_extension.is_built(target):
        raise JarsMissingError(
            f"kafkalake's JVM extension ({jvm_extension.SOURCE_DIR}) is not built for this source "
            f"and pyspark in {target / conf}: run `make setup` (or `python -m kafkalake.launch.jars`), "
            f"or run the jobs without it ({jvm_extension.ENV_JVM_EXTENSION}=off)"
        )
    return jars


def prepare(group: str = "core", target: Path | None = None, *, force: bool = False) -> Path:
    """One group's jar sets, resolved unless its marker says they are there; for ``core``, also
    kafkalake's JVM extension when the switch has it on (the ``spark`` set is unusable without it)."""
    target = resolve(target, force=force, group=group)
    if group == "core":
        if jvm_extension.enabled():
            jvm_extension.build(target, pyspark_jars=pyspark_jars_dir())
        else:
            log.info("%s=off: kafkalake's JVM extension is not built", jvm_extension.ENV_JVM_EXTENSION)
    return target


#: The ``--group`` choice for the schema registry's build: a step of its own, not a jar group.
REGISTRY = "registry"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="resolve again even if present")
    parser.add_argument(
        "--group",
        action="append",
        choices=[*GROUPS, REGISTRY],
        help="only this group (repeatable; default: every group and the registry)",
    )
    parser.add_argument(
        "--no-registry", action="store_true", help="do not build the schema registry (needs Maven)"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    chosen = args.group or [*GROUPS, *([] if args.no_registry else [REGISTRY])]
    for group in (g for g in GROUPS if g in chosen):
        target = prepare(group, force=args.force)
        for conf in GROUPS[group]:
            print(f"{conf}: {len(jar_files(conf, target))} jars in {target / conf}")
    if REGISTRY in chosen and not args.no_registry:
        print(f"registry: {registry_app.build(force=args.force)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
