"""The topic catalog, validated once: YAML in, frozen objects out (above :mod:`kafkalake.core`).

:mod:`.catalog` loads ``include/topics.yaml`` into :class:`~.topic.TopicConfig` (its YAML read by
:mod:`.yaml_reading`, each topic's entry checked by :mod:`.topic_validation`, clashes between topics
found by :mod:`.location_clashes`); the ``parsed:`` and
``maintenance:`` blocks, the schedule math and the names and paths of a topic's tables are derived
here, and Spark settings that would be credentials are refused (:mod:`.spark_credentials`). Read at
DAG parse time: files and environment variables only. A job's Spark settings and its spark-submit
are :mod:`kafkalake.launch`'s.
"""
