"""The topic catalog, validated once: YAML in, frozen objects out (above :mod:`kafkalake.core`).

:mod:`.catalog` loads ``include/topics.yaml`` into :class:`~.catalog.TopicConfig`; the ``parsed:`` and
``maintenance:`` blocks, the schedule math, the names and paths of a topic's tables, its Spark
settings and the command that launches a job are derived here. Read at DAG parse time: files and
environment variables only.
"""
