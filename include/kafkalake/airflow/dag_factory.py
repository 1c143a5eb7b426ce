"""One Airflow DAG per catalog topic.

Parse-time work is reading the catalog file and environment variables: no database, no
connection, no network. Tasks: ``check_new_offsets`` >> ``ingest`` >> ``refresh_schema`` >>
``register_table`` >> ``maintain_table``. Beside them, one maintenance DAG, ``kafkalake_replay``
(:func:`replay_dag`), triggered by hand with the topic to replay as a param.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, MutableMapping
from datetime import timedelta
from typing import Any

import pendulum
from airflow.providers.standard.operators.python import PythonOperator, ShortCircuitOperator
from airflow.sdk import DAG, Param, get_parsing_context
from airflow.sdk.definitions.retry_policy import ExceptionRetryPolicy, RetryAction, RetryRule
from airflow.sdk.exceptions import AirflowNotFoundException

from kafkalake.airflow import freshness_figures, runbook
from kafkalake.airflow.assets import topic_assets
from kafkalake.airflow.discovery import discovery_dag
from kafkalake.airflow.freshness_trigger import freshness_asset
from kafkalake.airflow.pools import SPARK_POOL
from kafkalake.airflow.sla_alerts import (
    INGEST_TASK_ID,
    PREFLIGHT_TASK_ID,
    deadline_alert,
    webhook_conn_id,
)
from kafkalake.airflow.tasks import (
    FollowUpOperator,
    IngestOperator,
    MaintenanceOperator,
    RegisterOperator,
    ReplayOperator,
    check_new_offsets,
)
from kafkalake.config.catalog import Catalog, load_catalog
from kafkalake.config.schedule import sla_plan
from kafkalake.config.topic import TopicConfig
from kafkalake.core.durations import format_duration
from kafkalake.core.errors import CatalogError, NonRetryableError, TransientError
from kafkalake.core.paths import catalog_path, lake_root
from kafkalake.core.run_mode import PARAM_CONFIRM, PARAM_REINGEST_FROM
from kafkalake.launch.spark_conf import topic_conf

log = logging.getLogger(__name__)

#: Set to 1 (tests, CI) to fail on the first broken topic instead of building the others.
ENV_STRICT = "KAFKALAKE_STRICT"
ERRORS_DAG_ID = "kafkalake_catalog_errors"
REPLAY_DAG_ID = "kafkalake_replay"
START_DATE = pendulum.datetime(2025, 1, 1, tz="UTC")
RETRIES = 3
RETRY_DELAY = timedelta(minutes=1)
#: A replay re-parses a whole bronze snapshot: longer than a topic's runs, still bounded.
REPLAY_TIMEOUT = timedelta(hours=6)

#: Failures a retry cannot fix fail the task at once; the others keep retries with backoff.
NOT_RETRYABLE: tuple[type[BaseException], ...] = (
    # Every kafkalake error a retry cannot mend: config errors (BadConfigError and its subclasses),
    # offsets expired, topic missing, table state, as classified by kafkalake.core.errors.
    NonRetryableError,
    AirflowNotFoundException,  # e.g. the DAG's Kafka connection is not defined
)


def reingest_params() -> dict[str, Param]:
    """The DAG's params: the "Trigger DAG w/ config" form of a guarded re-ingest (run_modes)."""
    return {
        PARAM_REINGEST_FROM: Param(
            None,
            type=["null", "string"],
            title="Re-ingest from (gap repair)",
            description=(
                "Leave empty for a normal run. An ISO timestamp (UTC unless it names a zone, e.g. "
                "2026-05-01T10:00:00Z): re-read Kafka from then up to the checkpoint and land only the "
                "records the tables lack. Needs the confirmation below. Scheduled and backfill runs "
                "ignore it."
            ),
        ),
        PARAM_CONFIRM: Param(
            False,
            type="boolean",
            title="Confirm the re-ingest",
            description="Tick to confirm a re-ingest from the time above.",
        ),
    }


