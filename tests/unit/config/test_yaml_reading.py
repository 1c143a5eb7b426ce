"""Reading the catalog's YAML (kafkalake.config.yaml_reading): keys given twice, numbers YAML 1.1
reads unlike its reader, merge keys and aliases, files that are not UTF-8 text."""

from __future__ import annotations

from datetime import timedelta

import pytest

from kafkalake.config.catalog import load_catalog
from kafkalake.core.errors import CatalogError

from .catalog_helpers import CATALOGS, assert_names_where, write_catalog


def test_a_key_given_twice_is_refused_naming_file_topic_field_and_lines(lake_root):
    file = CATALOGS / "duplicate_key.yaml"
    with pytest.raises(CatalogError) as caught:
        load_catalog(file, lake_root)
    assert_names_where(caught.value, file, "events", "parsed.max_value_bytes")
    assert "lines 8 and 10" in str(caught.value)
    # Lenient mode cannot keep the other topics: the file itself says two things.
    with pytest.raises(CatalogError):
        load_catalog(file, lake_root, strict=False)


@pytest.mark.parametrize(
    ("text", "topic", "field_name"),
    [
        ("topics:\n  - name: a\n    freshness_sla: 1h\n    freshness_sla: 2h\n", "a", "freshness_sla"),
        ("defaults:\n  owner: x\n  owner: y\ntopics: []\n", None, "defaults.owner"),
        ("topics: []\ntopics: []\n", None, "topics"),
        (
            "topics:\n  - name: a\n    freshness_sla: 1h\n    spark_conf:\n"
            "      spark.x: 1\n      spark.x: 2\n",
            "a",
            "spark_conf.spark.x",
        ),
    ],
)
def test_duplicate_keys_anywhere_name_where_they_are(tmp_path, lake_root, text, topic, field_name):
    file = write_catalog(tmp_path, text)
    with pytest.raises(CatalogError) as caught:
        load_catalog(file, lake_root)
    assert_names_where(caught.value, file, topic, field_name)


@pytest.mark.parametrize(
    ("value", "field_name", "says"),
    [
        (
            "max_offsets_per_trigger: 010",
            "max_offsets_per_trigger",
            "010 (line 4) is read by YAML as an octal number, 8",
        ),
        (
            "spark_conf: {spark.sql.shuffle.partitions: 010}",
            "spark_conf.spark.sql.shuffle.partitions",
            "octal",
        ),
        (
            "spark_conf: {spark.network.timeout: 1:30}",
            "spark_conf.spark.network.timeout",
            "base-60 number, 90:",
        ),
        ("spark_conf: {spark.x: 1:30.5}", "spark_conf.spark.x", "base-60 number, 90.5"),
        ("tags: [a, -007]", "tags[1]", "octal number, -7"),
    ],
)
def test_numbers_yaml_1_1_reads_unlike_their_reader_are_refused(tmp_path, lake_root, value, field_name, says):
    text = f"topics:\n  - name: a\n    freshness_sla: 1h\n    {value}\n"
    file = write_catalog(tmp_path, text)
    with pytest.raises(CatalogError) as caught:
        load_catalog(file, lake_root)
    assert_names_where(caught.value, file, "a", field_name)
    assert says in str(caught.value)
    assert "quote it" in str(caught.value)


def test_quoted_or_plain_numbers_are_taken_as_written(tmp_path, lake_root):
    text = (
        "topics:\n  - name: a\n    freshness_sla: 1h\n    max_offsets_per_trigger: 10\n"
        "    spark_conf: {spark.a: '010', spark.b: \"1:30\", spark.c: 0, spark.d: 0x10,\n"
        "                 spark.e: 08, spark.f: 0.5}\n"
    )
    topic = load_catalog(write_catalog(tmp_path, text), lake_root).topics[0]
    assert topic.max_offsets_per_trigger == 10
    as_given = {"a": "010", "b": "1:30", "c": "0", "d": "16", "e": "08", "f": "0.5"}
    assert dict(topic.spark_conf) == {f"spark.{k}": v for k, v in as_given.items()}


def test_yaml_merge_keys_are_not_duplicates(tmp_path, lake_root):
    text = (
        "common: &common\n  freshness_sla: 1h\n"
        "topics:\n  - <<: *common\n    name: a\n  - <<: *common\n    name: b\n    freshness_sla: 2h\n"
    )
    file = write_catalog(tmp_path, text.replace("common: &common\n  freshness_sla: 1h\n", ""))
    # Anchors need a home the catalog allows: put the shared fields on the first topic.
    file.write_text(
        "topics:\n  - &common\n    name: a\n    freshness_sla: 1h\n"
        "  - <<: *common\n    name: b\n    freshness_sla: 2h\n"
    )
    catalog = load_catalog(file, lake_root)
    assert catalog.topic("b").freshness_sla == timedelta(hours=2)


@pytest.mark.parametrize("strict", [True, False])
def test_a_file_that_cannot_be_read_as_text_is_a_catalog_error(tmp_path, lake_root, strict):
    file = tmp_path / "catalog.yaml"
    file.write_bytes(b"topics:\n  - name: orders\n    owner: caf\xe9\n    freshness_sla: 1h\n")
    with pytest.raises(CatalogError, match="not UTF-8 text: byte 0xe9 on line 3"):
        load_catalog(file, lake_root, strict=strict)
    with pytest.raises(CatalogError, match="cannot be read: Is a directory"):
        load_catalog(tmp_path, lake_root, strict=strict)


@pytest.mark.timeout(20)
@pytest.mark.parametrize(
    ("text", "says"),
    [
        # An alias inside its own anchor: the duplicate-key walk went round it forever.
        ("topics: &t\n  - *t\n", "must be a mapping of fields"),
        # Aliases of aliases: 10**8 paths to walk, each node reached 10 ways from the one above.
        (
            "x0: &x0 [a, a, a, a, a, a, a, a, a, a]\n"
            + "".join(f"x{i}: &x{i} [{', '.join([f'*x{i - 1}'] * 10)}]\n" for i in range(1, 8))
            + "topics: []\n",
            "unknown top-level keys",
        ),
    ],
)
def test_aliases_that_repeat_or_contain_their_anchor_end_in_an_error(tmp_path, lake_root, text, says):
    file = write_catalog(tmp_path, text)
    with pytest.raises(CatalogError, match=says):
        load_catalog(file, lake_root)
