"""spark-submit entry point: infer a topic's JSON schema from recent bronze rows and persist it.

spark-submit --jars ... jobs/refresh_schema.py --topic orders
"""

from __future__ import annotations

import logging
import sys

from kafkalake.spark.job_args import topic_from_args
from kafkalake.spark.job_session import job_session
from kafkalake.spark.schema_refresh import refresh

log = logging.getLogger("kafkalake.schema")


def main(argv: list[str] | None = None) -> int:
    topic = topic_from_args(__doc__, argv)
    if not topic.parsed.enabled:
        log.info("topic %s is bronze only (parsed: false): no schema to refresh", topic.name)
        return 0
    with job_session(f"kafkalake-schema-{topic.name}", topic) as job:
        log.info(refresh(job.spark, topic).summary(topic.name))
    return job.exit_code()


if __name__ == "__main__":
    sys.exit(main())
