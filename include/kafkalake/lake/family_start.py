"""Where a family's stream starts: per member topic, from the checkpoint or from the table.

A family (several topics in one table: :mod:`kafkalake.config.family`) is one Kafka source that
subscribes to the members Kafka has when the run starts. Spark's checkpoint pins the topics it read;
when the members now are not those (a topic created that matches, or one deleted), the stream starts
under a fresh checkpoint from the offsets the table records for each member
(:mod:`kafkalake.lake.table_position`), and a member the table holds nothing of from the entry's
``starting_offsets``. Otherwise the rules of :mod:`kafkalake.lake.start_plan` hold per member: the
checkpoint when it agrees with the table, or its unfinished batch is the table's newest; the table
when the checkpoint is lost, corrupt, older or newer.

:func:`decide_family_start` is pure; :func:`family_checkpoint_facts` and :func:`plan_family_start`
are its I/O edges.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from kafkalake.config.topic import TopicConfig
from kafkalake.core.errors import Kind, TableStateError, failure
from kafkalake.lake import small_files, table_position
from kafkalake.lake.checkpoint import FamilyCheckpointState, Offsets, batch_ids, read_family_checkpoint
from kafkalake.lake.small_files import Location, join
from kafkalake.lake.table_position import TablePosition

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FamilyCheckpointFacts:
    """What a family's checkpoint says: per topic, and its batch ids and query id."""

    state: FamilyCheckpointState | None
    query: str | None = None
    planned: tuple[int, ...] = ()
    committed: tuple[int, ...] = ()


@dataclass(frozen=True)
class FamilyStart:
    #: The members read this run (Kafka has them), in order.
    members: tuple[str, ...]
    #: None: from the checkpoint. Otherwise, under a fresh checkpoint, each member's offsets from
    #: the table, or None: from the entry's ``starting_offsets``.
    rebuild_from: dict[str, Offsets | None] | None = None
    reason: str = ""
    #: Members read for the first time (neither the table nor the checkpoint held them).
    new: tuple[str, ...] = ()
    #: The table's recorded offsets and IDs of every member it holds: carried into each commit.
    known: dict[str, Offsets] = field(default_factory=dict)
    known_ids: dict[str, str] = field(default_factory=dict)


def decide_family_start(
    present: Sequence[str], position: TablePosition | None, checkpoint: FamilyCheckpointFacts
) -> FamilyStart:
    """Where the family's stream starts. Pure.

    Raises:
        TableStateError: the table records a single topic's offsets, not a family's.
    """
    if position is not None and position.members is None:
        raise TableStateError(
            failure(
                Kind.TABLE_STATE,
                f"the table's Delta log records the offsets of a single topic ({position.describe()}), "
                "not of a family: a family entry must land in a table of its own",
            ).message
        )
    known = {t: dict(o) for t, o in (position.members or {}).items()} if position else {}
    ids = dict(position.member_ids or {}) if position else {}
    state = checkpoint.state
    in_checkpoint = set(state.committed) if state is not None else set()
    members = tuple(present)
    new = tuple(t for t in members if t not in known and t not in in_checkpoint)
    base = FamilyStart(members, new=new, known=known, known_ids=ids)
    if state is None:
        if position is None:
            return base  # a first run: every member from starting_offsets
        why = "the checkpoint is missing, empty or unreadable"
    elif set(members) != in_checkpoint:
        came = sorted(set(members) - in_checkpoint)
        went = sorted(in_checkpoint - set(members))
        why = (
            "the members changed since the checkpoint was written ("
            + "; ".join(
                part
                for part in (
                    f"new: {', '.join(came)}" if came else "",
                    f"gone: {', '.join(went)}" if went else "",
                )
                if part
            )
            + ")"
        )
    elif position is None:
        return base
    else:
        unfinished = set(checkpoint.planned) - set(checkpoint.committed)
        same_stream = checkpoint.query == position.query and position.batch is not None
        if same_stream and (
            position.batch == max(checkpoint.committed, default=-1) or position.batch in unfinished
        ):
            return base
        agree = all(
            {p: state.committed.get(t, {}).get(p) for p in known[t]} == known[t]
            for t in members
            if t in known
        )
        if agree:
            return base
        why = (
            "the checkpoint and the table hold different offsets (the table was restored, or the "
            "checkpoint is old)"
        )
    # Only a checkpoint that never committed a batch says where members the table lacks were to
    # start: once a batch committed, the table holds every member the checkpoint read.
    pinned = state.committed if state is not None and not checkpoint.committed else {}
    start = {t: known.get(t, pinned.get(t)) for t in members}
    where = position.describe() if position is not None else "no offsets recorded yet"
    return FamilyStart(
        members,
        rebuild_from=start,
        reason=f"{why}; rebuilding the position from the table, {where}",
        new=new,
        known=known,
        known_ids=ids,
    )


