"""The ingest's start when the checkpoint cannot be trusted, carried out before the stream starts.

:func:`kafkalake.lake.start_plan.plan_start` decides; this sets the old checkpoint aside and points
the parsed side right (under the run lock).
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime

from kafkalake.config.topic import TopicConfig
from kafkalake.lake import parsed_backlog, small_files
from kafkalake.lake.start_plan import StartPlan
from kafkalake.spark.batch_writer import BatchWriter

log = logging.getLogger(__name__)


def apply_start_plan(topic: TopicConfig, plan: StartPlan, writer: BatchWriter) -> str:
    """Set the checkpoint aside and point the parsed side right when the position is rebuilt.

    Returns what was done, for the log and the run metrics ("" when the checkpoint was right).
    """
    if plan.rebuild_from is None and plan.parsed_skip_below is None:
        return ""
    checkpoint = topic.checkpoint_path
    if plan.rebuild_from is not None and small_files.names(checkpoint):
        # Kept, not deleted: on-call may want to see what it held. VACUUM skips _kafkalake/.
        aside = f"{checkpoint.rstrip('/')}.replaced-{time.strftime('%Y%m%dT%H%M%S')}"
        small_files.rename_folder(checkpoint, aside)
        log.warning("set the checkpoint aside as %s", aside)
    if plan.parsed_skip_below:
        writer.parsed_skip_below = plan.parsed_skip_below
    if plan.parsed_backlog_from:
        current = parsed_backlog.read(topic)
        start = dict(plan.parsed_backlog_from)
        if current is not None:
            start = {p: min(o, current.start.get(p, o)) for p, o in {**current.start, **start}.items()}
        since = datetime.now(UTC).isoformat(timespec="seconds")
        parsed_backlog.write(topic, parsed_backlog.Backlog(start, since, "table_state", plan.reason))
    log.warning("topic %s: %s", topic.name, plan.reason)
    return plan.reason
