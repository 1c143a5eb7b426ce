"""Every Delta table a topic's DAG writes, in one place: registration, assets and table care use it.

No Airflow and no Spark here, so jobs and DAG files alike can import it.
"""

from __future__ import annotations

from dataclasses import dataclass

from kafkalake.config.topic import TopicConfig

#: Bronze columns, in order. Key and value stay binary: bronze keeps the bytes exactly.
BRONZE_COLUMNS = (
    "key",
    "value",
    "headers",
    "topic",
    "partition",
    "offset",
    "kafka_timestamp",
    "kafka_timestamp_type",
    "ingested_at",
)


@dataclass(frozen=True)
class Table:
    """A Delta table a topic's DAG writes."""

    #: Qualified name, ``<database>.<table>``.
    name: str
    #: Absolute path or URI, as in :attr:`TopicConfig.path`.
    location: str
    #: ``bronze``, ``parsed``, ``dead_letter``, ``latest`` or ``current`` (``format: debezium``).
    kind: str = "bronze"

    @property
    def database(self) -> str:
        return self.name.split(".", 1)[0]


def topic_tables(topic: TopicConfig) -> tuple[Table, ...]:
    """Bronze, then (when the topic is parsed) the parsed, dead-letter and latest-row tables."""
    tables = [Table(topic.qualified_table, topic.path, "bronze")]
    if topic.parsed.enabled:
        tables.append(Table(topic.parsed_table, topic.parsed_path, "parsed"))
        tables.append(Table(topic.dead_letter_table, topic.dead_letter_path, "dead_letter"))
        if topic.parsed.latest_by_key:
            tables.append(Table(topic.latest_table, topic.latest_path, "latest"))
        if topic.parsed.debezium:
            tables.append(Table(topic.current_table, topic.current_path, "current"))
    return tuple(tables)