def retry_policy() -> ExceptionRetryPolicy:
    """The retry policy of every task: evaluated on the worker, with the raised exception."""
    return ExceptionRetryPolicy(
        rules=[
            RetryRule(
                exception=list(NOT_RETRYABLE),
                action=RetryAction.FAIL,
                reason="not retryable: failing at once (the error above says what to do)",
            ),
            RetryRule(
                exception=TransientError,
                action=RetryAction.RETRY,
                reason="transient failure: retrying with exponential backoff",
            ),
        ],
        default=RetryAction.DEFAULT,  # anything unclassified: the task's retries and backoff
    )


DOC = """\
### Kafka {source} → Delta table `{table}`

Lands every new record of the topic (of each member topic, for a family) in the bronze table at
`{path}`, exactly once.
{when}

1. `check_new_offsets` compares Kafka's end offsets with the table's checkpoint and skips the
   rest when nothing is new (no Spark job, no new table version).
2. `ingest` runs `jobs/ingest_topic.py` with `spark-submit` (`trigger(availableNow=True)`): it
   reads from the checkpoint at `{checkpoint}` to the end offsets seen at start, then stops.
3. `refresh_schema` (JSON topics) infers the schema of recent values and keeps its versions
   beside the table; `ingest` parses with it into the parsed and dead-letter tables. Under
   `addNewColumns` a run whose every parsed record fit the schema whole reads no sample: the
   task only says the schema is current.
4. `register_table` makes the tables queryable by name (`{table}`, and the parsed tables).
5. `maintain_table` runs OPTIMIZE / VACUUM / property changes when due (the topic's
   `maintenance:` block); when the ingest found them due it did them in its own Spark application
   and this task only reports; when nothing is due it is skipped without starting Spark. VACUUM
   never touches `_kafkalake/` (checkpoint, schema history).

**Freshness.** The table's data age against its SLA, its lag and the figures of its last runs
(rows, dead letters, schema versions, care): [the freshness view]({freshness}) (the DAG's
*Freshness* tab; every topic: *Freshness* in the navigation).

**Deadline.** A run not finished {deadline} after it was queued means the table is older than its
SLA: Airflow then logs an `SLA miss` (and posts it to the topic's SLA webhook, if it has one). A run
that ends with the table's newest record older than the SLA logs a `data age SLA miss` and posts it
the same way, once per table position (on `schedule: freshness`, the watcher does).

**Backfills and re-ingest.** A backfill run (`airflow backfill create`, the UI's Backfill) never
ingests: the ingest follows the checkpoint, not dates; it only runs `maintain_table`. To re-read
Kafka from a point in time (gap repair): **Trigger DAG w/ config** with `reingest_from` (ISO
timestamp) and `confirm_reingest` ticked; only records the tables lack are written. Re-parsing
bronze is the replay DAG's job. See RUNBOOK.md, "Backfills and re-ingest".

**On-call.** Every task is safe to clear and re-run: a retried or killed ingest resumes from its
checkpoint and writes no row twice. Never delete or move the checkpoint: that would re-read Kafka
from `{starting}` and duplicate rows. Transient failures (broker unreachable, timeouts, a lost
Spark driver) retry with backoff; the others fail at once, and the task log says what to do. If a
task fails with `[offsets_expired]` (offsets expired in Kafka before they were read), those records
are gone from Kafka: to accept the loss, run once with `fail_on_data_loss: false` on the topic,
then set it back.

Spark tasks wait for a slot of the pool `{pool}` (this topic's priority: {priority}); each
successful `ingest` updates the asset `{table}`.

{runbook}
"""


def _doc_source(topic: TopicConfig) -> str:
    if topic.topic_pattern is not None:
        return f"topics matching `{topic.topic_pattern}`"
    if topic.members:
        return "topics " + ", ".join(f"`{t}`" for t in topic.members)
    return f"topic `{topic.name}`"


