"""The ``txnVersion`` a run of idempotent writes under one app id starts from.

A catch-up from bronze and a re-ingest write in chunks under an app id of their own, each chunk a
Delta idempotent append (``txnAppId``/``txnVersion``): Delta skips a write whose version is not
above the one the table recorded for the app id, as already done. Their rows are kept from landing
twice by anti-joins, so the version only has to be new; it comes from the clock, which a worker's
may not be: behind the last writer's, every chunk would be skipped as written and its records
never land. So the first version is also above every one the tables recorded.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from kafkalake.lake import store_settings

#: Versions from the clock count milliseconds times this, so a run's chunks (first + n) stay apart from
#: the next run's first.
CHUNKS_PER_MS = 10_000


def first_version(clock_version: int, recorded: Iterable[int | None]) -> int:
    """``clock_version``, or one above the highest version recorded, whichever is higher."""
    known = [v for v in recorded if v is not None]
    return max(clock_version, max(known) + 1) if known else clock_version


def first_txn_version(locations: Iterable[str], app_id: str, now_ns: int | None = None) -> int:
    """The first ``txnVersion`` for writes under ``app_id`` to the Delta tables at ``locations``
    (those that exist), from the clock and above any they recorded for it."""
    now = time.time_ns() if now_ns is None else now_ns
    recorded = []
    for location in locations:
        table = store_settings.open_delta(location)
        if table is not None:
            recorded.append(table.transaction_version(app_id))
    return first_version(now // 1_000_000 * CHUNKS_PER_MS, recorded)
