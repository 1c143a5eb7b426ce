"""spark-submit entry point for ``make setup``: the training run of the driver's class archive.

    spark-submit --driver-java-options -XX:ArchiveClassesAtExit=... jobs/train_class_archive.py --dir D

The JVM archives the classes this run loads, so it does what the project's jobs do, on a few rows
of its own: a Structured Streaming query with ``availableNow`` and ``foreachBatch`` into Delta with
idempotent writes (from files, and from a small topic when ``--kafka`` names a broker), JSON
parsing both ways (``from_json`` and variants), a MERGE, table properties, OPTIMIZE, VACUUM,
history, and a Hive-catalog registration. Classes it never loads are loaded the ordinary way later,
so a gap here costs speed, never correctness.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", required=True, type=Path, help="an empty scratch folder")
    parser.add_argument("--kafka", help="bootstrap servers of a broker to read --topic from")
    parser.add_argument("--topic", help="a small topic on --kafka")
    args = parser.parse_args(argv)
    work = args.dir.resolve()

    from delta.tables import DeltaTable
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    spark = SparkSession.builder.appName("kafkalake-class-archive").enableHiveSupport().getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    incoming, bronze, parsed, latest = (str(work / name) for name in ("in", "bronze", "parsed", "latest"))
    Path(incoming).mkdir(parents=True)
    for part in range(2):
        rows = [{"key": f"k{i % 7}", "value": json.dumps({"n": i, "s": "x" * (i % 5)})} for i in range(50)]
        (Path(incoming) / f"part-{part}.json").write_text("\n".join(json.dumps(r) for r in rows))

    from kafkalake.spark.batch_writer import write_idempotent

    def write_batch(batch: Any, batch_id: int) -> None:
        write_idempotent(
            batch.withColumn("value", F.col("value").cast("binary")), bronze, "class-archive", batch_id
        )

    (
        spark.readStream.schema("key string, value string")
        .option("maxFilesPerTrigger", 1)
        .json(incoming)
        .writeStream.foreachBatch(write_batch)
        .option("checkpointLocation", str(work / "_checkpoint"))
        .trigger(availableNow=True)
        .start()
        .awaitTermination()
    )

    if args.kafka:
        # As the ingest reads: the Kafka source with headers, each batch cached and written to Delta.
        def write_kafka_batch(batch: Any, batch_id: int) -> None:
            rows = batch.persist()
            write_batch(rows.select("key", "value"), batch_id + 1000)
            rows.agg(F.count(F.lit(1)), F.max("timestamp")).collect()
            rows.unpersist()

        (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", args.kafka)
            .option("subscribe", args.topic)
            .option("startingOffsets", "earliest")
            .option("includeHeaders", "true")
            .option("maxOffsetsPerTrigger", 60)
            .load()
            .withColumn("key", F.col("key").cast("string"))
            .writeStream.foreachBatch(write_kafka_batch)
            .option("checkpointLocation", str(work / "_kafka_checkpoint"))
            .trigger(availableNow=True)
            .start()
            .awaitTermination()
        )

    text = F.col("value").cast("string")
    frame = spark.read.format("delta").load(bronze)
    frame.select(F.expr("schema_of_variant_agg(parse_json(cast(value as string)))")).collect()
    typed = frame.select(
        "key",
        F.from_json(text, "n long, s string", {"columnNameOfCorruptRecord": "_corrupt"}).alias("j"),
        F.try_parse_json(text).alias("v"),
    ).select("key", "j.*", F.expr("variant_get(v, '$.n', 'long')").alias("n_again"))
    typed.write.format("delta").option("delta.enableChangeDataFeed", "false").save(parsed)
    (
        DeltaTable.createIfNotExists(spark)
        .location(latest)
        .addColumn("key", "string")
        .addColumn("n", "long")
        .property("delta.autoOptimize.optimizeWrite", "false")
        .execute()
    )
    updates = typed.groupBy("key").agg(F.max("n").alias("n"))
    target = DeltaTable.forPath(spark, latest)
    (
        target.alias("t")
        .merge(updates.alias("u"), "t.key = u.key")
        .whenMatchedUpdate(condition="u.n > t.n", set={"n": "u.n"})
        .whenNotMatchedInsertAll()
        .execute()
    )
    target.optimize().executeCompaction()
    spark.sql(f"VACUUM delta.`{bronze}` RETAIN 168 HOURS")
    target.history(5).collect()
    spark.sql(f"DESCRIBE DETAIL delta.`{parsed}`").collect()
    spark.sql(f"CREATE TABLE IF NOT EXISTS class_archive_parsed USING DELTA LOCATION '{parsed}'")
    spark.table("class_archive_parsed").count()
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
