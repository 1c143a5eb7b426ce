"""The bottom layer: what every other layer shares and nothing here imports from them.

Errors and failure kinds (:mod:`.errors`), durations, where things live on disk (:mod:`.paths`,
:mod:`.jars`), the run metrics' model (:mod:`.metrics`) and what one DAG run does (:mod:`.run_mode`).
Pure Python: no Airflow, no Spark, no network.
"""
