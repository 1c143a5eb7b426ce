"""An object store's refusal met in this process, raised as the failure kind on-call acts on.

delta-rs, pyarrow and boto3 raise a refused request as a plain ``OSError`` (or botocore's
``ClientError``), and S3A in a Spark job as a JVM error whose trace pyspark keeps: their text holds
S3's error code, and left so a wrong secret key would be retried three times as ``unknown``. Read
inside :func:`named`, it becomes ``authentication_failed``, ``authorization_failed``, ``bad_config``
or the transient ``store_unreachable`` (:func:`kafkalake.core.job_failures.store_failure`), with the
connection named: the Airflow tasks' retry policy and the jobs' own reporting of typed errors act on
it. Anything else passes through as it is, but for a terminal's colour escapes.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from kafkalake.core.errors import KafkalakeError
from kafkalake.core.job_failures import exception_text, store_failure, without_colour


@contextmanager
def named(topic: str, conn_id: str | None) -> Iterator[None]:
    """Raise a refusal of the store met in the block as its typed error, naming ``conn_id``."""
    try:
        yield
    except KafkalakeError:
        raise
    except Exception as err:
        refused = store_failure(topic, exception_text(err), conn_id)
        if refused is None:
            without_colour(err)
            raise
        raise refused.error() from err
