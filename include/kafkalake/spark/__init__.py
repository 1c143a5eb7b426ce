"""The Spark side: everything that runs inside a job's Spark application (``jobs/``).

The stream (:mod:`.stream`) and its per-batch writer (:mod:`.batch_writer`), parsing, the latest
table, table settings and care, schema refresh, registration, replay and re-ingest. Never imports
Airflow; the jobs report failures through :mod:`kafkalake.core.errors`.
"""
