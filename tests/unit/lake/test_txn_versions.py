"""The first txnVersion of a catch-up or re-ingest: from the clock, and above what the tables hold."""

from __future__ import annotations

import pyarrow as pa
from deltalake import CommitProperties, Transaction, write_deltalake

from kafkalake.lake.txn_versions import CHUNKS_PER_MS, first_txn_version, first_version

NOW_NS = 1_795_800_000_000 * 1_000_000  # a clock reading, in nanoseconds
CLOCK = NOW_NS // 1_000_000 * CHUNKS_PER_MS


def test_the_clock_gives_the_version_when_the_tables_hold_none_above_it():
    assert first_version(CLOCK, []) == CLOCK
    assert first_version(CLOCK, [None, CLOCK - 5]) == CLOCK


def test_a_clock_behind_the_last_writer_still_gives_a_new_version(tmp_path):
    # A worker whose clock is behind the one that ran the last catch-up: with the clock alone, Delta
    # would skip every chunk as written (version not above the recorded one) and the records never land.
    ahead = CLOCK + 3 * CHUNKS_PER_MS * 1000 + 7  # the last writer's clock was 3 s ahead, 8 chunks
    parsed, dead, missing = tmp_path / "parsed", tmp_path / "dead", tmp_path / "latest"
    rows = pa.table({"n": [1]})
    write_deltalake(
        parsed, rows, commit_properties=CommitProperties(app_transactions=[Transaction("app", ahead)])
    )
    write_deltalake(
        dead, rows, commit_properties=CommitProperties(app_transactions=[Transaction("other", ahead + 9)])
    )
    assert first_txn_version([str(parsed), str(dead), str(missing)], "app", NOW_NS) == ahead + 1
    # Another app id's versions, and tables that do not exist, do not count.
    assert first_txn_version([str(dead), str(missing)], "app", NOW_NS) == CLOCK
