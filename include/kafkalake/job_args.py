"""The command line every per-topic Spark job shares: ``--topic NAME``, resolved in the catalog."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence

from kafkalake.catalog import TopicConfig, load_catalog
from kafkalake.paths import catalog_path, lake_root

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def topic_from_args(doc: str, argv: Sequence[str] | None = None) -> TopicConfig:
    """Parse ``--topic``, set up logging, and return the topic's validated settings."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--topic", required=True, help="topic name, as in the catalog")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    return load_catalog(catalog_path(), lake_root()).topic(args.topic)
