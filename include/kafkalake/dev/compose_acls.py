"""The compose broker's ACLs: the pipeline's user may read the catalog's topics, and nothing else.

    python -m kafkalake.dev.compose_acls --admin-config /run/secrets/kafka-admin.json

docker-compose.yml's one-shot ``kafka-acls`` runs this as the broker's admin (its super user) once
the broker is up, before Airflow starts. The broker runs KRaft's ``StandardAuthorizer`` with no
access where no ACL allows it, as :mod:`kafkalake.dev.secured_broker` does for the tests.

What the pipeline (user ``lander``) needs: READ on each topic (which implies DESCRIBE: the
watermarks, the topic IDs, the listing of a family's members). No consumer group: the pre-flight
only asks for watermarks, Spark's Kafka source assigns partitions and seeks to the offsets it
chose, and nothing commits offsets, so no group is ever joined or read. A family listed by name gets
one ACL per member; a family by pattern gets a PREFIXED ACL on the pattern's literal start (wider
than the pattern; a pattern with no literal start is refused: name the members instead).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kafkalake.config.catalog import load_catalog
from kafkalake.config.routing import Route
from kafkalake.config.topic import TopicConfig
from kafkalake.core.errors import BadConfigError
from kafkalake.core.paths import catalog_path, lake_root
from kafkalake.dev.compose_secrets import PIPELINE_USER


@dataclass(frozen=True)
class TopicGrant:
    """READ for the pipeline's user on a topic name (``prefixed``: every topic starting with it)."""

    name: str
    prefixed: bool = False


# Regex syntax that ends a pattern's literal start.
_META = re.compile(r"[\\.^$|?*+()\[\]{}]")


def literal_prefix(pattern: str) -> str:
    """The part of a Java regex before its first metacharacter (a quantifier takes the char before)."""
    match = _META.search(pattern)
    if match is None:
        return pattern
    prefix = pattern[: match.start()]
    return prefix[:-1] if match.group() in "?*{" else prefix


def grants(topics: Sequence[TopicConfig], routes: Sequence[Route] = ()) -> list[TopicGrant]:
    """The topic ACLs the catalog's entries need, sorted, each once; a routed pattern's
    (``table_per_topic``) by its literal start, as its topics are not all discovered yet."""
    wanted: set[TopicGrant] = set()
    patterns = [(t.name, t.topic_pattern) for t in topics if t.topic_pattern is not None]
    for name, pattern in [*patterns, *((r.name, r.topic_pattern) for r in routes)]:
        prefix = literal_prefix(pattern)
        if not prefix:
            raise BadConfigError(
                f"topic {name!r}: its topic_pattern {pattern!r} has no literal start "
                "to grant READ on: list its members instead"
            )
        wanted.add(TopicGrant(prefix, prefixed=True))
    for topic in topics:
        if topic.members:
            wanted.update(TopicGrant(member) for member in topic.members)
        elif topic.topic_pattern is None:
            wanted.add(TopicGrant(topic.name))
    return sorted(wanted, key=lambda g: (g.name, g.prefixed))


def create_read_acls(
    admin_config: dict[str, str],
    principal: str,
    topic_grants: Sequence[TopicGrant],
    group_prefixes: Sequence[str] = (),
) -> None:
    """ALLOW READ for ``User:<principal>`` on these topics (and on groups with these prefixes)."""
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )

    def allow(kind: ResourceType, name: str, prefixed: bool) -> AclBinding:
        pattern = ResourcePatternType.PREFIXED if prefixed else ResourcePatternType.LITERAL
        return AclBinding(
            kind, name, pattern, f"User:{principal}", "*", AclOperation.READ, AclPermissionType.ALLOW
        )

    bindings = [allow(ResourceType.TOPIC, g.name, g.prefixed) for g in topic_grants]
    bindings += [allow(ResourceType.GROUP, prefix, True) for prefix in group_prefixes]
    if not bindings:
        return
    admin = AdminClient(admin_config)
    for future in admin.create_acls(bindings).values():
        future.result(timeout=60)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kafkalake.dev.compose_acls", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--admin-config", type=Path, required=True, help="librdkafka settings of the admin (JSON)"
    )
    args = parser.parse_args(argv)
    catalog = load_catalog(catalog_path(), lake_root())
    topic_grants = grants(catalog.topics, catalog.routes)
    create_read_acls(json.loads(args.admin_config.read_text()), PIPELINE_USER, topic_grants)
    for grant in topic_grants:
        what = "topics starting with" if grant.prefixed else "topic"
        print(f"User:{PIPELINE_USER} may READ {what} {grant.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