def family_kwargs(topic: TopicConfig) -> dict[str, Any] | None:
    """What the pre-flight needs of a family entry to find its members (None: a single topic)."""
    if not topic.is_family:
        return None
    return {
        "topics": list(topic.members),
        "topic_pattern": topic.topic_pattern,
        "starting_offsets": topic.starting_offsets,
    }


def _doc_when(topic: TopicConfig) -> str:
    interval, sla = format_duration(topic.run_interval), format_duration(topic.freshness_sla)
    if topic.freshness is None:
        return f"Runs every **{interval}** (freshness SLA {sla} / 3, rounded down to the minute)."
    return (
        f"**schedule: freshness**: runs are queued by the asset watcher `{topic.dag_id}.freshness` "
        f"(kafkalake.airflow.freshness_trigger) when what waits in Kafka needs one: its oldest record "
        f"would pass the SLA of {sla} by the run's end, or {topic.freshness.file_bytes} bytes wait; at "
        f"least every {interval}, never within {format_duration(topic.freshness.floor)} of the last."
    )


def schedule_of(topic: TopicConfig) -> Any:
    """The DAG's schedule: SLA / 3, or the asset of a ``schedule: freshness`` topic's watcher."""
    if topic.schedule == "freshness":
        return [freshness_asset(topic, webhook_conn_id(topic, os.environ))]
    return topic.run_interval


def dag_for(topic: TopicConfig, catalog: Catalog, lake: Any) -> DAG:
    interval = topic.run_interval
    dag = DAG(
        dag_id=topic.dag_id,
        description=f"Kafka {topic.kafka_source} → Delta {topic.qualified_table}",
        schedule=schedule_of(topic),
        start_date=START_DATE,
        catchup=False,
        max_active_runs=1,
        # Fires when a run has not finished by SLA - interval after it was queued (schedule.SlaPlan).
        deadline=deadline_alert(topic, os.environ),
        params=reingest_params(),
        doc_md=DOC.format(
            source=_doc_source(topic),
            table=topic.qualified_table,
            path=topic.path,
            checkpoint=topic.checkpoint_path,
            when=_doc_when(topic),
            deadline=format_duration(sla_plan(topic.freshness_sla).deadline),
            starting=topic.starting_offsets,
            pool=SPARK_POOL,
            priority=topic.priority,
            runbook=runbook.doc_md(),
            freshness=freshness_figures.topic_href(topic.dag_id),
        ),
        tags=sorted({"kafkalake", "kafka", "delta", *topic.tags}),
        default_args={
            "owner": topic.owner,
            "retries": RETRIES,
            "retry_delay": RETRY_DELAY,
            "retry_exponential_backoff": 2.0,
            # Backoff never pushes a retry past the next scheduled run.
            "max_retry_delay": min(interval, timedelta(minutes=30)),
            "retry_policy": retry_policy(),
            # Absolute: a topic's priority decides alone, whatever the task's place in its DAG.
            "priority_weight": topic.priority,
            "weight_rule": "absolute",
        },
    )
    # A data-age SLA miss as an ingest or an idle pre-flight ends (data_age_alert); a freshness
    # topic's watcher raises its own.
    alert_data_age = topic.schedule == "interval"
    webhook = webhook_conn_id(topic, os.environ)
    with dag:
        preflight = ShortCircuitOperator(
            task_id=PREFLIGHT_TASK_ID,
            python_callable=check_new_offsets,
            op_kwargs={
                "topic_name": topic.name,
                "checkpoint": topic.checkpoint_path,
                "kafka_conn_id": topic.kafka_conn_id,
                "fail_on_data_loss": topic.fail_on_data_loss,
                "table_path": topic.path,
                "storage_conn_id": topic.storage_conn_id,
                "family": family_kwargs(topic),
                "sla_seconds": topic.freshness_sla.total_seconds(),
                "alert_data_age": alert_data_age,
                "sla_webhook_conn_id": webhook,
            },
            execution_timeout=timedelta(minutes=5),
            # Skip only `ingest` (and what needs it): table maintenance still gets its due check.
            ignore_downstream_trigger_rules=False,
        )
        spark_args = {
            "topic": topic,
            "catalog_file": catalog.file,
            "lake_root": lake,
            # Made once for the DAG's Spark tasks: each reads the class archive's stamp and jars.
            "conf": topic_conf(topic, lake),
            # A hung Spark job is killed (spark-submit and its driver) and retried.
            "execution_timeout": topic.spark_task_timeout,
        }
        ingest = IngestOperator(
            task_id=INGEST_TASK_ID,
            kafka_conn_id=topic.kafka_conn_id,
            outlets=topic_assets(topic),
            alert_data_age=alert_data_age,
            sla_webhook_conn_id=webhook,
            **spark_args,
        )
        register = RegisterOperator(task_id="register_table", **spark_args)
        maintain = MaintenanceOperator(task_id="maintain_table", trigger_rule="none_failed", **spark_args)
        if topic.parsed.enabled:
            refresh = FollowUpOperator(task_id="refresh_schema", job="refresh_schema.py", **spark_args)
            preflight >> ingest >> refresh >> register >> maintain
        else:
            preflight >> ingest >> register >> maintain
    return dag


