"""Connection arguments for Airflow's embedded SQLite metadata DB (``airflow standalone``).

The api-server, scheduler, dag-processor and triggerer are four processes writing one SQLite file.
Python's ``sqlite3`` gives up on a locked database after 5 s; on a busy 2-core machine the scheduler
can hold the write lock longer than that, and the api-server then answers 503 to a backfill's
creation ("Database is locked. Backfill creation is not supported on SQLite", in a CI run) or 500 to
other writes. A longer busy wait turns those into a slower answer. ``settings.py`` reads this dict
through ``[database] sql_alchemy_connect_args``, an import path; PostgreSQL takes other arguments,
so the deployed setup does not set it.
"""

from __future__ import annotations

from typing import Any

#: ``sqlite3.connect(timeout=…)``: seconds to wait for another process's write lock.
CONNECT_ARGS: dict[str, Any] = {"timeout": 60}
