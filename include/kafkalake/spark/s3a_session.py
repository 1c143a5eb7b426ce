"""A job's Spark session on the object store: Hadoop's S3A gets the settings the task handed over.

The settings (endpoint, credentials) arrive in a private file the job deletes on read
(:func:`kafkalake.lake.store_settings.use_file_from_environment`), and go on the session's Hadoop
configuration, not on Spark's: never on the command line, and not among the settings Spark prints
in its event log. Without a file, S3A finds credentials as usual (its provider chain: environment
variables, instance or workload identity).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafkalake.lake import store_settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def configure(spark: SparkSession) -> store_settings.StorageSettings:
    """Use the job's object-store settings in this process (delta-rs, pyarrow) and in Spark's S3A.

    Call right after the session is built, before any table is touched: S3A caches a filesystem
    per bucket with the settings it saw first.
    """
    settings = store_settings.use_file_from_environment()
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()  # pyspark's only way in
    for key, value in settings.hadoop_conf().items():
        hadoop.set(key, value)
    return settings
