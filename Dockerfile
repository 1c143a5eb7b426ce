# kafkalake's image: the official Airflow image at a pinned version, with Java, this project and its
# JVM jars (Spark's Delta and Kafka connector, the Hive metastore's) baked in at build time: nothing
# is installed or downloaded when a container starts. docker-compose.yml runs every Airflow
# component, the Spark master and worker and the Hive metastore from it.
#
#   docker compose build
#
# Keep the tag's Airflow and Python versions equal to requirements.txt's pins.
FROM apache/airflow:3.3.2-python3.11

USER root
# A JRE for spark-submit (the DAGs' jobs), the Spark master/worker and the metastore. The symlink
# gives JAVA_HOME one path on every architecture.
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
 && ln -s "$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")" /usr/lib/jvm/kafkalake-java \
 && apt-get clean && rm -rf /var/lib/apt/lists/*
ENV JAVA_HOME=/usr/lib/jvm/kafkalake-java \
    KAFKALAKE_HOME=/opt/kafkalake \
    KAFKALAKE_JARS_DIR=/opt/kafkalake/.jars
RUN mkdir -p /opt/kafkalake /opt/lake && chown -R airflow:0 /opt/kafkalake /opt/lake

# From here on as the image's unprivileged user (uid 50000), as the containers run.
USER airflow
WORKDIR /opt/kafkalake
COPY --chown=airflow:0 requirements.txt pyproject.toml ./
COPY --chown=airflow:0 include ./include
COPY --chown=airflow:0 dags ./dags
COPY --chown=airflow:0 jobs ./jobs
# requirements.txt pins apache-airflow to the image's own version, so pip keeps the image's Airflow.
RUN pip install --no-cache-dir -r requirements.txt -e . \
 && pip check
# The jars, resolved from Maven Central now, once: the containers never fetch anything. Not the
# schema registry the tests run (built with Maven, which the image has no need of).
RUN python -m kafkalake.launch.jars --no-registry
