"""Before the stream starts: do the table and its checkpoint agree, and if not, who is right?

The table is: every micro-batch's commit records the Kafka offsets bronze holds through it
(:mod:`kafkalake.lake.table_position`), so the checkpoint is only a cache. :func:`plan_start` decides,
from the table's recorded position and the checkpoint,

* to start from the checkpoint (they agree, or the checkpoint's unfinished batch is the table's
  newest: the normal resume after a crash);
* to **rebuild** the position from the table when the checkpoint is missing, empty, corrupt, older
  than the table (restored from a backup) or ahead of it (the table was restored to an older
  version): the stream starts under a fresh checkpoint from exactly the offsets the table holds,
  and the old checkpoint is kept aside; the parsed tables, which record their own positions, are
  caught up (a parsed backlog) or skip what they hold already;
* or to refuse (:func:`check_safe_to_start`, :class:`~kafkalake.core.errors.TableStateError`,
  not retried) when the table cannot say, because it records no position (written before
  positions were recorded), and

* (a) the table holds data but the checkpoint is missing or empty: the stream would re-read Kafka
  from ``starting_offsets`` and land every record again (or, where Kafka expired them, land a
  different set than the table has);
* (b) the checkpoint says records were landed but the table is gone or holds no rows: they were
  deleted, and the stream would carry on after them as if nothing happened.

The decision (:func:`refusal`) is pure; reading the table (delta-rs) and the checkpoint are the
I/O edges, local or on an object store (:mod:`kafkalake.lake.store_settings`).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from kafkalake.config.tables import topic_tables
from kafkalake.config.topic import TopicConfig
from kafkalake.core.errors import Kind, TableStateError, failure
from kafkalake.lake import small_files, store_settings, table_position
from kafkalake.lake.checkpoint import (
    CheckpointState,
    Offsets,
    batch_ids,
    family_starting_offsets,
    read_checkpoint,
    read_family_checkpoint,
    starting_offsets,
)
from kafkalake.lake.small_files import Location, join
from kafkalake.lake.table_position import TablePosition

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TableFacts:
    files: int
    rows: int
    #: Bytes of the data files the current version references.
    bytes: int = 0


def refusal(topic: TopicConfig, table: TableFacts | None, landed: int | None) -> str | None:
    """Why starting the stream now would lose or duplicate data; None when it is safe.

    Args:
        topic: the topic (for its paths and starting offsets in the message).
        table: the table's data files and rows; None when there is no Delta table at its path.
        landed: records the checkpoint says the table received; None when there is no checkpoint.
    """
    has_data = table is not None and (table.files > 0 or table.rows > 0)
    if has_data and landed is None:
        assert table is not None
        return (
            f"topic {topic.name!r}: the table at {topic.path} holds {table.rows} rows in {table.files} "
            f"files, but its checkpoint at {topic.checkpoint_path} is missing or empty. Starting now "
            f"would re-read Kafka from {topic.starting_offsets!r} and land those records a second time "
            "(and records Kafka has already expired could not be read again)"
        )
    if landed and not has_data:
        state = "is gone (no Delta table there)" if table is None else "holds no rows"
        return (
            f"topic {topic.name!r}: the checkpoint at {topic.checkpoint_path} says {landed} records "
            f"were landed, but the table at {topic.path} {state}: they were deleted. Starting now "
            "would carry on after them and never land them again"
        )
    return None


def read_table(path: str) -> TableFacts | None:
    """Data files, rows (from the log's statistics) and bytes of a Delta table; None when there is none."""
    table = store_settings.open_delta(path)
    if table is None:
        return None
    actions = table.get_add_actions(flatten=True)
    rows = 0
    if "num_records" in actions.schema.names:
        rows = sum(n for n in actions.column("num_records").to_pylist() if n is not None)
    size = (
        sum(n for n in actions.column("size_bytes").to_pylist() if n is not None) if actions.num_rows else 0
    )
    return TableFacts(files=actions.num_rows, rows=rows, bytes=size)


def landed_records(checkpoint: Location, topic: str) -> int | None:
    """Records the checkpoint's committed batches read from Kafka; None without a readable checkpoint."""
    try:
        state = read_checkpoint(checkpoint, topic)
    except ValueError:
        return None
    if state is None:
        return None
    start = starting_offsets(checkpoint, topic) or {}
    return sum(max(0, end - start.get(p, 0)) for p, end in state.committed.items())


def landed_by_family(checkpoint: Location) -> int | None:
    """:func:`landed_records` of a family's checkpoint: every topic's records."""
    try:
        state = read_family_checkpoint(checkpoint)
    except ValueError:
        return None
    if state is None:
        return None
    start = family_starting_offsets(checkpoint) or {}
    return sum(
        max(0, end - start.get(t, {}).get(p, 0))
        for t, parts in state.committed.items()
        for p, end in parts.items()
    )


def check_safe_to_start(topic: TopicConfig) -> None:
    """Raise :class:`TableStateError` (its text is the on-call message) when starting is unsafe.

    The ingest job calls this first, before creating the table or starting the stream, and on
    ``TableStateError`` reports ``Failure(err.kind, str(err))`` (exit code 74, not retried).
    """
    landed = (
        landed_by_family(topic.checkpoint_path)
        if topic.is_family
        else landed_records(topic.checkpoint_path, topic.name)
    )
    reason = refusal(topic, read_table(topic.path), landed)
    if reason is not None:
        raise TableStateError(failure(Kind.TABLE_STATE, reason).message)


# ---------------------------------------------------------------------------------------------
# the position: checkpoint or table


@dataclass(frozen=True)
class CheckpointFacts:
    """What the checkpoint says, for :func:`decide_start`; None fields where it has nothing."""

    state: CheckpointState | None
    query: str | None
    #: Batch ids in the offset log (planned) and the commit log (done).
    planned: tuple[int, ...] = ()
    committed: tuple[int, ...] = ()


@dataclass(frozen=True)
class StartPlan:
    #: None: start from the checkpoint. Otherwise the offsets to start from, under a new checkpoint.
    rebuild_from: Offsets | None = None
    reason: str = ""
    #: The parsed side's tables hold these offsets already (skip them) / lack these (catch up).
    parsed_skip_below: Offsets | None = None
    parsed_backlog_from: Offsets | None = None


def decide_start(
    position: TablePosition | None, checkpoint: CheckpointFacts, parsed_end: Offsets
) -> StartPlan:
    """Where the stream starts, from the table's recorded position and the checkpoint. Pure."""
    if position is None:
        if checkpoint.state is None and parsed_end:
            # Bronze (and its checkpoint) gone, the parsed tables kept: never give them a record twice.
            return StartPlan(
                parsed_skip_below=parsed_end,
                reason=f"bronze holds nothing, the parsed tables hold offsets up to {parsed_end}",
            )
        return StartPlan()
    if checkpoint.state is None:
        why = "the checkpoint is missing, empty or unreadable"
    else:
        same_stream = checkpoint.query == position.query and position.batch is not None
        unfinished = set(checkpoint.planned) - set(checkpoint.committed)
        if same_stream and (
            position.batch == max(checkpoint.committed, default=-1) or position.batch in unfinished
        ):
            return _parsed_plan(StartPlan(), position.end, parsed_end)
        committed = checkpoint.state.committed
        if {p: committed.get(p) for p in position.end} == position.end:
            return _parsed_plan(StartPlan(), position.end, parsed_end)
        if any(committed.get(p, 0) > o for p, o in position.end.items()):
            why = (
                f"the table holds less than its checkpoint ({_offsets(committed)}): it was restored "
                "to an older version or lost commits"
            )
        else:
            why = f"the checkpoint ({_offsets(committed)}) is older than the table"
    plan = StartPlan(
        rebuild_from=dict(position.end),
        reason=f"{why}; rebuilding the position from the table, {position.describe()}",
    )
    return _parsed_plan(plan, position.end, parsed_end)


def _offsets(offsets: Offsets) -> str:
    return ", ".join(f"partition {p}: {o}" for p, o in sorted(offsets.items()))


def _parsed_plan(plan: StartPlan, bronze_end: Offsets, parsed_end: Offsets) -> StartPlan:
    """Skip what the parsed side holds beyond bronze; catch up what it lacks below bronze."""
    if not parsed_end:
        return plan
    ahead = {p: o for p, o in parsed_end.items() if o > bronze_end.get(p, 0)}
    behind = {p: parsed_end.get(p, 0) for p, o in bronze_end.items() if parsed_end.get(p, 0) < o}
    if plan.rebuild_from is None:
        # Starting from a checkpoint that agrees with bronze: the parsed side moves with it, and a
        # gap from an earlier crash is the parsed backlog's business.
        return plan
    return StartPlan(plan.rebuild_from, plan.reason, ahead or None, behind or None)


def checkpoint_facts(checkpoint: Location, topic: str) -> CheckpointFacts:
    """Read the checkpoint for :func:`decide_start`; a corrupt one reads as none."""
    try:
        state = read_checkpoint(checkpoint, topic)
        metadata = small_files.read_text(join(checkpoint, "metadata"))
        query = json.loads(metadata).get("id") if metadata is not None else None
    except (OSError, ValueError) as err:
        log.warning("checkpoint %s cannot be read (%s): treated as missing", checkpoint, err)
        return CheckpointFacts(None, None)
    return CheckpointFacts(
        state,
        query,
        tuple(batch_ids(join(checkpoint, "offsets"))),
        tuple(batch_ids(join(checkpoint, "commits"))),
    )


def plan_start(topic: TopicConfig, topic_id: str | None = None) -> StartPlan:
    """Decide where the stream starts.

    Raises:
        TopicRecreatedError: ``topic_id`` (Kafka's, now) is not the one the table's offsets came from.
        BrokerUnreachableError: Kafka did not say the topic's ID (``topic_id`` None) while the
            table's offsets carry one: the check could not run, and a re-created topic refilled
            past the table's offsets would be read as the old one. Retried, never skipped.
    """
    position = table_position.read_position(topic.path)
    refused = table_position.identity_failure(topic.name, topic_id, position)
    if refused is not None:
        raise refused.error()
    parsed_end: Offsets = {}
    if topic.parsed.enabled:
        parsed_end = table_position.furthest(
            table_position.read_position(t.location) for t in topic_tables(topic)[1:]
        )
    return decide_start(position, checkpoint_facts(topic.checkpoint_path, topic.name), parsed_end)
