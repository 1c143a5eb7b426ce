"""The bench's compressed day (kafkalake.dev.bench_schedule.day): the same for a seed, in time order,
within the day, and shaped per topic: bursts, a trickle, a quiet topic."""

from __future__ import annotations

import json

from kafkalake.config.catalog import load_catalog
from kafkalake.config.freshness import DEFAULT_FILE_BYTES
from kafkalake.dev.bench_schedule import (
    BRONZE_RECORD_BYTES,
    burst_records,
    catalog_entries,
    day,
    scaled_file_bytes,
)


def test_the_day_is_reproducible_ordered_and_shaped():
    plan = day(topics=5, seconds=600, rate=0.5)
    assert plan == day(topics=5, seconds=600, rate=0.5)
    assert [p.at_s for p in plan] == sorted(p.at_s for p in plan)
    assert all(0 <= p.at_s < 600 for p in plan)
    per_topic = {i: [p for p in plan if p.topic == i] for i in range(5)}
    assert [len(per_topic[i]) for i in (0, 3)] == [3, 3] and all(p.count == 1000 for p in per_topic[0])
    assert 200 <= len(per_topic[1]) <= 400 and all(p.count == 1 for p in per_topic[1])
    assert len(per_topic[2]) == 3 and all(p.at_s <= 60 for p in per_topic[2])


def test_a_burst_is_the_files_worth_the_bench_says_and_the_catalog_takes_it(tmp_path):
    """The freshness topics' file_bytes is scaled so a burst is --burst-files files' worth (rule 4 can
    fire as on a real day); validated by the real catalog loader; the interval topics carry none."""
    size = scaled_file_bytes(0.5, 2)
    assert size is not None and size * 2 <= burst_records(0.5) * BRONZE_RECORD_BYTES < size * 3
    assert scaled_file_bytes(0.5, 0) is None
    for schedule, file_bytes in (("freshness", size), ("freshness", None), ("interval", size)):
        catalog = tmp_path / f"{schedule}-{file_bytes}.yaml"
        names = ["day-a", "day-b"]
        catalog.write_text(json.dumps({"topics": catalog_entries(names, schedule, "3m", file_bytes)}))
        loaded = load_catalog(catalog, tmp_path / "lake", strict=True)
        got = [loaded.topic(n).freshness for n in names]
        if schedule == "interval":
            assert got == [None, None]
        else:
            assert [f.file_bytes for f in got if f is not None] == [file_bytes or DEFAULT_FILE_BYTES] * 2
