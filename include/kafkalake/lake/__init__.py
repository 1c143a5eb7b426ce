"""The lake without a JVM: checkpoints, the run lock, schema history, and delta-rs reads of tables.

What a table holds and whether it needs care is decided here, cheaply, for the Airflow side and the
jobs alike.
"""
