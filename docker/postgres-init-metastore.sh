#!/bin/bash
# The first start of the postgres service: Airflow's and the metastore's roles and databases, each
# with its own password, read from its compose secret (the files named by AIRFLOW_DB_PASSWORD_FILE and
# KAFKALAKE_METASTORE_DB_PASSWORD_FILE). psql gets them in its own environment only (\getenv, psql 15):
# on its command line (-v) they would show in `ps`.
set -euo pipefail
: "${AIRFLOW_DB_PASSWORD_FILE:?}" "${KAFKALAKE_METASTORE_DB_PASSWORD_FILE:?}"
AIRFLOW_DB_PASSWORD="$(<"$AIRFLOW_DB_PASSWORD_FILE")" \
KAFKALAKE_METASTORE_DB_PASSWORD="$(<"$KAFKALAKE_METASTORE_DB_PASSWORD_FILE")" \
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" <<'SQL'
\getenv airflow_pw AIRFLOW_DB_PASSWORD
\getenv metastore_pw KAFKALAKE_METASTORE_DB_PASSWORD
CREATE ROLE airflow LOGIN PASSWORD :'airflow_pw';
ALTER DATABASE airflow OWNER TO airflow;
CREATE ROLE hive LOGIN PASSWORD :'metastore_pw';
CREATE DATABASE metastore OWNER hive;
SQL
