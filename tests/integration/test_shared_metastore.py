"""Registration into a shared Hive metastore service (4.0.1 on PostgreSQL) instead of embedded Derby.

Two topics' ``register_table`` jobs run at the same moment, each its own spark-submit and JVM, with
no file lock between them (the lock is Derby's, and a metastore service does not need it): both
succeed. Then a new Spark session, in a JVM of its own, reads both tables by name through the
metastore. The tables are small Delta tables made with delta-rs: what is under test is the catalog.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from kafkalake.config.catalog import load_catalog
from kafkalake.dev.metastore import LocalMetastore
from kafkalake.dev.postgres import LocalPostgres
from kafkalake.launch import jars, jobs
from kafkalake.launch.spark_conf import ENV_METASTORE_URI

pytestmark = [pytest.mark.integration, pytest.mark.services]

TOPICS = ("ms-alpha", "ms-beta")
CATALOG = "topics:\n" + "".join(f"  - name: {t}\n    freshness_sla: 6h\n" for t in TOPICS)
JOB_TIMEOUT = 600  # two JVMs at once on 2 busy cores

# A new JVM, whose only link to the registering jobs is the metastore: each table's rows, by name.
READ_BY_NAME = """
import json, sys
from pyspark.sql import SparkSession
from kafkalake.launch.spark_conf import base_conf
from kafkalake.launch.jars import jar_files
from pathlib import Path
builder = SparkSession.builder.master("local[1]").appName("kafkalake-read-by-name")
conf = {**base_conf(Path(sys.argv[1]), sys.argv[2]), "spark.jars": ",".join(map(str, jar_files("spark")))}
for key, value in conf.items():
    builder = builder.config(key, value)
spark = builder.enableHiveSupport().getOrCreate()
print(json.dumps({name: spark.table(name).count() for name in sys.argv[3:]}))
spark.stop()
"""


@pytest.fixture(scope="module")
def metastore(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalMetastore]:
    jars.resolve(group="metastore")
    root = tmp_path_factory.mktemp("metastore")
    postgres = LocalPostgres(root / "postgres").start()
    service = LocalMetastore(root / "service", postgres.database("metastore", user="hive"))
    service.directory.mkdir()
    try:
        yield service.start()
    finally:
        service.stop()
        postgres.stop(remove=True)


@pytest.mark.timeout(JOB_TIMEOUT + 600)
def test_two_topics_register_at_once_and_a_new_session_reads_both_by_name(metastore, tmp_path, monkeypatch):
    lake, catalog = tmp_path / "lake", tmp_path / "topics.yaml"
    catalog.write_text(CATALOG)
    topics = [load_catalog(catalog, lake).topic(name) for name in TOPICS]
    for rows, topic in enumerate(topics, start=3):
        write_deltalake(topic.path, pa.table({"n": list(range(rows))}))
    # jobs.command reads the URI here (the jobs' --conf), the jobs read it from their environment.
    monkeypatch.setenv(ENV_METASTORE_URI, metastore.uri)
    env = jobs.environment(catalog, lake)

    running = [
        subprocess.Popen(
            jobs.command("register_table", topic.name, catalog=catalog, lake=lake),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for topic in topics
    ]
    outputs = [job.communicate(timeout=JOB_TIMEOUT)[0] for job in running]
    for topic, job, output in zip(topics, running, outputs, strict=True):
        assert job.returncode == 0, f"{topic.name}:\n{output[-4000:]}"
        assert f"registered {topic.qualified_table} at {topic.path}" in output, output[-2000:]
    assert not (lake / "_metastore" / "metastore_db").exists(), "Derby was used"

    names = [topic.qualified_table for topic in topics]
    read = subprocess.run(
        [sys.executable, "-c", READ_BY_NAME, str(lake), metastore.uri, *names],
        env=env,
        capture_output=True,
        text=True,
        timeout=JOB_TIMEOUT,
        check=False,
    )
    assert read.returncode == 0, read.stderr[-4000:]
    assert json.loads(read.stdout.strip().splitlines()[-1]) == {names[0]: 3, names[1]: 4}
