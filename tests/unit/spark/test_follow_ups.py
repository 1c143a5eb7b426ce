"""When the ingest job's schema refresh has nothing to find, so it reads no sample (pure decision,
and the schema history on a local folder)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from kafkalake.config.parsed import ParsedConfig
from kafkalake.config.topic import TopicConfig
from kafkalake.lake.schema_history import SchemaHistory
from kafkalake.spark.follow_ups import fit_whole, schema_current
from kafkalake.spark.topic_parser import RunStats

SCHEMA = {
    "type": "struct",
    "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}}],
}


def parsed_topic(tmp_path: Path, evolution: str = "addNewColumns") -> TopicConfig:
    return TopicConfig(
        name="orders",
        freshness_sla=timedelta(hours=1),
        table="orders",
        path=str(tmp_path / "orders"),
        parsed=ParsedConfig(evolution=evolution),
    )


@pytest.mark.parametrize(
    ("evolution", "parsed", "rescued", "fit"),
    [
        ("addNewColumns", 10, 0, True),
        # A record the schema could not take whole: a type conflict, a field past max_columns.
        ("addNewColumns", 10, 1, False),
        # Nothing parsed (all dead letters, or no record): nothing shows what the window holds.
        ("addNewColumns", 0, 0, False),
        # The refresh is these modes' only report of drift.
        ("rescue", 10, 0, False),
        ("none", 10, 0, False),
        ("failOnNewColumns", 10, 0, False),
    ],
)
def test_only_a_run_whose_every_record_fit_under_add_new_columns_skips_the_sample(
    evolution, parsed, rescued, fit
):
    assert fit_whole(evolution, RunStats(parsed_rows=parsed, rescued_rows=rescued)) is fit


def test_no_stats_no_skip(tmp_path):
    topic = parsed_topic(tmp_path)
    SchemaHistory(topic.schema_dir).write(SCHEMA, "inferred from batch 0")
    assert schema_current(topic, None) is None


def test_the_summary_names_the_current_version_and_what_the_batches_wrote(tmp_path):
    topic = parsed_topic(tmp_path)
    SchemaHistory(topic.schema_dir).write(SCHEMA, "inferred from batch 0")
    stats = RunStats(parsed_rows=12, schema_versions=[1])

    summary = schema_current(topic, stats)

    assert summary == (
        "topic orders: schema version 1 current, no sample read: the run's 12 parsed records fit it "
        "whole (addNewColumns); versions written by its batches: [1]"
    )
    assert schema_current(topic, RunStats(parsed_rows=3)) is not None
    assert schema_current(topic, RunStats(parsed_rows=3, rescued_rows=1)) is None
    assert schema_current(replace(topic, parsed=replace(topic.parsed, evolution="rescue")), stats) is None


def test_without_a_schema_version_the_refresh_runs(tmp_path):
    assert schema_current(parsed_topic(tmp_path), RunStats(parsed_rows=5)) is None
