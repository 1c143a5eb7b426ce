"""The private hand-over file: settings a task gives its Spark job without a command line.

Secrets (the Kafka client's, the object store's) must never be on spark-submit's command line, in a
log or in XCom. The task writes them to a file only its user can read (:func:`config_file`), names
it in the job's environment (:data:`ENV_CLIENT_CONFIG_FILE` for the Kafka settings) and removes it
when the job ends; the job deletes it as soon as it has read it (:func:`read_config_file`; the object
store's: :func:`kafkalake.lake.store_settings.load_file`). A folder left by a task killed before either
could is removed by the next writer (:func:`sweep_stale`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

from kafkalake.core.errors import KafkaConfigError

#: spark-submit's environment names the file; the file holds the settings.
ENV_CLIENT_CONFIG_FILE = "KAFKALAKE_KAFKA_CONFIG_FILE"
#: Set to 1 in a job's environment to keep the settings file it reads (by default it is deleted).
ENV_KEEP_CLIENT_CONFIG_FILE = "KAFKALAKE_KEEP_KAFKA_CONFIG_FILE"


#: Folders of settings files are named ``<prefix><pid of the writer>-<random>``.
_DIR_PREFIX = "kafkalake-secrets-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale(tmp: Path | None = None) -> list[Path]:
    """Remove settings folders whose writer died without removing them (a SIGKILLed task).

    Only this user's folders, and only when the process that made them is gone.
    """
    removed = []
    for folder in Path(tmp or tempfile.gettempdir()).glob(f"{_DIR_PREFIX}*"):
        pid_text = folder.name[len(_DIR_PREFIX) :].split("-", 1)[0]
        try:
            info = folder.lstat()
        except OSError:
            continue
        if not pid_text.isdigit() or info.st_uid != os.getuid() or not folder.is_dir() or folder.is_symlink():
            continue
        if not _alive(int(pid_text)):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


@contextlib.contextmanager
def config_file(config: Mapping[str, str], name: str = "kafka-client.json") -> Iterator[Path]:
    """Write settings to a private file for a child process; remove it when the block ends.

    The child deletes the file once it has read it (:func:`read_config_file`); a folder left by a
    writer killed before either could is removed by the next call on the machine (:func:`sweep_stale`).
    """
    sweep_stale()
    directory = Path(tempfile.mkdtemp(prefix=f"{_DIR_PREFIX}{os.getpid()}-"))  # mkdtemp makes it 0700
    path = directory / name
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump(dict(config), out)
        yield path
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def read_config_file(path: str | os.PathLike[str], *, remove: bool = False) -> dict[str, str]:
    """The settings a :func:`config_file` holds; with ``remove``, the file is deleted once read."""
    try:
        with open(path) as src:
            loaded = json.load(src)
    except OSError as err:
        # A job run again by hand after its file was read and deleted: a clear refusal, not a crash.
        raise KafkaConfigError(
            f"{path}: cannot read the Kafka client settings ({err.strerror}); the task that starts the "
            "job writes this file and the job deletes it once read"
        ) from err
    except ValueError as err:
        raise KafkaConfigError(f"{path}: not JSON ({err})") from err
    finally:
        if remove:
            Path(path).unlink(missing_ok=True)
    if not isinstance(loaded, dict) or "bootstrap.servers" not in loaded:
        raise KafkaConfigError(f"{path}: expected a JSON object with 'bootstrap.servers'")
    return {str(k): str(v) for k, v in loaded.items()}
