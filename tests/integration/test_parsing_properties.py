"""Any JSON a producer sends: every record lands in exactly one place, nothing is lost, and the
parsed table opens in delta-rs. Property-based (hypothesis), on the real parse path without Kafka.

Each example is two micro-batches of generated records (awkward names, nesting past the depth
limit, mixed types, big numbers, duplicate keys, junk values, null values) handed to the ingest's
own parser (:class:`TopicParser`: infers the schema, evolves it, parses) and parsed-table write.
The parsed table is then read back with delta-rs and every input record is looked for: in the
parsed table with each top-level field either in its column (same value) or in
``_rescued_data``, or among the dead letters with its reason.

Few examples, each with many records: one Spark job per batch, not per record.
"""

from __future__ import annotations

import itertools
import json
import math
import tempfile
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark import StorageLevel

from kafkalake.config.parsed import ParsedConfig, column_name
from kafkalake.lake.schema_algebra import count_fields, schema_problems
from kafkalake.lake.schema_history import SchemaHistory
from kafkalake.spark import parse_columns
from kafkalake.spark.batch_writer import write_idempotent
from kafkalake.spark.stream import bronze_schema
from kafkalake.spark.topic_parser import TopicParser

from .helpers import make_topic, read_rows

pytestmark = pytest.mark.integration

MAX_VALUE_BYTES = 4096
AWKWARD_NAMES = [
    "",
    " ",
    "first name",
    "a.b",
    "a,b;c",
    "{x}",
    "(y)",
    "a\nb",
    "tab\there",
    "x=y",
    "back`tick",
    "Name",
    "name",
    "NAME",
    "nul\x00",
    "_rescued_data",
    "_kafka_offset",
    "é",
    "😀",
    "id",
    "amount",
]
names = st.sampled_from(AWKWARD_NAMES) | st.text(
    alphabet=st.characters(blacklist_categories=("Cs",)), max_size=6
)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=8)
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(names, inner, max_size=4),
    max_leaves=12,
)


def deep(levels: int) -> dict[str, Any]:
    node: dict[str, Any] = {"leaf": 1}
    for _ in range(levels):
        node = {"a": node}
    return node


documents = st.one_of(
    st.dictionaries(names, values, max_size=6),
    # One field of many records keeps its type; a few records disagree with it.
    st.builds(
        lambda i, odd: {"id": "not-a-number" if odd else i, "amount": i}, st.integers(0, 99), st.booleans()
    ),
    st.builds(lambda n: {"deep": deep(n)}, st.integers(0, 40)),
)
#: Raw values that are not a JSON object, or not JSON: each has its dead-letter reason.
JUNK = {
    b"": "empty_value",
    b'{"id": ': "malformed_json",
    b"[1, 2]": "not_an_object",
    b'"text"': "not_an_object",
    b'{"id": "\xff"}': "invalid_utf8",
    json.dumps({"pad": "x" * MAX_VALUE_BYTES}).encode(): "oversize",
}
raw_values = st.one_of(
    documents.map(lambda d: json.dumps(d).encode()),
    # A key twice in one object (at the top and inside): the last value wins, as in json.loads.
    st.just(b'{"dup": 1, "dup": {"k": 1, "k": [2]}}'),
    st.sampled_from(sorted(JUNK)),
    st.none(),  # a tombstone
)
batches = st.lists(st.lists(raw_values, min_size=1, max_size=40), min_size=2, max_size=2)
limits = st.sampled_from([(10, 500), (2, 8)])


@pytest.fixture(scope="module")
def lake() -> Path:
    return Path(tempfile.mkdtemp(prefix="kafkalake-properties-"))


_example = itertools.count()


