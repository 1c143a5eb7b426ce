"""The pure decisions of a replay: which bronze version, which records, what a bad request says."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from kafkalake.config.topic import TopicConfig
from kafkalake.core.errors import BadConfigError, IngestUnfinishedError
from kafkalake.spark.replay import (
    BRONZE_COLUMNS,
    DEAD_LETTER_COLUMNS,
    PARSED_COLUMNS,
    Selection,
    refuse_unfinished_batch,
    resolve_version,
    selection_from,
    window_predicate,
)

T0 = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)


def millis(at: datetime) -> int:
    return int(at.timestamp() * 1000)


#: Bronze's history: version 0 at T0 (created), then a version every 10 minutes.
COMMITS = [(v, millis(T0 + timedelta(minutes=10 * v))) for v in range(5)]


def test_no_snapshot_given_means_the_latest_version():
    assert resolve_version("orders", Selection(), list(reversed(COMMITS))) == 4


def test_a_version_within_the_table_is_used_as_given():
    assert resolve_version("orders", Selection(as_of_version=2), COMMITS) == 2
    assert resolve_version("orders", Selection(as_of_version=0), COMMITS) == 0


def test_a_timestamp_picks_the_last_version_committed_at_or_before_it():
    at = T0 + timedelta(minutes=25)
    assert resolve_version("orders", Selection(as_of_timestamp=at), COMMITS) == 2
    exactly = T0 + timedelta(minutes=30)
    assert resolve_version("orders", Selection(as_of_timestamp=exactly), COMMITS) == 3
    later = T0 + timedelta(days=1)
    assert resolve_version("orders", Selection(as_of_timestamp=later), COMMITS) == 4


@pytest.mark.parametrize(
    ("selection", "commits", "message"),
    [
        (
            Selection(as_of_version=5),
            COMMITS,
            "topic 'orders': replay: as_of_version 5 is beyond bronze's latest version 4",
        ),
        (
            Selection(as_of_version=1),
            COMMITS[3:],
            "as_of_version 1 is older than the oldest version bronze's log keeps (3)",
        ),
        (
            Selection(as_of_timestamp=T0 - timedelta(seconds=1)),
            COMMITS,
            "as_of_timestamp 2026-11-22T09:59:59+00:00 is before bronze's first commit "
            "(version 0 at 2026-11-22T10:00:00+00:00)",
        ),
        (Selection(), [], "the bronze table has no history"),
    ],
)
def test_a_snapshot_bronze_cannot_serve_fails_naming_topic_and_value(selection, commits, message):
    with pytest.raises(BadConfigError) as raised:
        resolve_version("orders", selection, commits)
    text = str(raised.value)
    assert message in text
    assert text.startswith("[bad_config]") and "RUNBOOK.md, section bad_config" in text


def test_text_from_a_command_line_or_dag_params_becomes_a_selection():
    assert selection_from("orders") == Selection()
    assert selection_from("orders", "", "", "", "") == Selection()
    assert selection_from("orders", " 7 ") == Selection(as_of_version=7)
    assert selection_from("orders", 7) == Selection(as_of_version=7)
    # Without a zone a timestamp is UTC; with one it is kept.
    assert selection_from("orders", None, "2026-11-22T10:00:00") == Selection(as_of_timestamp=T0)
    assert selection_from("orders", None, "2026-11-22T10:00:00Z") == Selection(as_of_timestamp=T0)
    plus_two = selection_from("orders", None, "2026-11-22T12:00:00+02:00").as_of_timestamp
    assert plus_two == T0 and plus_two is not None and plus_two.utcoffset() == timedelta(hours=2)
    window = selection_from("orders", None, None, "2026-11-22T10:00:00Z", "2026-11-22T11:00:00Z")
    assert window == Selection(kafka_timestamp_from=T0, kafka_timestamp_until=T0 + timedelta(hours=1))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("soon",), "as_of_version 'soon' is not a whole number"),
        (("-1",), "as_of_version -1 is negative"),
        (
            ("3", "2026-11-22T10:00:00Z"),
            "give as_of_version (3) or as_of_timestamp (2026-11-22T10:00:00+00:00), not both",
        ),
        ((None, "yesterday"), "as_of_timestamp 'yesterday' is not an ISO 8601 timestamp"),
        (
            (None, None, "2026-11-22T11:00:00Z", "2026-11-22T10:00:00Z"),
            "kafka_timestamp_from 2026-11-22T11:00:00+00:00 is not before kafka_timestamp_until",
        ),
    ],
)
def test_a_bad_request_fails_naming_topic_field_and_value(args, message):
    with pytest.raises(BadConfigError) as raised:
        selection_from("orders", *args)
    assert "topic 'orders'" in str(raised.value)
    assert message in str(raised.value)


def test_a_naive_timestamp_is_a_problem_of_the_selection_itself():
    naive = Selection(as_of_timestamp=datetime(2026, 11, 22))
    assert naive.problems() == ["as_of_timestamp 2026-11-22T00:00:00 has no time zone"]
    assert Selection(as_of_timestamp=datetime(2026, 11, 22, tzinfo=UTC)).problems() == []


def test_the_window_is_each_partitions_offsets_up_to_the_snapshots_highest():
    offsets = {1: 40, 0: 99}
    assert window_predicate(offsets, Selection(), BRONZE_COLUMNS) == (
        "((partition = 0 AND offset <= 99) OR (partition = 1 AND offset <= 40))"
    )
    assert window_predicate(offsets, Selection(), PARSED_COLUMNS) == (
        "((_kafka.partition = 0 AND _kafka.offset <= 99) OR (_kafka.partition = 1 AND _kafka.offset <= 40))"
    )
    assert window_predicate(offsets, Selection(), DEAD_LETTER_COLUMNS) == window_predicate(
        offsets, Selection(), BRONZE_COLUMNS
    )


def test_an_empty_snapshot_selects_nothing():
    assert window_predicate({}, Selection(), PARSED_COLUMNS) == "FALSE"


def test_a_kafka_timestamp_range_narrows_the_window_in_epoch_milliseconds():
    selection = Selection(kafka_timestamp_from=T0, kafka_timestamp_until=T0 + timedelta(hours=1))
    start, end = millis(T0), millis(T0 + timedelta(hours=1))
    assert window_predicate({0: 5}, selection, PARSED_COLUMNS) == (
        f"((_kafka.partition = 0 AND _kafka.offset <= 5)) AND _kafka.timestamp >= timestamp_millis({start}) "
        f"AND _kafka.timestamp < timestamp_millis({end})"
    )
    only_end = window_predicate({0: 5}, Selection(kafka_timestamp_until=T0), DEAD_LETTER_COLUMNS)
    assert only_end.endswith(f"AND kafka_timestamp < timestamp_millis({start})")


def topic_at(tmp_path: Path) -> TopicConfig:
    return TopicConfig(name="orders", freshness_sla=timedelta(hours=1), path=str(tmp_path / "orders"))


def write_batch(checkpoint: Path, batch: int, committed: bool) -> None:
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    (checkpoint / "commits").mkdir(parents=True, exist_ok=True)
    offsets = json.dumps({"orders": {"0": 10 * (batch + 1)}})
    (checkpoint / "offsets" / str(batch)).write_text(f'v1\n{{"batchWatermarkMs":0}}\n{offsets}\n')
    if committed:
        (checkpoint / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}\n')


def test_a_replay_waits_for_the_ingest_to_finish_its_half_written_batch(tmp_path):
    topic = topic_at(tmp_path)
    refuse_unfinished_batch(topic)  # no checkpoint yet: nothing to finish
    checkpoint = Path(topic.checkpoint_path)
    write_batch(checkpoint, 0, committed=True)
    refuse_unfinished_batch(topic)
    write_batch(checkpoint, 1, committed=False)  # planned, never committed: a run died mid-batch
    with pytest.raises(IngestUnfinishedError) as raised:
        refuse_unfinished_batch(topic)
    assert str(raised.value).startswith("[ingest_unfinished] topic 'orders': the last ingest stopped")
    assert "RUNBOOK.md, section ingest_unfinished" in str(raised.value)


def test_a_replay_over_an_unreadable_checkpoint_is_refused_naming_the_file(tmp_path):
    # read_checkpoint raises on a file cut short: the replay refuses with a typed error, not a traceback.
    topic = topic_at(tmp_path)
    checkpoint = Path(topic.checkpoint_path)
    write_batch(checkpoint, 0, committed=True)
    (checkpoint / "offsets" / "0").write_text("")
    with pytest.raises(IngestUnfinishedError) as raised:
        refuse_unfinished_batch(topic)
    message = str(raised.value)
    assert message.startswith("[ingest_unfinished] topic 'orders': the checkpoint cannot be read")
    assert "offsets/0" in message and "let the DAG run once" in message