REPLAY_DOC = """\
### Replay a topic's parsed tables from bronze

Re-parses, with today's code, schema history and catalog settings, every record of the topic's
bronze table **as of** a version or a time (Delta time travel), and puts the result in place of
those records' rows in the parsed and dead-letter tables. Use it after fixing a parsing bug (a
catalog change, a new release): Kafka may no longer hold the records; bronze does.

Params: `topic`; `as_of_version` (a bronze version) **or** `as_of_timestamp` (ISO 8601, e.g.
`2026-11-22T10:00:00Z`: the last bronze version committed at or before it); neither = bronze's
latest version, a full rebuild.

- Records bronze received **after** that snapshot were parsed by the fixed code already: their rows
  are kept as they are.
- **Atomic per table**: the parsed and the dead-letter table each change in one Delta commit
  (readers see the old rows or the new ones, never a mix); the parsed table may gain columns. With
  `latest_by_key`, the latest-row table is rebuilt whole and overwritten in one commit.
- **Bronze and the checkpoint are never written.** The job holds the topic's checkpoint lock, so
  the topic's ingest cannot run meanwhile (it fails with `checkpoint_locked` and retries).
- A version beyond the table, a timestamp before it or a bronze-only topic fail at once
  (`bad_config`); so does a topic whose last ingest stopped mid-batch (`ingest_unfinished`: run
  the ingest first).

Topics: {topics}. Runs `jobs/replay_topic.py` in the pool `{pool}`.

{runbook}
"""


def replay_dag(catalog: Catalog, lake: Any) -> DAG | None:
    """The maintenance DAG that replays one parsed topic, chosen when triggered; None if none is parsed."""
    topics = sorted(t.name for t in catalog.topics if t.parsed.enabled)
    if not topics:
        return None
    with DAG(
        dag_id=REPLAY_DAG_ID,
        description="Rebuild a topic's parsed tables from bronze as of a version or a time",
        schedule=None,
        start_date=START_DATE,
        catchup=False,
        max_active_runs=1,
        doc_md=REPLAY_DOC.format(
            topics=", ".join(f"`{t}`" for t in topics), pool=SPARK_POOL, runbook=runbook.doc_md()
        ),
        tags=["kafkalake", "maintenance", "delta"],
        params={
            "topic": Param(topics[0], type="string", enum=topics, description="the topic to replay"),
            "as_of_version": Param(
                None,
                type=["null", "integer"],
                minimum=0,
                description="bronze version to replay as of; empty: latest (or as_of_timestamp)",
            ),
            "as_of_timestamp": Param(
                None,
                type=["null", "string"],
                description="or: ISO 8601 time, e.g. 2026-11-22T10:00:00Z (UTC when no zone is given)",
            ),
        },
        default_args={
            "owner": "data-platform",
            "retries": RETRIES,
            "retry_delay": RETRY_DELAY,
            "retry_exponential_backoff": 2.0,
            "max_retry_delay": timedelta(minutes=30),
            # A bad param fails at once; a running ingest (checkpoint_locked) is waited out.
            "retry_policy": retry_policy(),
        },
    ) as dag:
        ReplayOperator(
            task_id="replay", catalog_file=catalog.file, lake_root=lake, execution_timeout=REPLAY_TIMEOUT
        )
    return dag


