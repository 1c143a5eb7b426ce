"""The Airflow side: one DAG per topic (:mod:`.dag_factory`), its operators (:mod:`.tasks`),
connections, assets, pools, deadline alerts and metrics. Never imports Spark: jobs run in their own
process through ``spark-submit``.
"""
