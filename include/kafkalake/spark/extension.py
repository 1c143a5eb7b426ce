"""Whether this Spark session has kafkalake's JVM extension (:mod:`kafkalake.launch.jvm_extension`).

The launch layer decides (``KAFKALAKE_JVM_EXTENSION``) and puts the extension's class among the
job's ``spark.sql.extensions``, or leaves it out; the Spark side never reads the environment, it
asks its session, so one source of truth decides. Without the extension, the JSON functions
(:mod:`.json_functions`) and the idempotent append (:func:`.batch_writer.write_idempotent`) use
Spark's and Delta's public APIs instead.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

from kafkalake.launch.jvm_extension import loaded_by

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: Per session: ``spark.sql.extensions`` is a static setting, fixed when the session's JVM started.
_loaded: weakref.WeakKeyDictionary[SparkSession, bool] = weakref.WeakKeyDictionary()


def loaded(spark: SparkSession | None = None) -> bool:
    """Whether ``spark`` (by default the active session) loaded kafkalake's JVM extension."""
    if spark is None:
        from pyspark.sql import SparkSession

        spark = SparkSession.active()
    answer = _loaded.get(spark)
    if answer is None:
        answer = _loaded[spark] = loaded_by(spark.conf.get("spark.sql.extensions", "") or "")
    return answer


def resolve(use_extension: bool | None, spark: SparkSession | None = None) -> bool:
    """``use_extension`` when given (a test compares both ways), else the session's answer."""
    return loaded(spark) if use_extension is None else use_extension
