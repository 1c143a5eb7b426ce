"""The topic catalog, validated once: YAML in, frozen objects out (above :mod:`kafkalake.core`).

:mod:`.catalog` loads ``include/topics.yaml`` into :class:`~.catalog.TopicConfig`; the ``parsed:`` and
``maintenance:`` blocks, the schedule math and the names and paths of a topic's tables are derived
here, and Spark settings that would be credentials are refused (:mod:`.spark_credentials`). Read at
DAG parse time: files and environment variables only. A job's Spark settings and its spark-submit
are :mod:`kafkalake.launch`'s.
"""
