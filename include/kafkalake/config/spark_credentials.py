"""Which Spark settings of a topic would be credentials: the catalog refuses them (config/catalog).

A topic's ``spark_conf`` ends up as ``--conf k=v`` on the spark-submit command line
(:mod:`kafkalake.launch.spark_conf`), so a credential there would be visible to anyone on the machine.
Told from the settings' names alone (no I/O): the catalog asks when it loads.
"""

from __future__ import annotations

import re

# Settings whose values are credentials: on the command line they would be visible in `ps`, in the
# task log and in the task's rendered fields.
_CREDENTIAL = re.compile(
    r"secret|password|passwd|token|credential|jaas|private[._-]?key|access[._-]?key"
    r"|account\.key|sas\.|encryption[._-]?key|signature",
    re.IGNORECASE,
)
# ... unless the name ends in one of these: they name a class, a provider, a switch or a path,
# e.g. spark.hadoop.fs.s3a.aws.credentials.provider (the supported way to give S3 credentials).
_NOT_A_CREDENTIAL = re.compile(
    r"\.(?:provider|providers|provider\.path|provider\.type|class|classes|enabled|type|mechanism"
    r"|regex|renewal\.enabled)$",
    re.IGNORECASE,
)
#: Where a credential should come from instead; the catalog's refusal points here.
CREDENTIAL_ADVICE = (
    "credentials must never be on the spark-submit command line (it is visible in `ps`, the task log "
    "and the task's rendered fields): give them through the worker's environment (e.g. "
    "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, or an instance/workload identity with "
    "spark.hadoop.fs.s3a.aws.credentials.provider), a Hadoop credential provider "
    "(spark.hadoop.hadoop.security.credential.provider.path: jceks://file/...), or a properties "
    "file only the worker's user can read (chmod 600) passed with spark-submit's --properties-file"
)


def credential_settings(keys: list[str]) -> list[str]:
    """The settings among ``keys`` whose values would be credentials (sorted)."""
    return sorted(k for k in keys if _CREDENTIAL.search(k) and not _NOT_A_CREDENTIAL.search(k))
