"""Spark's own authentication and RPC encryption, for jobs on a standalone cluster that has them on.

A standalone master and its workers started with ``spark.authenticate=true`` accept only
applications that know their shared secret, and with ``spark.network.crypto.enabled=true`` encrypt
every RPC (block transfers included). A driver needs the secret as the setting
``spark.authenticate.secret`` (Spark takes no file for it outside YARN and Kubernetes, see
``SecurityManager.initializeAuth``), and a ``--conf`` would show it in ``ps``. So the secret lives in a
Spark properties file only its user can read (the one the cluster itself is started with), whose
*path* is given in :data:`ENV_SPARK_AUTH_FILE`; spark-submit loads it with ``--properties-file``.
The workers hand the secret to the executors in their environment, never on a command line.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from kafkalake.core.errors import BadConfigError

#: The path of the cluster's Spark properties file that holds ``spark.authenticate.secret``; unset,
#: jobs run without Spark authentication (local[*] needs none: nothing leaves the JVM).
ENV_SPARK_AUTH_FILE = "KAFKALAKE_SPARK_AUTH_FILE"

SECRET_KEY = "spark.authenticate.secret"

#: Not secret, so also passed as ``--conf`` where the task's rendered command shows them.
AUTH_CONF = {"spark.authenticate": "true", "spark.network.crypto.enabled": "true"}

PLACEHOLDER = "change-me-"


def auth_file() -> Path | None:
    """The properties file :data:`ENV_SPARK_AUTH_FILE` names, checked; None when it is unset.

    Raises:
        BadConfigError: the file is missing, readable by others, or its secret is missing, empty
            or a ``change-me-`` placeholder (named by file, never by value).
    """
    named = os.environ.get(ENV_SPARK_AUTH_FILE)
    if not named:
        return None
    path = Path(named)
    check_auth_file(path)
    return path


def check_auth_file(path: Path) -> None:
    """Refuse a properties file whose secret cannot be used (see :func:`auth_file`)."""
    try:
        mode = path.stat().st_mode
        text = path.read_text()
    except OSError as err:
        raise BadConfigError(f"{ENV_SPARK_AUTH_FILE}: {path}: cannot be read ({err.strerror})") from None
    if mode & 0o077:
        raise BadConfigError(f"{path}: holds Spark's shared secret but others can read it: chmod 600 {path}")
    value = read_properties(text).get(SECRET_KEY, "")
    if not value.strip():
        raise BadConfigError(f"{path}: no value for {SECRET_KEY}")
    if PLACEHOLDER in value:  # the message names the file only, never the value
        raise BadConfigError(
            f"{path}: {SECRET_KEY} still holds a {PLACEHOLDER} placeholder: set a random value"
        )


def read_properties(text: str) -> dict[str, str]:
    """``key=value`` lines (Spark's own properties files need no escapes here; comments skipped)."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith(("#", "!")):
            continue
        key, _, value = stripped.partition("=")
        found[key.strip()] = value.strip()
    return found


def properties_text(secret: str) -> str:
    """A properties file for a cluster and its jobs: authentication and encryption on, the secret."""
    return "".join(f"{k}={v}\n" for k, v in {**AUTH_CONF, SECRET_KEY: secret}.items())


def write_auth_file(path: Path, secret: str | None = None) -> Path:
    """Write :func:`properties_text` (a random secret by default) to ``path``, mode 0600."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(properties_text(secret or secrets.token_urlsafe(32)))
    return path
