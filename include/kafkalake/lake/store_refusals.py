"""An object store's refusal met in this process, raised as the failure kind on-call acts on.

delta-rs, pyarrow and boto3 raise a refused request as a plain ``OSError`` (or botocore's
``ClientError``) whose text holds S3's error code: left so, a wrong secret key would be retried
three times as ``unknown``. Read inside :func:`named`, it becomes ``authentication_failed``,
``authorization_failed`` or ``bad_config`` (:func:`kafkalake.core.job_failures.store_failure`), not
retried, with the connection named. Anything else passes through unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from kafkalake.core.errors import KafkalakeError
from kafkalake.core.job_failures import store_failure


@contextmanager
def named(topic: str, conn_id: str | None) -> Iterator[None]:
    """Raise a refusal of the store met in the block as its typed error, naming ``conn_id``."""
    try:
        yield
    except KafkalakeError:
        raise
    except Exception as err:
        refused = store_failure(topic, str(err), conn_id)
        if refused is None:
            raise
        raise refused.error() from err
