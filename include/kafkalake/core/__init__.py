"""The bottom layer: what every other layer shares and nothing here imports from them.

Errors and failure kinds (:mod:`.errors`), durations, where things live on disk (:mod:`.paths`),
the run metrics' model (:mod:`.metrics`) and what one DAG run does (:mod:`.run_mode`). Pure Python:
no Airflow, no Spark, no network, no subprocess (the jars and the compiler are :mod:`kafkalake.launch`'s).
"""