def _errors_dag(errors: list[CatalogError]) -> DAG:
    """A DAG that makes broken catalog entries visible in the UI while the others keep running."""

    def fail() -> None:
        raise CatalogError(errors[0].file, "broken topics:\n" + "\n".join(str(e) for e in errors))

    text = "\n".join(f"- {e}" for e in errors)
    with DAG(
        dag_id=ERRORS_DAG_ID,
        schedule=None,
        start_date=START_DATE,
        tags=["kafkalake", "error"],
        doc_md=f"### These catalog entries have no DAG until fixed\n\n{text}",
    ) as dag:
        PythonOperator(task_id="report_catalog_errors", python_callable=fail)
    return dag


def build_dags(strict: bool | None = None, only: str | None = None) -> dict[str, DAG]:
    """The DAGs of the catalog named by the environment, keyed by dag_id, in a stable order.

    ``only``: the one DAG a process needs (Airflow's parsing context: a task's process, ``airflow
    dags test``), built alone when the catalog has it; any other id builds every DAG. Each DAG costs
    ~4 ms to build (24 DAGs: 0.10 CPU-s, the catalog's reading 0.014), and every task's process
    parses the DAG file again: with hundreds of topics, seconds per task for DAGs it never runs.
    """
    strict = os.environ.get(ENV_STRICT, "0") == "1" if strict is None else strict
    lake = lake_root()
    catalog = load_catalog(catalog_path(), lake, strict=strict)
    builders = dag_builders(catalog, lake)
    errors = list(catalog.errors)
    if only in builders:
        builders, errors = {only: builders[only]}, []
    topics = {topic.dag_id: topic for topic in catalog.topics}
    dags = {}
    for dag_id, build in builders.items():
        try:
            dag = build()
        except ValueError as err:
            if dag_id not in topics:
                raise
            # Airflow refused what the catalog let through: still one topic's problem, not all.
            error = CatalogError(catalog.file, f"Airflow cannot build its DAG: {err}", topics[dag_id].name)
            if strict:
                raise error from err
            errors.append(error)
            continue
        if dag is not None:
            dags[dag_id] = dag
    if errors:
        for error in errors:
            log.error("no DAG for this catalog entry: %s", error)
        dags[ERRORS_DAG_ID] = _errors_dag(errors)
    return dags


def dag_builders(catalog: Catalog, lake: Any) -> dict[str, Callable[[], DAG | None]]:
    """Each DAG the catalog makes, by dag_id, built when called: the topics', the routes' discovery
    DAGs, the replay DAG (None without a topic to replay)."""
    builders: dict[str, Callable[[], DAG | None]] = {
        topic.dag_id: functools.partial(dag_for, topic, catalog, lake) for topic in catalog.topics
    }
    for route in catalog.routes:
        builders[route.dag_id] = functools.partial(
            discovery_dag, route, catalog, lake, START_DATE, retry_policy()
        )
    builders[REPLAY_DAG_ID] = functools.partial(replay_dag, catalog, lake)
    return builders


def register_dags(namespace: MutableMapping[str, Any]) -> None:
    namespace.update(build_dags(only=get_parsing_context().dag_id))
