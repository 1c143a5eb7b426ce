"""Full refresh of a topic: delete its tables and checkpoint so the next run re-reads Kafka.

    python -m kafkalake.cli.full_refresh --topic orders            # says what it would do
    python -m kafkalake.cli.full_refresh --topic orders --yes      # does it

Allowed only while Kafka still holds every record from offset 0 on every partition (and the topic
starts from ``earliest``): then the next run lands exactly what the tables held, and more.
Otherwise it refuses and says which partitions and how many records would be lost. Pause the
topic's DAG first, so no run writes while the tables are deleted.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kafkalake.config.catalog import load_catalog
from kafkalake.config.tables import topic_tables
from kafkalake.config.topic import TopicConfig
from kafkalake.core.paths import catalog_path, lake_root
from kafkalake.kafka.offsets import watermarks


@dataclass(frozen=True)
class RefreshPlan:
    allowed: bool
    reason: str
    #: Partitions whose first records are gone from Kafka: {partition: earliest offset}.
    lost: dict[int, int] = field(default_factory=dict)


def plan(topic: TopicConfig, marks: Mapping[int, tuple[int, int]]) -> RefreshPlan:
    """Whether a full refresh of ``topic`` loses nothing, from Kafka's (earliest, end) offsets."""
    if topic.starting_offsets != "earliest":
        return RefreshPlan(
            False,
            f"topic {topic.name!r} starts from {topic.starting_offsets!r}: a full refresh would re-read "
            "only records produced from now on and lose everything the tables hold",
        )
    lost = {p: low for p, (low, _high) in sorted(marks.items()) if low > 0}
    if lost:
        parts = ", ".join(f"partition {p}: offsets 0..{low - 1} ({low} records)" for p, low in lost.items())
        return RefreshPlan(
            False,
            f"Kafka no longer holds the start of topic {topic.name!r} ({parts}): a full refresh would "
            f"lose {sum(lost.values())} records that Kafka cannot give back",
            lost,
        )
    total = sum(high for _low, high in marks.values())
    return RefreshPlan(
        True,
        f"Kafka still holds every record of topic {topic.name!r} from offset 0 on all {len(marks)} "
        f"partitions ({total} records): the next run re-reads them all",
    )


def delete_tables(topic: TopicConfig) -> list[str]:
    """Delete every table of the topic (the checkpoint lives inside) and the checkpoint itself."""
    locations = [t.location for t in topic_tables(topic)] + [topic.checkpoint_path]
    remote = [loc for loc in locations if "://" in loc and not loc.startswith("file:")]
    if remote:
        raise SystemExit(f"{remote[0]}: only local tables can be refreshed by this command")
    deleted = []
    for path in (Path(loc.removeprefix("file:")) for loc in locations):
        if path.exists():
            shutil.rmtree(path)
            deleted.append(str(path))
    return deleted


def kafka_config(topic: TopicConfig, bootstrap_servers: str | None) -> dict[str, str]:
    if bootstrap_servers:
        return {"bootstrap.servers": bootstrap_servers}
    from kafkalake.airflow.connections import kafka_config_for

    return kafka_config_for(topic.kafka_conn_id)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topic", required=True, help="topic name, as in the catalog")
    parser.add_argument(
        "--yes", action="store_true", help="really delete (without it: say what would happen)"
    )
    parser.add_argument("--bootstrap-servers", help="Kafka brokers (default: the topic's Airflow connection)")
    args = parser.parse_args(argv)
    topic = load_catalog(catalog_path(), lake_root()).topic(args.topic)
    decision = plan(topic, watermarks(kafka_config(topic, args.bootstrap_servers), topic.name))
    if not decision.allowed:
        print(f"full refresh REFUSED: {decision.reason}", file=sys.stderr)
        return 1
    print(f"full refresh allowed: {decision.reason}")
    if not args.yes:
        print("nothing deleted: re-run with --yes (pause the topic's DAG first)")
        return 0
    for path in delete_tables(topic):
        print(f"deleted {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
