"""Make the Spark driver's class archive (``make setup`` runs this after resolving the jars).

One training run of ``jobs/train_class_archive.py`` with ``-XX:ArchiveClassesAtExit``; the archive
is written under a temporary name, checked by a JVM that maps it, and only then put in place with
its stamp (:mod:`kafkalake.launch.class_archive` says when a JVM may use it). Up to date → nothing to
do. A failed training leaves no archive, and the jobs start the ordinary way.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from kafkalake.core.paths import catalog_path, jars_dir, jobs_dir, metastore_dir
from kafkalake.dev import producer
from kafkalake.dev.broker import LocalKafka
from kafkalake.launch.class_archive import (
    DUMP_OPTION,
    USE_OPTION,
    archive_file,
    fingerprint,
    java_binary,
    stamp_file,
    usable_archive,
)
from kafkalake.launch.jars import jar_files
from kafkalake.launch.spark_conf import JVM_GC_OPTIONS, base_conf
from kafkalake.launch.submit import job_environment

log = logging.getLogger(__name__)


class ClassArchiveError(RuntimeError):
    pass


#: The topic the training run reads from its own broker.
TRAINING_TOPIC = "class-archive"


@contextlib.contextmanager
def _training_broker(scratch: Path) -> Iterator[str | None]:
    """A broker with a small topic for the training run to read; None if none could start.

    Every ingest reads Kafka first: without this, the ~1,350 classes of Kafka's client (admin
    client, consumer, fetcher, record batches) were loaded from their jar in each run's first batch.
    Training without them only costs that speed, so a broker that fails to start is no failure.
    """
    broker = LocalKafka(scratch / "kafka", heap="256M")
    try:
        broker.start()
        producer.create_topic(broker.bootstrap_servers, TRAINING_TOPIC, partitions=2)
        records = [
            producer.Record(f"k{i % 7}".encode(), json.dumps({"n": i}).encode(), i % 2, [("h", b"v")])
            for i in range(100)
        ]
        producer.produce(broker.bootstrap_servers, TRAINING_TOPIC, records)
    except Exception as err:
        log.warning("training the class archive without Kafka: its broker did not serve (%s)", err)
        broker.stop()
        yield None
        return
    try:
        yield broker.bootstrap_servers
    finally:
        broker.stop()


def _training_command(archive: Path, scratch: Path, kafka: str | None = None) -> list[str]:
    lake = scratch / "lake"
    conf = base_conf(lake)
    # Replaces the use of an older archive: a JVM cannot dump while it maps a dynamic archive.
    conf["spark.driver.extraJavaOptions"] = (
        f"-Dderby.system.home={metastore_dir(lake)} {JVM_GC_OPTIONS} {DUMP_OPTION}{archive}"
    )
    cmd = [str(Path(sys.executable).parent / "spark-submit"), "--master", "local[*]"]
    for key, value in conf.items():
        cmd += ["--conf", f"{key}={value}"]
    cmd += ["--jars", ",".join(str(p) for p in jar_files("spark"))]
    job = [str(jobs_dir() / "train_class_archive.py"), "--dir", str(scratch / "work")]
    return [*cmd, *job, *(["--kafka", kafka, "--topic", TRAINING_TOPIC] if kafka else [])]


def _maps(java: Path, archive: Path) -> bool:
    """A JVM starts with the archive mapped: a truncated or foreign file would crash it instead."""
    done = subprocess.run(
        [str(java), f"{USE_OPTION}{archive}", "-Xshare:auto", "-version"],
        capture_output=True,
        timeout=120,
    )
    return done.returncode == 0


def build(target: Path | None = None, *, force: bool = False) -> Path:
    target = target or jars_dir()
    archive, stamp = archive_file(target), stamp_file(target)
    if not force and usable_archive(target) is not None:
        log.info("class archive up to date: %s", archive)
        return archive
    java = java_binary()
    if java is None:
        raise ClassArchiveError("java is not on PATH: install a JDK 17 and set JAVA_HOME")
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_name(f".{archive.name}.{os.getpid()}.partial")
    training_log = archive.with_name("training.log")
    with tempfile.TemporaryDirectory(prefix="kafkalake-class-archive-") as scratch:
        env = {
            **os.environ,
            **job_environment(catalog_path(), Path(scratch) / "lake", os.environ.get("PATH", "")),
        }
        log.info("training the Spark driver's class archive (about a minute; log: %s)", training_log)
        with training_log.open("wb") as out, _training_broker(Path(scratch)) as kafka:
            done = subprocess.run(
                _training_command(partial, Path(scratch), kafka),
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=900,
            )
    try:
        if done.returncode != 0 or not partial.exists():
            raise ClassArchiveError(f"the training run failed (exit {done.returncode}); see {training_log}")
        if not _maps(java, partial):
            raise ClassArchiveError(f"java could not map the archive it wrote ({partial})")
        stamp.unlink(missing_ok=True)  # no stamp, no use: never a moment with a stamp for other bytes
        partial.replace(archive)
        fresh = stamp.with_name(f".{stamp.name}.{os.getpid()}.partial")
        fresh.write_text(json.dumps({"size": archive.stat().st_size, "fingerprint": fingerprint(target)}))
        fresh.replace(stamp)
    finally:
        partial.unlink(missing_ok=True)
    log.info("class archive ready: %s (%d MiB)", archive, archive.stat().st_size >> 20)
    return archive


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="train again even if up to date")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        build(force=args.force)
    except ClassArchiveError as exc:
        # Only a speed-up: set-up goes on, and the jobs start without it.
        log.warning("no class archive: %s", exc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
