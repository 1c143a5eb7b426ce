"""Which jobs a warm job host takes, and the runtime settings it gives each (dev/job_host)."""

from __future__ import annotations

import socket
import threading

from kafkalake.dev.job_host import S3A_PREFIX, Host, plan
from kafkalake.lake import store_settings
from kafkalake.launch.job_host import EXIT

HOST = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.shuffle.partitions": "2",
}
RUNTIME = {"spark.sql.shuffle.partitions", "spark.databricks.delta.snapshotPartitions"}


def planned(conf: dict[str, str], jars: list[str] | None = None) -> tuple[dict[str, str], str | None]:
    return plan(conf, jars or ["/j/delta.jar"], host_conf=HOST, host_jars={"/j/delta.jar", "/j/avro.jar"},
                modifiable=RUNTIME.__contains__)  # fmt: skip


def test_the_hosts_own_settings_and_the_launchs_need_nothing():
    conf = {
        **HOST,
        "spark.driver.memory": "4g",
        "spark.driver.extraJavaOptions": "-Xss4m",
        "spark.app.name": "x",
    }
    assert planned(conf) == ({}, None)


def test_a_runtime_setting_of_the_job_is_set_on_its_session():
    assert planned({**HOST, "spark.sql.shuffle.partitions": "8"}) == (
        {"spark.sql.shuffle.partitions": "8"},
        None,
    )


def test_the_object_stores_checkpoint_manager_goes_on_the_jobs_session():
    """Not a runtime setting to Spark's isModifiable, but read from the session's Hadoop
    configuration, which the session's settings make up."""
    manager = "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
    conf = {**HOST, "spark.sql.streaming.checkpointFileManagerClass": manager}
    assert planned(conf) == ({"spark.sql.streaming.checkpointFileManagerClass": manager}, None)


def test_a_static_setting_that_differs_is_refused_by_name():
    conf = {**HOST, "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension,other.Ext"}
    assert planned(conf) == ({}, "static setting spark.sql.extensions differs from the host's")
    assert planned({"spark.sql.catalogImplementation": "hive"})[1] == (
        "static setting spark.sql.catalogImplementation differs from the host's"
    )


def test_another_lakes_metastore_settings_are_no_bar_the_hosted_jobs_never_open_it():
    derby = "jdbc:derby:;databaseName=/other/metastore_db"
    conf = {
        **HOST,
        "spark.sql.warehouse.dir": "/other/_warehouse",
        "spark.hadoop.javax.jdo.option.ConnectionURL": derby,
    }
    assert planned(conf) == ({}, None)


def test_a_jar_the_host_lacks_is_refused():
    assert planned(HOST, ["/j/delta.jar", "/j/hadoop-aws.jar"]) == (
        {},
        "the host lacks jar /j/hadoop-aws.jar",
    )
    assert planned(HOST, ["/j/avro.jar"]) == ({}, None)


def test_every_hadoop_setting_the_settings_give_is_one_a_job_host_resets():
    """A job host sets back every S3A_PREFIX setting before each job (dev/job_host): a key outside
    it would carry one job's endpoint or credentials into the next job's S3A."""
    full = store_settings.StorageSettings(
        endpoint="http://127.0.0.1:9000",
        region="eu-west-1",
        access_key="AKIA1",
        secret_key="secret",
        session_token="tok",
    )
    assert len(full.hadoop_conf()) == 8
    assert all(key.startswith(S3A_PREFIX) for key in full.hadoop_conf())


def test_a_task_told_its_jobs_end_finds_the_host_free_for_its_next_job():
    """The host frees itself before it tells the task the job has ended: a task sending its next job
    at once must not be refused as busy with the one it was told is over (a CI run saw it)."""
    host = object.__new__(Host)
    host.busy = threading.Lock()
    host._run = lambda conn, wanted: f"{EXIT}0\n".encode()  # type: ignore[method-assign]
    ours, theirs = socket.socketpair()
    with ours:
        ours.sendall(b"{}\n")
        server = threading.Thread(target=host.serve, args=(theirs,))
        server.start()
        assert ours.makefile("rb").readline() == f"{EXIT}0\n".encode()
        free = host.busy.acquire(blocking=False)
        server.join(10)
    assert free, "the host was still busy with a job whose end it had already told"
