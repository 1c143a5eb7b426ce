"""Airflow plugin entry file: the kafkalake freshness view (kafkalake.airflow.freshness_view).

Airflow's plugins folder points here (AIRFLOW__CORE__PLUGINS_FOLDER, set by kafkalake.dev.local_airflow
and docker-compose.yml); the plugin itself lives in the ``kafkalake`` package.
"""

from kafkalake.airflow.freshness_view import FreshnessViewPlugin

__all__ = ["FreshnessViewPlugin"]
