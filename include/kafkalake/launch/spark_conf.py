"""Spark settings for the project's jobs: fit for a 2-core machine, overridable per topic.

The same settings serve ``spark-submit`` (as ``--conf``) and in-process sessions (tests), so what
is tested is what runs: the base settings, the JVMs' options, the metastore's, a short run's, an
object store's and a topic's own on top. Which of a topic's own would be credentials (refused by the
catalog) is :mod:`kafkalake.config.spark_credentials`'s.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from kafkalake.config.topic import TopicConfig
from kafkalake.core.paths import jars_dir, metastore_dir
from kafkalake.launch import jvm_extension
from kafkalake.launch.class_archive import driver_java_options
from kafkalake.launch.jars import HIVE_METASTORE_VERSION
from kafkalake.launch.jvm_extension import EXTENSION_CLASS

DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_SETTINGS = {
    # Delta's, then kafkalake's own functions (launch/jvm_extension: the JSON parse over bytes).
    "spark.sql.extensions": f"{DELTA_EXTENSION},{EXTENSION_CLASS}",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}


def delta_settings(extension: bool | None = None) -> dict[str, str]:
    """:data:`DELTA_SETTINGS`; without kafkalake's JVM extension (``extension`` False, by default
    :func:`jvm_extension.enabled`'s answer), Delta's extension alone. The Spark side asks its
    session which it got (:mod:`kafkalake.spark.extension`)."""
    if jvm_extension.enabled() if extension is None else extension:
        return dict(DELTA_SETTINGS)
    return {**DELTA_SETTINGS, "spark.sql.extensions": DELTA_EXTENSION}


#: Hadoop's local file system through both its APIs, as kafkalake's JVM extension has it
#: (LocalFileSystems.scala): a permission set and a link read in the JVM, where Hadoop without its
#: native library starts a `chmod` or `readlink` process for each (every data file, checksum,
#: Delta commit and checkpoint file; ~5 ms of CPU each). test_parsed_tables' session JVM started
#: ~1,780 of them in two minutes (strace). Their jar goes on the driver's class path too
#: (:func:`local_fs_settings`): spark-submit reads the local jars it is given through this file
#: system before it adds them to the JVM.
LOCAL_FS_SETTINGS = {
    "spark.hadoop.fs.file.impl": "kafkalake.hadoop.KafkalakeLocalFileSystem",
    "spark.hadoop.fs.AbstractFileSystem.file.impl": "kafkalake.hadoop.KafkalakeLocalFs",
}


DRIVER_CLASS_PATH = "spark.driver.extraClassPath"


def local_fs_settings(extension: bool | None = None) -> dict[str, str]:
    """:data:`LOCAL_FS_SETTINGS` and their jar on the driver's class path, with kafkalake's JVM
    extension. Without it, none of the settings (Hadoop's own local file system), but the jar
    stays on the class path when it is built: nothing names a class of it, so none is loaded."""
    jar = jvm_extension.hadoop_jar_path()
    if not (jvm_extension.enabled() if extension is None else extension):
        # The class archive (launch/class_archive) maps only into a JVM whose class path begins
        # as its training run's did, which had this jar first: without it every class is read
        # from its jar again (a driver's start and first job: 7.6 -> 11.5 CPU-s measured).
        return {DRIVER_CLASS_PATH: str(jar)} if jar.is_file() else {}
    return {**LOCAL_FS_SETTINGS, DRIVER_CLASS_PATH: str(jar)}


def redaction_conf() -> dict[str, str]:
    """What Spark hides wherever it prints settings or a data source's options (event log, UI, plans).

    Spark's defaults miss the Kafka source's secrets: the JAAS line (password inside) and the
    PEM key arrive as options ``kafka.sasl.jaas.config`` and ``kafka.ssl.keystore.key``.
    """
    return {
        "spark.redaction.regex": (r"(?i)secret|password|token|access[.]?key|jaas|keystore\.key|credential"),
        "spark.sql.redaction.options.regex": r"(?i)url|jaas|password|secret|keystore\.key|token",
    }


#: A shared Hive metastore service (thrift://host:9083) for every job; unset, each machine keeps
#: the embedded Derby one under the lake.
ENV_METASTORE_URI = "KAFKALAKE_METASTORE_URI"


#: Extra options for every job's driver JVM, after the project's own (e.g. the test suite's
#: ``-XX:TieredStopAtLevel=1``: its jobs are short, so C2 compiles what never pays back).
ENV_DRIVER_JAVA_OPTIONS = "KAFKALAKE_DRIVER_JAVA_OPTIONS"


def metastore_uri() -> str | None:
    return os.environ.get(ENV_METASTORE_URI) or None


def hive_metastore_conf(uri: str) -> dict[str, str]:
    """Spark on a Hive metastore service: its URI, and the Hive 4 client to talk to it.

    Spark's built-in Hive client (2.3) calls thrift methods the 4.0 server dropped (``get_table``),
    so Spark loads the 4.0.1 client from the ``hive-client`` jars instead (resolved at set-up).
    """
    return {
        "spark.hadoop.hive.metastore.uris": uri,
        "spark.sql.hive.metastore.version": HIVE_METASTORE_VERSION,
        "spark.sql.hive.metastore.jars": "path",
        "spark.sql.hive.metastore.jars.path": f"file://{jars_dir() / 'hive-client'}/*.jar",
    }


def derby_metastore_conf(lake_root: Path) -> dict[str, str]:
    """The embedded Derby metastore, kept with the lake rather than in the current directory."""
    metastore = metastore_dir(lake_root)
    return {
        "spark.hadoop.javax.jdo.option.ConnectionURL": (
            f"jdbc:derby:;databaseName={metastore / 'metastore_db'};create=true"
        ),
        "spark.driver.extraJavaOptions": f"-Dderby.system.home={metastore}",
    }


#: The Spark JVMs' garbage collector: the throughput collector, not Java's default G1. A job is a
#: batch that ends; G1's concurrent work and write barriers bought pauses it does not need
#: (bench --parsed, 2,000,000 events, interleaved runs: 5-19% fewer CPU-seconds, 2-26% more
#: records/s in each of four pairs; docs/benchmarks.md).
JVM_GC_OPTIONS = "-XX:+UseParallelGC"
#: C2, the optimising compiler, takes a method only after ten times Java's default calls. A job runs
#: the record path millions of times, so that code still reaches C2 within its first tens of
#: thousands of records; what stays with C1 is the per-batch and per-task machinery (code
#: generation, task serialization, closure cleaning, SQL parsing), which ran often enough to pass
#: the default thresholds and never paid back its C2 compilation. Measured with a per-thread CPU
#: sampler beside ``bench --parsed --skip-idle --skip-optimize`` (2,000,000 events): C2 compilation
#: 20.3 -> 11-13 CPU-seconds; the run's 70.4-71.8 -> 65.3 CPU-seconds in two interleaved pairs at no
#: loss of records/s. Forty times the defaults, and raising C1's thresholds too, measured worse.
#: Loops keep Java's default threshold (Tier4BackEdgeThreshold): a stage's generated loop is called
#: once per task and runs over all its rows, so only its loop count can bring it to C2 early; at ten
#: times it ran C1's code over its first ~400,000 rows. Once the machinery had its own
#: scaling (:data:`MACHINERY_JIT_OPTIONS`), the default measured better: four interleaved pairs, the
#: last two in ABBA order, 107.4/90.2/101.5/104.2 -> 99.1/82.8/102.3/95.3 CPU-s, records/s higher
#: in all four (docs/benchmarks.md).
JVM_JIT_OPTIONS = (
    "-XX:Tier4InvocationThreshold=50000 -XX:Tier4MinInvocationThreshold=6000 -XX:Tier4CompileThreshold=150000"
)
#: Code that runs per batch or per task, never per record: Janino (it compiles the generated code),
#: Java serialization (tasks and their results), ASM (closure cleaning, lambda forms), ANTLR (the SQL
#: parser), Scala reflection. Under the raised thresholds it still took ~4 CPU-seconds of C2 in a
#: long run (JFR's compilation events, bench --parsed, 2,000,000 events).
MACHINERY_CLASSES = (
    "org/codehaus/janino/",
    "org/codehaus/commons/",
    "java/io/Object",
    "org/antlr/",
    "org/apache/xbean/",
    "jdk/internal/org/objectweb/",
    "scala/reflect/",
)
#: The machinery's thresholds, both compilers', at ten times the rest's. Only for a JVM that runs
#: C2: where C1 is the only compiler it merely keeps the machinery interpreted longer (a short run
#: at 20,000 events, C1 only: 20.6-23.8 -> 23.5-25.1 CPU-seconds).
MACHINERY_JIT_OPTIONS = " ".join(
    [
        # The JVM prints a line per CompileCommand on its standard output otherwise.
        "-XX:CompileCommand=quiet",
        *(f"-XX:CompileCommand=CompileThresholdScaling,{c}*.*,10.0" for c in MACHINERY_CLASSES),
    ]
)
#: What every Spark JVM of a job gets, the driver and (on a cluster) its executors; a driver also
#: gets :data:`MACHINERY_JIT_OPTIONS` in a long run (:func:`for_run`), an executor always (it runs C2).
JVM_OPTIONS = f"{JVM_GC_OPTIONS} {JVM_JIT_OPTIONS}"


#: Parquet's dictionary size per column chunk, in bytes (parquet-java's default: 1 MiB).
PARQUET_DICTIONARY_BYTES = 128 * 1024


def base_conf(
    lake_root: Path, metastore: str | None = None, *, extension: bool | None = None
) -> dict[str, str]:
    """Settings every job gets: Delta, small-machine defaults, a metastore that persists.

    ``metastore``: a Hive metastore service's URI; by default :data:`ENV_METASTORE_URI`'s, else Derby.
    ``extension``: whether kafkalake's JVM extension is among ``spark.sql.extensions``; by default
    :data:`~kafkalake.launch.jvm_extension.ENV_JVM_EXTENSION`'s answer (:func:`delta_settings`).
    """
    uri = metastore or metastore_uri()
    conf = {
        **delta_settings(extension),
        **local_fs_settings(extension),
        # As a setting, not --driver-memory (which would beat a topic's own spark_conf).
        "spark.driver.memory": "1g",
        # No shuffle in the ingest path; keep the few that happen (registration, checks) cheap.
        "spark.sql.shuffle.partitions": "2",
        # Delta rebuilds the table's snapshot after every commit with this many tasks (default
        # 50): on 2 cores that alone cost ~7 s per micro-batch. Raise it for tables whose log is huge.
        "spark.databricks.delta.snapshotPartitions": "2",
        # zstd: as fast as snappy here and 44% smaller bronze files (bench: 200k events, 7.3 vs 13 MB).
        "spark.sql.parquet.compression.codec": "zstd",
        # A column's Parquet dictionary gives up at 128 KiB instead of 1 MiB. A file of a batch holds
        # ~170,000 rows; a column of mostly distinct values (ids, sessions, keys, timestamps as text)
        # was hashed into a dictionary for its first ~60,000, then the dictionary was thrown away:
        # 18% of the write tasks' samples (JFR, bench --parsed). Columns of up to a few thousand
        # values (types, pages, currencies) keep theirs, and the files are as small (bench: 215 MiB
        # either way). bench --parsed, 2,000,000 events, in ABCCBA order: 1 MiB 65.5 / 69.4 CPU-s,
        # 128 KiB 60.9 / 62.6, no dictionary 58.6 / 57.0 (but 2% larger files, and none for readers
        # to filter and decode by).
        "spark.hadoop.parquet.dictionary.page.size": str(PARQUET_DICTIONARY_BYTES),
        # A JSON object with a key twice: the last value wins (as from_json, and JavaScript's
        # JSON.parse, read it) instead of Spark's variant refusing the record; bronze keeps the bytes.
        "spark.sql.variant.allowDuplicateKeys": "true",
        # A parsed batch is cached once and read by its writes within seconds: encoding the cache's
        # columns costs more than the memory it saves (bench --parsed, 2,000,000 events: 80.7 ->
        # 75.5 s, 145 -> 136 CPU-s, driver peak RSS 1,603 vs 1,615 MiB). What does not fit spills.
        "spark.sql.inMemoryColumnarStorage.compressed": "false",
        # PySpark's DataFrame debugging (on by default) wraps every function it builds a Column with
        # in three more calls to the JVM (the active session, this setting, the call site set and
        # cleared) to name the Python line in an error's query context. The jobs build their
        # parsing expressions anew for each micro-batch: `F.col("x") + F.lit(1)` took 3.3 ms and
        # 1.2 ms of the JVM's CPU on, 1.0 ms and 0.44 ms off.
        "spark.python.sql.dataFrameDebugging.enabled": "false",
        # Two costs paid per query or per commit for nothing here. Spark writes each query's plan
        # for the SQL tab in its fullest form (`formatted`) whether or not a UI is up (ours never
        # is); `simple` is the plan tree alone. Delta caches each table version's state serialized
        # (Java serialization, row by row, then read back by every query of that version); a
        # table's state is as large either way (its rows are byte arrays), so it is kept as rows.
        # A parsed topic's micro-batch (bronze, parsed, latest-row MERGE; 1,000 records) in the
        # tests' session, three interleaved pairs of ten batches: 4.71/4.79/4.88 -> 4.29/4.70/3.98
        # JVM CPU-s a batch.
        "spark.sql.ui.explainMode": "simple",
        "spark.databricks.delta.snapshotCache.storageLevel": "MEMORY_AND_DISK",
        # A session with the metastore (registration, show_table) has Hive make a folder for the
        # resources it would download (`ADD JAR` from a URL, which no job does), named by its
        # session id in the temp folder, and never remove it: an empty `/tmp/<uuid>_resources`
        # left behind by every such run. One folder, made again by each run, instead.
        "spark.hadoop.hive.downloaded.resources.dir": "${java.io.tmpdir}/kafkalake-hive-resources",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.warehouse.dir": str(lake_root / "_warehouse"),
        **(hive_metastore_conf(uri) if uri else derby_metastore_conf(lake_root)),
        **redaction_conf(),
    }
    # The class archive made at setup halves the driver's start-up (launch/class_archive).
    java_options = [
        conf.get("spark.driver.extraJavaOptions", ""),
        JVM_OPTIONS,
        *driver_java_options(),
    ]
    extra = os.environ.get(ENV_DRIVER_JAVA_OPTIONS, "")
    if options := merged_java_options(" ".join(o for o in java_options if o), extra):
        conf["spark.driver.extraJavaOptions"] = options
    conf["spark.executor.extraJavaOptions"] = f"{JVM_OPTIONS} {MACHINERY_JIT_OPTIONS}"
    return conf


#: A run that reads at most this many records, with no table care due, starts its driver with
#: Java's quick compiler only (:func:`for_run`).
SHORT_RUN_RECORDS = 500_000
#: C1 only: it compiles at once and cheaply, where C2's optimising compilations of the same code
#: pay back only over millions of records. The larger code cache: C1 compiles more methods, and a
#: full cache makes the JVM flush and compile again.
SHORT_RUN_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=256m"
#: A choice of compilers already made in a topic's own settings, which then stands.
_JIT_CHOSEN = re.compile(r"-XX:(?:TieredStopAtLevel|[+-]TieredCompilation)\b")


def is_short_run(records: int, care_due: bool) -> bool:
    """Whether a run is short enough for the quick compiler: it reads at most
    :data:`SHORT_RUN_RECORDS` records, and no table care (which reads whole tables) is due. A run
    whose backlog is unknown is not asked about: it is long."""
    return records <= SHORT_RUN_RECORDS and not care_due


def for_run(conf: Mapping[str, str], short: bool) -> dict[str, str]:
    """A job's settings for one run: the driver's options with :data:`SHORT_RUN_JAVA_OPTIONS` added
    when the run is short, :data:`MACHINERY_JIT_OPTIONS` when it is long; unless the settings
    already choose the compilers (e.g. the test suite's C1 only), then as they are.

    Measured with ``python -m kafkalake.dev.bench --parsed --skip-idle --skip-optimize``, two
    interleaved pairs each (docs/benchmarks.md): 20,000 events 31-32 -> 18 CPU-s; 200,000 events 40-42
    -> 28 CPU-s; 2,000,000 events 69-74 -> 89 CPU-s, so long runs keep both compilers.
    """
    options = conf.get("spark.driver.extraJavaOptions", "")
    if _JIT_CHOSEN.search(options):
        return dict(conf)
    added = SHORT_RUN_JAVA_OPTIONS if short else MACHINERY_JIT_OPTIONS
    return {**conf, "spark.driver.extraJavaOptions": f"{options} {added}".strip()}


#: What a topic whose tables are on an object store needs on top of the base settings.
OBJECT_STORE_CONF = {
    # The streaming checkpoint's default manager writes through Hadoop's FileContext, whose create
    # wants the parent "directory" to exist: on S3 a folder exists only while something is in it
    # (or a marker object that not every S3-compatible server keeps), so the Kafka source's first
    # offsets file fails with FileNotFoundException. The FileSystem-based manager creates the file
    # wherever it is asked to (temp file, then a rename that refuses an existing batch file).
    "spark.sql.streaming.checkpointFileManagerClass": (
        "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
    ),
}


#: Settings that hold JVM options: a topic's own are added after the project's, not put in their
#: place (which dropped the metastore's home, the class archive and the collector).
JAVA_OPTION_SETTINGS = ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions")
_GC_CHOICE = re.compile(r"-XX:\+Use\w+GC\b")


def merged_java_options(project: str, own: str) -> str:
    """The project's JVM options, then a topic's own, which win where they set the same thing (the
    JVM takes an option's last value). Where the topic picks a collector, the project's is left
    out: a JVM given two refuses to start."""
    if _GC_CHOICE.search(own):
        project = " ".join(part for part in project.split(" ") if part != JVM_GC_OPTIONS)
    return f"{project.strip()} {own.strip()}".strip()


def topic_conf(topic: TopicConfig, lake_root: Path) -> dict[str, str]:
    """Base settings (and the object store's, for such a topic), then the topic's own ``spark_conf``;
    its JVM options after the project's (:func:`merged_java_options`)."""
    store = OBJECT_STORE_CONF if topic.on_object_store else {}
    conf = {**base_conf(lake_root), **store}
    for key, value in topic.spark_conf:
        if key in JAVA_OPTION_SETTINGS:
            conf[key] = merged_java_options(conf.get(key, ""), value)
        elif key == DRIVER_CLASS_PATH and conf.get(key):
            # After the project's jar, not in its place: the file system classes must stay there.
            conf[key] = f"{conf[key]}{os.pathsep}{value}"
        else:
            conf[key] = value
    return conf
