"""What an object store costs per commit, measured: the same appends to a local Delta table and to
one on a real S3 API server (s3proxy on loopback), in one Spark session.

    python -m kafkalake.dev.store_latency [--commits 10] [--rows 20000] [--dir .bench/store-latency]

For each store it prints the median and slowest of: a Delta append (write + commit) through Spark
(S3A for the store) and, on the store, the S3 requests one append sends (S3A's own count), a
delta-rs open of the table with its version (what every pre-flight and
idle-skip check pays), and, on the store, the run lock's take, renewal and release (boto3). The
first append of each table creates it and is not counted. s3proxy on loopback answers in well
under a millisecond; a real store adds its own round trip (tens of milliseconds on AWS S3) to each
of the requests a commit makes, so read the store's figures as a floor. docs/scale.md quotes them.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from deltalake import DeltaTable

from kafkalake.core.paths import REPO_ROOT
from kafkalake.dev.s3_server import LocalS3
from kafkalake.lake import store_settings
from kafkalake.lake.lease_lock import LeaseLock
from kafkalake.launch.jars import jar_files
from kafkalake.launch.spark_conf import OBJECT_STORE_CONF, base_conf

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# pyspark is imported only in measure(), the one function that starts a Spark session (a JVM).


def timed(action: Callable[[], object], times: int) -> list[float]:
    seconds = []
    for _ in range(times):
        started = time.perf_counter()
        action()
        seconds.append(time.perf_counter() - started)
    return seconds


def summary(seconds: list[float]) -> dict[str, float]:
    return {"median_s": round(statistics.median(seconds), 3), "max_s": round(max(seconds), 3)}


def s3a_requests(spark: SparkSession, bucket: str) -> int:
    """Requests S3A has sent to the bucket so far (its storage statistics)."""
    jvm = spark._jvm  # pyspark's only way in
    assert jvm is not None
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    filesystem = jvm.org.apache.hadoop.fs.FileSystem.get(jvm.java.net.URI(f"s3a://{bucket}/"), hadoop)
    return int(filesystem.getStorageStatistics().getLong("store_io_request") or 0)


def measure(workdir: Path, commits: int, rows: int) -> dict[str, dict[str, dict[str, float]]]:
    from pyspark.sql import SparkSession

    shutil.rmtree(workdir, ignore_errors=True)
    server = LocalS3(workdir / "s3").start()
    spark = None
    try:
        settings = server.storage_settings()
        store_settings.use(settings)
        conf = {
            **base_conf(workdir / "lake"),
            **OBJECT_STORE_CONF,
            "spark.jars": ",".join(str(p) for p in [*jar_files("spark"), *jar_files("s3a")]),
        }
        builder = SparkSession.builder.master("local[2]").appName("kafkalake-store-latency")
        for key, value in conf.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("WARN")
        hadoop = spark.sparkContext._jsc.hadoopConfiguration()  # pyspark's only way in
        for key, value in settings.hadoop_conf().items():
            hadoop.set(key, value)
        # About the size of a micro-batch of small events: one file per task, two tasks.
        batch = spark.range(rows, numPartitions=2).selectExpr("id", "repeat('x', 250) AS payload")
        results: dict[str, dict[str, dict[str, float]]] = {}
        for name, location in {
            "local": str(workdir / "lake" / "t"),
            "s3proxy": f"s3a://{server.bucket}/latency/t",
        }.items():
            batch.write.format("delta").save(location)  # creates the table; not counted
            options = store_settings.delta_options(location)

            def append(at: str = location) -> None:
                batch.write.format("delta").mode("append").save(at)

            def open_version(at: str = location, given: dict[str, str] | None = options) -> int:
                return int(DeltaTable(at, storage_options=given).version())

            before = s3a_requests(spark, server.bucket)
            results[name] = {"delta_append_commit": summary(timed(append, commits))}
            if location.startswith("s3a://"):
                sent = s3a_requests(spark, server.bucket) - before
                results[name]["s3_requests_per_append"] = {
                    "median_s": sent / commits,
                    "max_s": sent / commits,
                }
            results[name]["delta_rs_open_version"] = summary(timed(open_version, commits))
        lock = LeaseLock(f"s3a://{server.bucket}/latency/t/_kafkalake/checkpoint.lock")
        takes, renewals, releases = [], [], []
        for _ in range(commits):
            started = time.perf_counter()
            lock.take()
            takes.append(time.perf_counter() - started)
            renewals += timed(lock.renew_once, 1)
            started = time.perf_counter()
            lock.release()
            releases.append(time.perf_counter() - started)
            lock = LeaseLock(lock.location)
        results["s3proxy"] |= {
            "lock_take": summary(takes),
            "lock_renew": summary(renewals),
            "lock_release": summary(releases),
        }
        return results
    finally:
        if spark is not None:
            spark.stop()
        server.stop()
        store_settings.use(store_settings.StorageSettings())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=10, help="timed appends (and reads) per store")
    parser.add_argument("--rows", type=int, default=20_000, help="rows per append")
    parser.add_argument("--dir", type=Path, default=REPO_ROOT / ".bench" / "store-latency")
    args = parser.parse_args(argv)
    results = measure(args.dir, args.commits, args.rows)
    print(f"{'':26} {'local':>18} {'s3proxy':>18}")
    figures = (
        "delta_append_commit",
        "s3_requests_per_append",
        "delta_rs_open_version",
        "lock_take",
        "lock_renew",
        "lock_release",
    )
    for figure in figures:
        cells = []
        for store in ("local", "s3proxy"):
            found = results[store].get(figure)
            if found is None:
                cells.append("-")
            elif figure == "s3_requests_per_append":
                cells.append(f"{found['median_s']:.1f}")
            else:
                cells.append(f"{found['median_s']:.3f} (max {found['max_s']:.3f})")
        print(f"{figure:26} {cells[0]:>18} {cells[1]:>18}")
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
