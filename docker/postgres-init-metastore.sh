#!/bin/bash
# The first start of the postgres service: Airflow's and the metastore's roles and databases, each
# with its own password from .env (read from the environment, never written to a file).
set -euo pipefail
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
  -v airflow_pw="$AIRFLOW_DB_PASSWORD" -v metastore_pw="$KAFKALAKE_METASTORE_DB_PASSWORD" <<'SQL'
CREATE ROLE airflow LOGIN PASSWORD :'airflow_pw';
ALTER DATABASE airflow OWNER TO airflow;
CREATE ROLE hive LOGIN PASSWORD :'metastore_pw';
CREATE DATABASE metastore OWNER hive;
SQL
