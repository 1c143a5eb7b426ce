"""The versions of the installed Python distributions, read once per process.

``importlib.metadata.version`` finds and parses the distribution's METADATA file as an e-mail
message on every call (~0.7 ms). A job's settings ask for pyspark's several times (the class
archive's fingerprint, the JVM extension's digest), and the DAG factory builds them for every
Spark task of every topic when Airflow parses the DAG file: 86 calls of ``base_conf`` in one parse
of a 24-topic catalog. A process runs the pyspark it imported, whatever is installed later.
"""

from __future__ import annotations

import functools
from importlib.metadata import version as _version


@functools.cache
def version(distribution: str) -> str:
    """The installed version of ``distribution`` (``PackageNotFoundError`` when it is not)."""
    return _version(distribution)