@settings(
    max_examples=3,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(batches=batches, limit=limits)
def test_any_json_lands_in_exactly_one_place_and_the_parsed_table_opens_in_delta_rs(
    spark, lake, batches, limit
):
    max_depth, max_columns = limit
    name = f"prop-{next(_example)}"
    config = ParsedConfig(
        max_value_bytes=MAX_VALUE_BYTES,
        max_depth=max_depth,
        max_columns=max_columns,
        # A null value is then a dead letter (empty_value). The latest table's MERGE of awkward
        # columns is in test_awkward_records (through the DAG): ~5 s a batch here.
        changelog=False,
    )
    topic = make_topic(lake, name, config)
    # The ingest's own parser and parsed-table write (BatchWriter's, without bronze and the dead
    # letters' fixed-schema table: test_awkward_records writes all four through the DAG).
    parser = TopicParser(spark, topic)
    now = datetime(2026, 11, 23, tzinfo=UTC)
    sent: dict[int, tuple[bytes, bytes | None]] = {}
    dead_at: dict[int, dict[str, Any]] = {}
    offsets = itertools.count()
    for batch_id, values_ in enumerate(batches):
        rows = []
        for value in values_:
            offset = next(offsets)
            key = f"k{offset % 7}".encode()
            sent[offset] = (key, value)
            rows.append((key, value, [], name, 0, offset, now, 0, now))
        parsed_frame = parser.parse(spark.createDataFrame(rows, bronze_schema()), f"batch {batch_id}")
        try:
            frame = parsed_frame.frame
            # Cached as Spark's columnar buffers, not run through Java serialization (batch_cache).
            assert frame.storageLevel == StorageLevel.MEMORY_AND_DISK_DESER
            if parsed_frame.parsed_rows:
                write_idempotent(parse_columns.parsed_rows(frame), topic.parsed_path, name, batch_id, True)
            dead_at.update((r["offset"], r.asDict()) for r in parse_columns.dead_letter_rows(frame).collect())
        finally:
            parsed_frame.frame.unpersist()

    # The parsed table opens in delta-rs (an independent reader), whatever the input was.
    parsed = read_rows(Path(topic.parsed_path)) if Path(topic.parsed_path).exists() else []

    # Exactly one place per record.
    parsed_at = {r["_kafka"]["offset"]: r for r in parsed}
    assert len(parsed_at) == len(parsed)
    assert not set(parsed_at) & set(dead_at)
    # Without a changelog a null value is a dead letter (empty_value), like an empty one.
    tombstones: set[int] = set()
    assert set(parsed_at) | set(dead_at) | tombstones == set(sent)
    assert not (set(parsed_at) | set(dead_at)) & tombstones

    # The schema stays within the limits and fit for every engine.
    history = SchemaHistory(topic.schema_dir)
    current = history.current()
    # None: no batch held a JSON object with a field, so nothing was recorded yet (their schema
    # was used for them alone: TopicParser._first_schema).
    schema = current.schema if current is not None else {"type": "struct", "fields": []}
    assert schema_problems(schema) == []
    assert count_fields(schema) <= max_columns
    assert all(_depth(f["type"]) <= max_depth for f in schema["fields"])
    types = {f["name"]: f["type"] for f in schema["fields"]}

    for offset, (_key, value) in sent.items():
        expected_reason = "empty_value" if value is None else JUNK.get(value)
        if expected_reason is not None:
            assert dead_at[offset]["reason"] == expected_reason, value
            assert dead_at[offset]["value"] == value
            continue
        # Every JSON object is parsed, and each of its fields is in its column or rescued.
        assert offset in parsed_at, (value, dead_at.get(offset))
        _assert_kept(json.loads(value), parsed_at[offset], types)


def _depth(data_type: Any) -> int:
    if isinstance(data_type, dict) and data_type["type"] == "struct":
        return 1 + max((_depth(f["type"]) for f in data_type["fields"]), default=0)
    if isinstance(data_type, dict) and data_type["type"] == "array":
        return 1 + _depth(data_type["elementType"])
    return 0


def _assert_kept(document: dict[str, Any], row: dict[str, Any], types: dict[str, Any]) -> None:
    rescued = json.loads(row["_rescued_data"]) if row["_rescued_data"] is not None else {}
    assert set(rescued) <= set(document), (document, rescued)
    for key, value in document.items():
        if key in rescued:
            assert _same_json(rescued[key], value), (key, value, rescued[key])
        else:
            assert key in types, (key, document, rescued)
            got = row[column_name(key)]
            assert _same(value, got, types[key]), (key, value, got, types[key])


def _same_json(got: Any, want: Any) -> bool:
    if isinstance(want, bool) or want is None or isinstance(want, str):
        return got == want
    if isinstance(want, int | float):
        return isinstance(got, int | float) and not isinstance(got, bool) and _close(got, want)
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and all(map(_same_json, got, want))
    return isinstance(got, dict) and set(got) == set(want) and all(_same_json(got[k], want[k]) for k in want)


def _close(got: float, want: float) -> bool:
    return got == want or math.isclose(got, want, rel_tol=1e-15, abs_tol=0.0)


def _same(want: Any, got: Any, data_type: Any) -> bool:
    """Whether the column value ``got`` (as delta-rs reads it) is the JSON value ``want``."""
    if want is None:
        return got is None
    if data_type == "string":
        # A string column keeps any other value as its JSON text (deeper than max_depth, say).
        return got == want if isinstance(want, str) else _same_json(json.loads(got), want)
    if data_type == "boolean":
        return got is want
    if data_type == "long":
        return isinstance(want, int) and not isinstance(want, bool) and got == want
    if data_type == "double":
        return isinstance(want, int | float) and not isinstance(want, bool) and _close(got, want)
    if isinstance(data_type, str) and data_type.startswith("decimal"):
        return isinstance(got, Decimal) and got == Decimal(want)
    if data_type["type"] == "array":
        return (
            isinstance(want, list)
            and len(got) == len(want)
            and all(_same(w, g, data_type["elementType"]) for w, g in zip(want, got, strict=True))
        )
    fields = {f["name"]: f["type"] for f in data_type["fields"]}
    if not isinstance(want, dict) or set(want) - set(fields):
        return False
    return all(_same(want.get(name), got[column_name(name)], t) for name, t in fields.items())
