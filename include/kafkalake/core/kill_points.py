"""Named points where a test (or a soak) can stop a job dead, to prove exactly-once at each of them.

Set ``KAFKALAKE_KILL_AT`` to a point's name and the process that reaches it sends itself SIGKILL
there: no ``finally`` block, no ``atexit``, no flush runs, as when a machine loses power. Unset (the
normal case) a point costs one dictionary lookup. ``KAFKALAKE_KILL_AFTER=N`` lets the point be
passed N times first (e.g. kill in the third micro-batch). ``KAFKALAKE_KILL_SIGNAL=SIGSTOP`` freezes
the process there instead (a GC pause, a suspended VM): a test resumes it with SIGCONT.
"""

from __future__ import annotations

import os
import signal

ENV_KILL_AT = "KAFKALAKE_KILL_AT"
ENV_KILL_AFTER = "KAFKALAKE_KILL_AFTER"
ENV_KILL_SIGNAL = "KAFKALAKE_KILL_SIGNAL"
#: The signals a point may send itself.
SIGNALS = {"SIGKILL": signal.SIGKILL, "SIGSTOP": signal.SIGSTOP}

#: Every point, so a test can name them all and a typo fails loudly.
POINTS = (
    "ingest:before_bronze_commit",
    "ingest:after_bronze_commit",
    "ingest:before_current_commit",
    "ingest:after_parsed_commits",
    "catch_up:after_chunk",
    "replay:after_parsed_commit",
    "replay:after_dead_letter_commit",
    "maintain:before_optimize",
    "maintain:after_optimize",
    "maintain:before_vacuum",
    "register:before_create",
)

_passed: dict[str, int] = {}


def reached(point: str) -> None:
    """SIGKILL this process if ``KAFKALAKE_KILL_AT`` names ``point`` (after KAFKALAKE_KILL_AFTER passes)."""
    wanted = os.environ.get(ENV_KILL_AT)
    if wanted is None:
        return
    if wanted not in POINTS:
        raise ValueError(f"{ENV_KILL_AT}={wanted!r} names no kill point; known: {', '.join(POINTS)}")
    if wanted != point:
        return
    name = os.environ.get(ENV_KILL_SIGNAL, "SIGKILL")
    if name not in SIGNALS:
        raise ValueError(f"{ENV_KILL_SIGNAL}={name!r} is none of {', '.join(SIGNALS)}")
    _passed[point] = _passed.get(point, 0) + 1
    if _passed[point] > int(os.environ.get(ENV_KILL_AFTER, "0")):
        os.kill(os.getpid(), SIGNALS[name])
