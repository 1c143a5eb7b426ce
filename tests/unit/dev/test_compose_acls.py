"""The compose broker's ACLs: the pipeline's user reads the catalog's topics and nothing else."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkalake.config.catalog import load_catalog
from kafkalake.core.errors import BadConfigError
from kafkalake.core.paths import REPO_ROOT
from kafkalake.dev.compose_acls import TopicGrant, grants, literal_prefix


def _catalog(tmp_path: Path, entries: str):
    file = tmp_path / "topics.yaml"
    file.write_text("defaults:\n  freshness_sla: 1h\ntopics:\n" + entries)
    return load_catalog(file, tmp_path / "lake").topics


def test_the_shipped_catalog_s_topics_each_get_read_and_nothing_more():
    topics = load_catalog(REPO_ROOT / "include" / "topics.yaml", REPO_ROOT / ".lake").topics
    assert grants(topics) == [TopicGrant("clickstream"), TopicGrant("orders")]


def test_a_family_by_name_gets_each_member_and_by_pattern_its_literal_start(tmp_path):
    topics = _catalog(
        tmp_path,
        "  - {topics: [orders.eu, orders.us], table: orders_all, parsed: false}\n"
        "  - {topic_pattern: 'clicks\\.[a-z]+', table: clicks_all, parsed: false}\n"
        "  - {name: orders.eu}\n",
    )
    assert grants(topics) == [
        TopicGrant("clicks", prefixed=True),
        TopicGrant("orders.eu"),
        TopicGrant("orders.us"),
    ]


@pytest.mark.parametrize(
    ("pattern", "prefix"),
    [
        ("orders\\..*", "orders"),
        ("it-fam-[a-z]+", "it-fam-"),
        ("abc?", "ab"),
        ("plain", "plain"),
        ("(a|b)", ""),
    ],
)
def test_the_literal_start_of_a_pattern(pattern, prefix):
    assert literal_prefix(pattern) == prefix


def test_a_pattern_with_no_literal_start_is_refused(tmp_path):
    topics = _catalog(tmp_path, "  - {topic_pattern: '.*-events', table: events_all, parsed: false}\n")
    with pytest.raises(BadConfigError, match="no literal start"):
        grants(topics)


def test_a_routed_pattern_is_granted_by_its_literal_start_before_any_topic_is_discovered(tmp_path):
    file = tmp_path / "topics.yaml"
    file.write_text(
        "defaults:\n  freshness_sla: 1h\ntopics:\n"
        "  - {topic_pattern: 'shop\\.public\\.(.*)', table_per_topic: 'shop_\\1'}\n"
    )
    catalog = load_catalog(file, tmp_path / "lake")
    assert grants(catalog.topics, catalog.routes) == [TopicGrant("shop", prefixed=True)]
