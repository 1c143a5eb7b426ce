"""Starting a Spark application: the JVM side of a job's launch, apart from the pure layers below.

The jars Spark gets (:mod:`.jars`: resolved from Maven Central once, at set-up), kafkalake's own
Spark code compiled into a jar (:mod:`.jvm_extension`) and the driver's class archive
(:mod:`.class_archive`). Network and compiler tooling live here, never in :mod:`kafkalake.core`.
"""
