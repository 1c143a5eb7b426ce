"""Which Spark settings of a topic would be credentials: the catalog refuses them (config/catalog).

A topic's ``spark_conf`` ends up as ``--conf k=v`` on the spark-submit command line
(:mod:`kafkalake.launch.spark_conf`), so a credential there would be visible to anyone on the machine.
Told from the settings' names alone (no I/O): the catalog asks when it loads.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

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


def _is_credential(name: str) -> bool:
    return bool(_CREDENTIAL.search(name)) and not _NOT_A_CREDENTIAL.search(name)


#: A JVM system property set in a Java options value: ``-Dname=value`` (or ``-Dname`` alone).
_SYSTEM_PROPERTY = re.compile(r"""(?:^|\s)["']?-D([^=\s"']+)""")


def credential_settings(conf: Mapping[str, object] | list[str]) -> list[str]:
    """The settings among ``conf`` (its keys) that would put a credential on the command line
    (sorted): a setting named like one, and Java options (``spark.driver.extraJavaOptions`` and the
    like) that set a system property named like one (``-Dfs.s3a.secret.key=...``), shown as
    ``setting (-Dproperty)``. An executor environment variable is told by its name, the part after
    ``spark.executorEnv.``, as any other key is."""
    found = [k for k in conf if _is_credential(k)]
    if isinstance(conf, Mapping):
        for key, value in conf.items():
            if key.endswith("JavaOptions") and isinstance(value, str):
                found += [f"{key} (-D{p})" for p in _SYSTEM_PROPERTY.findall(value) if _is_credential(p)]
    return sorted(found)
