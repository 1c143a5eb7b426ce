"""Starting a Spark application for one of the project's jobs, apart from the pure layers below.

The jars Spark gets (:mod:`.jars`: resolved from Maven Central once, at set-up), kafkalake's own
Spark code compiled into a jar (:mod:`.jvm_extension`), the driver's class archive
(:mod:`.class_archive`), a job's Spark settings (:mod:`.spark_conf`), the private file a task hands
its job the secrets in (:mod:`.handover`), and the one builder of a job's spark-submit
(:mod:`.submit`), which the Airflow operators hand to the Spark provider and :mod:`.jobs` renders as
a command line. Network and compiler tooling live here, never in :mod:`kafkalake.core`. Beside
:mod:`kafkalake.kafka`, below both sides: the Airflow operators launch jobs, the jobs read the
hand-over file. Never imports Airflow, pyspark or delta.
"""