def family_checkpoint_facts(checkpoint: Location) -> FamilyCheckpointFacts:
    """Read a family's checkpoint for :func:`decide_family_start`; a corrupt one reads as none."""
    try:
        state = read_family_checkpoint(checkpoint)
        metadata = small_files.read_text(join(checkpoint, "metadata"))
        query = json.loads(metadata).get("id") if metadata is not None else None
    except (OSError, ValueError) as err:
        log.warning("checkpoint %s cannot be read (%s): treated as missing", checkpoint, err)
        return FamilyCheckpointFacts(None)
    return FamilyCheckpointFacts(
        state,
        query,
        tuple(batch_ids(join(checkpoint, "offsets"))),
        tuple(batch_ids(join(checkpoint, "commits"))),
    )


def plan_family_start(
    topic: TopicConfig, present: Sequence[str], topic_ids: Mapping[str, str | None]
) -> FamilyStart:
    """Decide where a family's stream starts, after checking each member is the topic its offsets
    came from.

    Raises:
        TopicRecreatedError: a member's ID (Kafka's, now) is not the one the table's offsets came from.
        BrokerUnreachableError: Kafka did not say a member's ID while the table records one.
        TableStateError: the table records a single topic's offsets.
    """
    position = table_position.read_position(topic.path)
    refused = table_position.family_identity_failure({t: topic_ids.get(t) for t in present}, position)
    if refused is not None:
        raise refused.error()
    return decide_family_start(present, position, family_checkpoint_facts(topic.checkpoint_path))


def known_members(topic: TopicConfig) -> set[str]:
    """Members the table or its checkpoint holds offsets of (a pattern's deleted member is missing)."""
    position = table_position.read_position(topic.path)
    facts = family_checkpoint_facts(topic.checkpoint_path)
    return set((position.members or {}) if position else {}) | set(
        facts.state.committed if facts.state else {}
    )


def parsed_behind(
    bronze: Mapping[str, Offsets], parsed: Iterable[Mapping[str, Offsets] | None]
) -> dict[str, dict[int, tuple[int, int]]]:
    """Per member and partition, the offsets ``[start, end)`` bronze holds (``bronze``: its recorded
    position) that the parsed side's tables do not (``parsed``: each table's recorded members, the
    furthest counts). Empty when they agree. Pure.

    Only the parsed side's last write of a batch records the batch's position
    (:func:`kafkalake.spark.batch_writer.position_carrier`), so the furthest one is whole."""
    held: dict[str, dict[int, int]] = {}
    for members in parsed:
        for member, ends in (members or {}).items():
            mine = held.setdefault(member, {})
            for p, o in ends.items():
                mine[p] = max(mine.get(p, 0), o)
    behind: dict[str, dict[int, tuple[int, int]]] = {}
    for member, ends in bronze.items():
        spans = {p: (held.get(member, {}).get(p, 0), o) for p, o in ends.items()}
        spans = {p: span for p, span in spans.items() if span[0] < span[1]}
        if spans:
            behind[member] = spans
    return behind
