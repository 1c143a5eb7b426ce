"""Full refresh of a topic: delete its tables and checkpoint so the next run re-reads Kafka.

    python -m kafkalake.cli.full_refresh --topic orders            # says what it would do
    python -m kafkalake.cli.full_refresh --topic orders --yes      # does it

Allowed only while Kafka still holds every record from offset 0 on every partition (and the topic
starts from ``earliest``): then the next run lands exactly what the tables held, and more.
Otherwise it refuses and says which partitions and how many records would be lost. A compacted
topic is refused too (its offsets start at 0, but older versions of a key that bronze holds are
gone from Kafka) unless ``--allow-compacted`` says that loss is accepted.

It deletes under the topic's run lock (an ingest running meanwhile makes it refuse, and no ingest
can start while it deletes: the lock file, in bronze's folder, is deleted last), and only paths
inside the lake root or the topic's own configured location that hold a Delta table, a
checkpoint, or nothing: never ``/``, a home folder, the lake root itself, or a folder that holds
the lake. A table is deleted only when its own log says kafkalake created it for this topic (the
``kafkalake.topic`` property, or the description tables created before that property carry): a
location in the catalog that points at someone else's table is refused, not emptied. Pause the
topic's DAG first.

A family entry (several topics in one table) is refreshed when each member Kafka has passes those
checks and the table holds no rows of a member Kafka no longer has (deleted: its rows exist nowhere
else).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from kafkalake.config.catalog import load_catalog
from kafkalake.config.family import resolve_members
from kafkalake.config.tables import topic_tables
from kafkalake.config.topic import TopicConfig
from kafkalake.core.errors import CheckpointLockedError
from kafkalake.core.paths import catalog_path, lake_root
from kafkalake.kafka.offsets import is_compacted, topic_config, topic_names, watermarks
from kafkalake.lake.checkpoint_lock import checkpoint_lock, local_path
from kafkalake.lake.table_position import read_position

# kafkalake.airflow.connections (and with it Airflow, ~5 s to import) is imported only when a connection
# must be looked up: the CLI runs without it otherwise.


@dataclass(frozen=True)
class RefreshPlan:
    allowed: bool
    reason: str
    #: Partitions whose first records are gone from Kafka: {partition: earliest offset}.
    lost: dict[int, int] = field(default_factory=dict)


def plan(
    topic: TopicConfig,
    marks: Mapping[int, tuple[int, int]],
    compacted: bool = False,
    allow_compacted: bool = False,
) -> RefreshPlan:
    """Whether a full refresh of ``topic`` loses nothing, from Kafka's (earliest, end) offsets."""
    if compacted and not allow_compacted:
        return RefreshPlan(
            False,
            f"topic {topic.name!r} is compacted (cleanup.policy compact): Kafka keeps only the latest "
            "record per key, so a full refresh would lose the older versions bronze holds. Pass "
            "--allow-compacted to accept that loss",
        )
    if topic.starting_offsets != "earliest":
        return RefreshPlan(
            False,
            f"topic {topic.name!r} starts from {topic.starting_offsets!r}: a full refresh would re-read "
            "only records produced from now on and lose everything the tables hold",
        )
    lost = {p: low for p, (low, _high) in sorted(marks.items()) if low > 0}
    if lost:
        parts = ", ".join(f"partition {p}: offsets 0..{low - 1} ({low} records)" for p, low in lost.items())
        return RefreshPlan(
            False,
            f"Kafka no longer holds the start of topic {topic.name!r} ({parts}): a full refresh would "
            f"lose {sum(lost.values())} records that Kafka cannot give back",
            lost,
        )
    total = sum(high for _low, high in marks.values())
    return RefreshPlan(
        True,
        f"Kafka still holds every record of topic {topic.name!r} from offset 0 on all {len(marks)} "
        f"partitions ({total} records): the next run re-reads them all",
    )


