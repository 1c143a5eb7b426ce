"""Airflow DAG file: one ingest DAG per topic in the kafkalake catalog (include/topics.yaml).

The logic lives in the ``kafkalake`` package (include/kafkalake); this file only puts the
generated DAGs where Airflow's DAG processor finds them.
"""

from kafkalake.airflow.dag_factory import register_dags

register_dags(globals())
