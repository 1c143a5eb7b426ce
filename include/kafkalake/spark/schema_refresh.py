"""The schema refresh task: infer the JSON schema of what bronze received lately and persist it.

Inference reads a bounded sample: bronze rows that landed within the topic's freshness SLA (Delta
skips older files by their ``ingested_at`` statistics), at most ``parsed.sample_rows`` of them. The
result is merged into the current version (fields are only ever added; a type conflict keeps the
persisted type) and written as a new version only when it differs, under evolution mode
``addNewColumns``. Under the other modes the schema is the user's to change: the refresh reports the
drift and writes nothing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from kafkalake.config.topic import TopicConfig
from kafkalake.lake.schema_algebra import Change, empty_schema, merge
from kafkalake.lake.schema_history import SchemaHistory, SchemaVersion
from kafkalake.spark import parse_columns

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Refresh:
    sampled: int
    written: SchemaVersion | None
    #: What the sample shows that the current version lacks (or conflicts with).
    drift: tuple[Change, ...]

    def summary(self, topic: str) -> str:
        head = f"topic {topic}: {self.sampled} values sampled"
        if self.written:
            return f"{head}; schema version {self.written.version}: {'; '.join(self.written.changes)}"
        if self.drift:
            return f"{head}; drift not applied (evolution mode): {'; '.join(str(c) for c in self.drift)}"
        return f"{head}; schema unchanged"


def refresh(spark: SparkSession, topic: TopicConfig, now: datetime | None = None) -> Refresh:
    from pyspark.sql import functions as F

    config = topic.parsed
    if topic.uses_registry:
        # The registry's versions are the schema (spark/registry_parser): no sample to infer from.
        return Refresh(0, None, ())
    since = (now or datetime.now(UTC)) - topic.freshness_sla
    recent = spark.read.format("delta").load(topic.path).where(F.col("ingested_at") >= F.lit(since))
    texts = parse_columns.sample_texts(recent, config).cache()
    try:
        sampled = texts.count()
        if not sampled:
            return Refresh(0, None, ())
        inferred = parse_columns.infer_schema(texts, config)
    finally:
        texts.unpersist()
    history = SchemaHistory(topic.schema_dir)
    current = history.current()
    if current is None:
        base = parse_columns.pinned_schema(config) or empty_schema()
    else:
        base = current.schema
    merged = merge(base, inferred, max_columns=config.max_columns)
    drift = tuple(c for c in merged.changes if c.kind in ("added", "conflict"))
    if current is not None and config.evolution != "addNewColumns":
        return Refresh(sampled, None, drift)
    if current is None and not merged.schema["fields"]:
        # No JSON object with a field in the sample: recorded, this empty schema would be the
        # topic's for good under the modes that add no field (see TopicParser._first_schema).
        return Refresh(sampled, None, drift)
    written = history.write(
        parse_columns.with_catalog_hints(merged.schema, config, current.schema if current else None),
        source=f"refresh of {sampled} sampled values",
    )
    return Refresh(sampled, written, drift)
