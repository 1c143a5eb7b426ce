"""A topic's schema history from the command line: list it, show a version, accept a proposal.

    python -m kafkalake.cli.schema list --topic orders
    python -m kafkalake.cli.schema show --topic orders [--version N]
    python -m kafkalake.cli.schema accept --topic orders

``accept`` is the documented answer to a ``schema_rejected`` failure (``failOnNewColumns``): the
proposed schema becomes the next version, and the next run parses the new fields.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from kafkalake.config.catalog import load_catalog
from kafkalake.core.paths import catalog_path, lake_root
from kafkalake.lake.schema_algebra import diff, type_string
from kafkalake.lake.schema_history import SchemaHistory

# kafkalake.airflow.connections (and with it Airflow, ~5 s to import) is imported only when a connection
# must be looked up: the CLI runs without it otherwise.


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="A topic's schema history.")
    parser.add_argument("action", choices=("list", "show", "accept"))
    parser.add_argument("--topic", required=True)
    parser.add_argument("--version", type=int, help="with show: this version (default: the current one)")
    args = parser.parse_args(argv)
    topic = load_catalog(catalog_path(), lake_root()).topic(args.topic)
    if topic.on_object_store and topic.storage_conn_id:
        from kafkalake.airflow.connections import use_topic_storage

        use_topic_storage(topic)
    history = SchemaHistory(topic.schema_dir)

    if args.action == "list":
        for number in history.versions():
            version = history.read(number)
            print(f"{number:>4}  {version.created_at}  {version.source}: {'; '.join(version.changes)}")
        pending = history.pending()
        if pending:
            print(f"pending: {pending['reason']} (accept it with: schema_cli accept --topic {topic.name})")
        return 0
    if args.action == "show":
        pending = history.pending()
        if args.version is None and pending:
            current = history.current()
            print(f"proposed ({pending['reason']}), not yet accepted:")
            for change in diff(current.schema if current else None, pending["schema"]):
                print(f"  {change}")
            return 0
        number = args.version or (history.versions() or [0])[-1]
        if not number:
            print(f"topic {topic.name!r} has no schema yet (no JSON record landed)", file=sys.stderr)
            return 1
        version = history.read(number)
        print(f"version {version.version} ({version.source}, {version.created_at})")
        for field in version.schema["fields"]:
            print(f"  {field['name']}: {type_string(field['type'])}")
        print("changes from the previous version:\n  " + "\n  ".join(version.changes or ["none"]))
        return 0
    try:
        accepted = history.accept_pending()
    except FileNotFoundError as err:
        print(err, file=sys.stderr)
        return 1
    print(json.dumps({"accepted_version": accepted.version if accepted else None}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
