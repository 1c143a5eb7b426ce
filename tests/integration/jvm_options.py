"""The driver JVM options of the suite's Spark JVMs: tests/integration/conftest.py sets them, through
``KAFKALAKE_DRIVER_JAVA_OPTIONS``, for every in-process session, job host and job the tests start."""

from kafkalake.launch.spark_conf import SHORT_RUN_JAVA_OPTIONS

#: C1 only. The tests' Spark jobs are short and small: C2's compilations never pay back. C1 only cut
#: a two-job test's CPU time from 192 to 140 s for the same wall time (launch/spark_conf). It also
#: shrinks the JVM's code cache to 48 MiB, which the in-process session (hundreds of distinct queries
#: over a worker's run) fills: the sweeper then flushed compiled code and C1 compiled it again. With
#: 256 MiB, test_reingest's first test: JVM 131.8 -> 111.0 CPU-s (sweeper 11.9 -> 0, C1 17.7 -> 9.4).
C1_ONLY = SHORT_RUN_JAVA_OPTIONS  # the same options a production run of few records gets

#: Spark's expressions interpreted, not compiled: ``spark.*`` system properties are read into every
#: driver's SparkConf. A test's queries run once, over tens to thousands of rows: generating each
#: plan's Java source (generated again even when its compiled class is cached: the source is the
#: cache's key) and Janino's compile cost more than the rows. A profile of test_parsed_tables'
#: session JVM (Java Flight Recorder): 23% of its samples generating source, 9% in Janino.
#: test_parsing alone: 68.4 -> 46.1 CPU-s. What production runs is still tested: the project's own
#: generated code compiled and interpreted (test_json_functions and test_protobuf_decode set
#: helpers.COMPILED), and test_ingest_dag's DAG runs with Spark's defaults (C1_ONLY alone).
#: Throughput is `make bench`'s, which runs the jobs as production does.
INTERPRETED = "-Dspark.sql.codegen.factoryMode=NO_CODEGEN -Dspark.sql.codegen.wholeStage=false"

#: The serial collector instead of production's throughput collector (launch/spark_conf.JVM_GC_OPTIONS,
#: which this replaces): its parallel threads cost more CPU than one thread does on the tests' small,
#: short-lived heaps. test_parsing + test_replay (an in-process session, a job host, spark-submits),
#: one after the other, interleaved twice: 160 and 174 CPU-s with the throughput collector, 141 and
#: 146 with the serial one. test_ingest_dag keeps production's (C1_ONLY alone).
#: Its young generation at 256 MiB instead of a third of the initial heap (~120 MiB): a session JVM
#: collected it ~540 times in ten minutes (JFR, 11.3 s of pauses), each collection copying what
#: is alive, whatever was allocated. A parsed topic's micro-batch in the tests' session, three
#: interleaved pairs of ten batches: 34.9/33.9/36.9 -> 30.7/32.7/36.2 JVM CPU-s.
SERIAL_GC = "-XX:+UseSerialGC -Xmn256m"