def unsafe_to_delete(path: Path, lake: Path) -> str | None:
    """Why ``path`` must not be deleted by a full refresh; None when it may.

    Pure apart from looking at what ``path`` holds: a table location must be inside the lake root
    or (configured elsewhere) hold a Delta table or nothing, and never be a folder above the lake.
    """
    path, lake = Path(os.path.abspath(path)), Path(os.path.abspath(lake))
    home = Path(os.path.abspath(Path.home()))
    if len(path.parts) < 3:
        return f"{path} is a filesystem root or a top-level folder"
    if path == lake or path in lake.parents:
        return f"{path} is the lake root {lake} or holds it"
    if path == home or path in home.parents:
        return f"{path} is a home folder or holds one"
    if lake in path.parents:
        return None
    if not path.exists() or (path / "_delta_log").is_dir() or path.name == "checkpoint":
        return None
    return f"{path} is outside the lake root {lake} and holds no Delta table"


#: Set on every table kafkalake creates (kafkalake.spark.table_settings.TOPIC_PROPERTY; the CLI
#: does not import the Spark side).
TOPIC_PROPERTY = "kafkalake.topic"


def not_ours(path: Path, topic: TopicConfig) -> str | None:
    """Why the folder at ``path`` is not one of ``topic``'s tables that a full refresh may delete.

    A Delta table must say in its own log that kafkalake created it for this topic: the
    ``kafkalake.topic`` property, or (tables created before the property) the description
    ``Kafka topic <name>, ...`` / ``Kafka topic <name>: ...`` kafkalake wrote. A folder without a
    Delta log may hold nothing but kafkalake's own ``_kafkalake`` folder (a checkpoint, a lock).
    """
    if not path.exists():
        return None
    if not (path / "_delta_log").is_dir():
        if path == local_path(topic.checkpoint_path):
            return None
        foreign = sorted(p.name for p in path.iterdir() if p.name != "_kafkalake")
        if not foreign:
            return None
        more = ", ..." if len(foreign) > 3 else ""
        return f"{path} holds files but no Delta table ({', '.join(foreign[:3])}{more})"
    from deltalake import DeltaTable

    try:
        metadata = DeltaTable(str(path)).metadata()
    except Exception as err:  # a log delta-rs cannot read is no table we know to be ours
        return f"{path} holds a Delta log that cannot be read ({type(err).__name__}: {err})"
    owner = (metadata.configuration or {}).get(TOPIC_PROPERTY)
    if owner is not None:
        return None if owner == topic.name else f"{path} is a table of topic {owner!r}, not {topic.name!r}"
    description = metadata.description or ""
    for mark in (f"Kafka topic {topic.name}, ", f"Kafka topic {topic.name}: "):
        if description.startswith(mark):
            return None
    return (
        f"{path} is a Delta table that kafkalake did not create for topic {topic.name!r} (no "
        f"{TOPIC_PROPERTY} property; description {description!r})"
    )


def delete_tables(topic: TopicConfig, lake: Path) -> list[str]:
    """Delete every table of the topic (the checkpoint lives inside) and the checkpoint itself.

    Under the topic's run lock: a running ingest makes this fail (CheckpointLockedError) before
    anything is deleted. Every path is checked before the first one is deleted.
    """
    locations = [t.location for t in topic_tables(topic)] + [topic.checkpoint_path]
    paths = []
    for location in locations:
        path = local_path(location)
        if path is None:
            raise SystemExit(
                f"full refresh REFUSED: topic {topic.name!r}: {location} is on an object store; this "
                "command deletes local tables only: pause the DAG and delete the topic's prefixes with "
                "the store's own tools (docs/object-storage.md); nothing was deleted"
            )
        if (reason := unsafe_to_delete(path, lake) or not_ours(path, topic)) is not None:
            raise SystemExit(f"full refresh REFUSED: {reason}; nothing was deleted")
        paths.append(path)
    deleted = []
    with checkpoint_lock(topic.checkpoint_path) as lock:
        assert lock is not None  # local paths only (above)
        # The lock file lives in the bronze folder: that folder goes last, and the lock file last
        # of all, so no ingest can take the lock (and start) while any table is half deleted.
        # Unlinked while held, the lock stays ours (the kernel keeps it on the open file).
        for path in sorted(paths, key=lambda p: lock.is_relative_to(p)):
            if path.exists():
                _delete_all_but(path, lock)
                deleted.append(str(path))
        lock.unlink(missing_ok=True)
    for path in paths:
        if lock.is_relative_to(path):
            _remove_empty_folders(lock.parent, path)
    return deleted


