"""What an in-process ingest run needs outside a job: a local Spark session with the jobs' settings,
and a topic's settings on a lake of its own. The integration tests' shared session and
:mod:`kafkalake.dev.bench_batch` are made of these."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

from kafkalake.config.maintenance import MaintenanceConfig
from kafkalake.config.parsed import ParsedConfig
from kafkalake.config.topic import TopicConfig


def local_session(app_name: str, conf: Mapping[str, str]) -> Any:
    """A ``local[2]`` SparkSession with ``conf`` (pyspark's driver JVM starts with it), logging
    warnings and worse."""
    from pyspark.sql import SparkSession  # pyspark only where a session is made: tests import this module

    builder = SparkSession.builder.master("local[2]").appName(app_name)
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session


def lake_topic(
    lake: Path,
    name: str,
    parsed: ParsedConfig,
    max_offsets: int | None = None,
    maintenance: MaintenanceConfig | None = None,
) -> TopicConfig:
    """A topic's settings as the catalog would make them, its tables under ``lake`` (bronze and
    silver), with a freshness SLA of an hour."""
    table = name.replace("-", "_")
    return TopicConfig(
        name=name,
        freshness_sla=timedelta(hours=1),
        table=table,
        path=str(lake / "bronze" / table),
        max_offsets_per_trigger=max_offsets,
        parsed=parsed,
        parsed_location=str(lake / "silver" / table),
        maintenance=maintenance or MaintenanceConfig(),
    )
