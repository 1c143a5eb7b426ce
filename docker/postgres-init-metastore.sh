#!/bin/bash
# The first start of the postgres service: Airflow's and the metastore's roles and databases, each
# with its own password from .env (read from the environment, never written to a file). psql takes
# them from its environment (\getenv, psql 15): on its command line (-v) they would show in `ps`.
set -euo pipefail
: "${AIRFLOW_DB_PASSWORD:?}" "${KAFKALAKE_METASTORE_DB_PASSWORD:?}"
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" <<'SQL'
\getenv airflow_pw AIRFLOW_DB_PASSWORD
\getenv metastore_pw KAFKALAKE_METASTORE_DB_PASSWORD
CREATE ROLE airflow LOGIN PASSWORD :'airflow_pw';
ALTER DATABASE airflow OWNER TO airflow;
CREATE ROLE hive LOGIN PASSWORD :'metastore_pw';
CREATE DATABASE metastore OWNER hive;
SQL