def _delete_all_but(path: Path, keep: Path) -> None:
    """Delete ``path`` and everything in it except ``keep`` (and the folders that lead to it)."""
    if not keep.is_relative_to(path):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
        return
    if path == keep:
        return
    for child in path.iterdir():
        _delete_all_but(child, keep)


def _remove_empty_folders(folder: Path, top: Path) -> None:
    """Remove ``folder`` and its parents up to ``top`` while they are empty: one an ingest started in
    meanwhile (it took a new lock) is left to it."""
    while folder.is_relative_to(top):
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent


def kafka_config(topic: TopicConfig, bootstrap_servers: str | None) -> dict[str, str]:
    if bootstrap_servers:
        return {"bootstrap.servers": bootstrap_servers}
    from kafkalake.airflow.connections import kafka_config_for

    return kafka_config_for(topic.kafka_conn_id)


def family_plan(
    topic: TopicConfig,
    marks: Mapping[str, Mapping[int, tuple[int, int]]],
    held: Iterable[str],
    compacted: Iterable[str] = (),
    allow_compacted: bool = False,
) -> RefreshPlan:
    """:func:`plan` of a family: every member Kafka has (``marks``) as one topic's, and none of the
    members whose rows the table holds (``held``) gone from Kafka: those rows exist nowhere else."""
    gone = sorted(set(held) - set(marks))
    if gone:
        return RefreshPlan(
            False,
            f"entry {topic.name!r}: the table holds rows of {', '.join(repr(t) for t in gone)}, which "
            "Kafka no longer has: a full refresh would lose them for good",
        )
    squashed = set(compacted)
    for member, parts in sorted(marks.items()):
        alone = replace(topic, name=member, members=(), topic_pattern=None)
        decided = plan(alone, parts, member in squashed, allow_compacted)
        if not decided.allowed:
            return decided
    total = sum(high for parts in marks.values() for _low, high in parts.values())
    return RefreshPlan(
        True,
        f"Kafka still holds every record of the {len(marks)} members of {topic.name!r} "
        f"({', '.join(sorted(marks))}) from offset 0 ({total} records): the next run re-reads them all",
    )


def _family_decision(topic: TopicConfig, client: Mapping[str, str], allow_compacted: bool) -> RefreshPlan:
    """Ask Kafka and the table what :func:`family_plan` decides on."""
    position = read_position(topic.path)
    held = set(position.members or {}) if position is not None else set()
    members = resolve_members(topic.members, topic.topic_pattern, topic_names(client), held).present
    marks = {member: watermarks(client, member) for member in members}
    compacted = {member for member in members if is_compacted(topic_config(client, member))}
    return family_plan(topic, marks, held, compacted, allow_compacted)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topic", required=True, help="topic name, as in the catalog")
    parser.add_argument(
        "--yes", action="store_true", help="really delete (without it: say what would happen)"
    )
    parser.add_argument("--bootstrap-servers", help="Kafka brokers (default: the topic's Airflow connection)")
    parser.add_argument(
        "--allow-compacted",
        action="store_true",
        help="refresh a compacted topic, losing the older versions of keys that bronze holds",
    )
    args = parser.parse_args(argv)
    lake = lake_root()
    topic = load_catalog(catalog_path(), lake).topic(args.topic)
    client = kafka_config(topic, args.bootstrap_servers)
    if topic.is_family:
        decision = _family_decision(topic, client, args.allow_compacted)
    else:
        compacted = is_compacted(topic_config(client, topic.name))
        decision = plan(topic, watermarks(client, topic.name), compacted, args.allow_compacted)
    if not decision.allowed:
        print(f"full refresh REFUSED: {decision.reason}", file=sys.stderr)
        return 1
    print(f"full refresh allowed: {decision.reason}")
    if not args.yes:
        print("nothing deleted: re-run with --yes (pause the topic's DAG first)")
        return 0
    try:
        deleted = delete_tables(topic, lake)
    except CheckpointLockedError as err:
        print(f"full refresh REFUSED: {err}", file=sys.stderr)
        return 1
    for path in deleted:
        print(f"deleted {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
