"""The tasks of a topic's DAG: pre-flight offsets check, Spark ingest, table registration.

Connections are looked up when a task runs, never at parse time.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowException, AirflowNotFoundException, AirflowSkipException

from kafkalake.airflow import run_history_emit, run_metrics_emit, sla_alerts
from kafkalake.airflow.connections import (
    kafka_config_for,
    mask_secrets,
    registry_settings_file,
    storage_settings_file,
    use_storage,
    use_topic_storage,
)
from kafkalake.airflow.pools import SPARK_POOL
from kafkalake.config.catalog import load_topic
from kafkalake.config.family import resolve_members
from kafkalake.config.tables import topic_tables
from kafkalake.config.topic import TopicConfig, parsed_backlog_file
from kafkalake.core import errors as failures
from kafkalake.core import job_failures, run_metrics
from kafkalake.core.run_mode import Mode, RunMode, run_mode
from kafkalake.kafka import client_config as kafka_client
from kafkalake.kafka import offsets, redaction, windows
from kafkalake.lake import care_due, parsed_backlog, registry, store_refusal_kinds, table_position
from kafkalake.lake.checkpoint import read_checkpoint, read_family_checkpoint
from kafkalake.launch import handover, job_host, submit
from kafkalake.launch.spark_conf import is_short_run, topic_conf

log = logging.getLogger(__name__)

#: The embedded default: every core of the Airflow worker's machine.
LOCAL_SPARK_MASTER = "local[*]"


def current_mode(dag_run: Any, params: Mapping[str, Any] | None) -> RunMode:
    """What this run does (ingest, backfill: table care only, or re-ingest), from its context."""
    return run_mode(getattr(dag_run, "run_type", None), params, datetime.now(UTC))


def check_new_offsets(
    topic_name: str,
    checkpoint: str,
    kafka_conn_id: str,
    fail_on_data_loss: bool = True,
    dag_run: Any = None,
    params: Mapping[str, Any] | None = None,
    table_path: str | None = None,
    ti: Any = None,
    storage_conn_id: str | None = None,
    family: Mapping[str, Any] | None = None,
    sla_seconds: float | None = None,
    alert_data_age: bool = False,
    sla_webhook_conn_id: str | None = None,
) -> bool:
    """ShortCircuit callable: true when the ingest job has work to do.

    ``family``: for a family entry (``topic_name`` is then its table's name), its ``topics``,
    ``topic_pattern`` and ``starting_offsets``; every member Kafka has is checked
    (:func:`_family_has_new_offsets`).

    Fails at once (:class:`~kafkalake.core.errors.OffsetsExpiredError`, not retried) when Kafka has
    already deleted records the table never read, unless the topic accepts that loss. A backfill
    run never ingests; a confirmed re-ingest checks its window here, without a JVM
    (:mod:`kafkalake.core.run_mode`). ``dag_run``, ``params`` and ``ti`` come from the task's context.
    An idle run publishes its run metrics here (lag 0, the age of the table's newest record), since
    no ingest task will: a topic whose producers stopped shows a growing age, not a gap. It also
    writes the run's row in the run history when the run ends here (idle, or failed: with
    ``table_path`` and ``sla_seconds``); when the ingest runs, that task writes it. With
    ``alert_data_age``, that row's data age over the SLA is a data-age SLA miss
    (:mod:`kafkalake.airflow.data_age_alert`), posted to ``sla_webhook_conn_id`` too.
    """
    if ti is not None:
        # First, before anything can fail: a run that fails fast is the one it is for.
        sla_alerts.record_landed_count(ti)
    mode = current_mode(dag_run, params)
    if mode.note:
        log.info("%s", mode.note)
    if mode.mode is Mode.BACKFILL:
        return False
    use_storage(topic_name, table_path or checkpoint, storage_conn_id)
    with (
        run_history_emit.recorded(
            None,
            "reingest" if mode.mode is Mode.REINGEST else "ingest",
            ti,
            name=topic_name,
            table_path=table_path,
            sla_seconds=sla_seconds,
            alert_data_age=alert_data_age,
            webhook_conn_id=sla_webhook_conn_id,
        ) as history,
        store_refusal_kinds.named(topic_name, storage_conn_id),
    ):
        if family is not None and mode.mode is Mode.REINGEST:
            assert mode.reingest_from is not None
            run = _family_reingest_windows(
                topic_name, checkpoint, kafka_config_for(kafka_conn_id), mode.reingest_from
            )
        elif family is not None:
            run = _family_has_new_offsets(
                topic_name, checkpoint, kafka_conn_id, family, table_path, ti, history, fail_on_data_loss
            )
        else:
            run = _has_new_offsets(
                topic_name, checkpoint, kafka_conn_id, fail_on_data_loss, mode, table_path, ti, history
            )
        # The ingest task writes the row of a run that goes on.
        history.skip = run
        if not run:
            history.outcome = "idle"
            if mode.mode is not Mode.REINGEST:
                history.kind = "idle"
        return run


def _has_new_offsets(
    topic_name: str,
    checkpoint: str,
    kafka_conn_id: str,
    fail_on_data_loss: bool,
    mode: RunMode,
    table_path: str | None,
    ti: Any,
    history: run_history_emit.Recorder,
) -> bool:
    config = kafka_config_for(kafka_conn_id)
    if mode.mode is Mode.REINGEST:
        assert mode.reingest_from is not None
        window = windows.resolve_window(topic_name, checkpoint, config, mode.reingest_from)
        log.log(
            logging.WARNING if window.emptied else logging.INFO, "re-ingest window: %s", window.describe()
        )
        if not window.records:
            log.info("skipping the Spark job: Kafka has nothing in the window the stream has passed")
        return window.records > 0
    marks = offsets.watermarks(config, topic_name)
    if table_path:
        check_topic_identity(config, topic_name, table_path)
    try:
        state = read_checkpoint(checkpoint, topic_name)
    except ValueError as err:
        # The job sets such a checkpoint aside and rebuilds its position from the table.
        log.warning(
            "topic %s: the checkpoint cannot be read (%s); the ingest job rebuilds its position "
            "from the table",
            topic_name,
            err,
        )
        return True
    decision = offsets.decide(
        state,
        {p: high for p, (_low, high) in marks.items()},
        {p: low for p, (low, _high) in marks.items()},
    )
    backlog = parsed_backlog.read_file(parsed_backlog_file(table_path)) if table_path else None
    if backlog is not None and not decision.run:
        decision = replace(
            decision, run=True, reason=f"the parsed tables are behind bronze {backlog.describe()}"
        )
    log.info("topic %s: %s; lag per partition %s", topic_name, decision.reason, decision.lag or "unknown")
    if decision.expired and fail_on_data_loss:
        message = job_failures.offsets_expired_message(topic_name, decision.expired)
        log.error("%s", message)
        raise failures.OffsetsExpiredError(message)
    if decision.expired:
        log.warning(
            "fail_on_data_loss is false for topic %s: the ingest skips what expired and records each "
            "lost range in %s/_kafkalake/gaps; "
            "{partition: (committed offset, earliest offset in Kafka)} = %s",
            topic_name,
            table_path,
            decision.expired,
        )
    if not decision.run:
        log.info("skipping the Spark job: the table already holds every offset Kafka has")
        newest = run_metrics_emit.table_newest_timestamp_ms(table_path) if table_path else None
        idle = run_metrics.idle_metrics(topic_name, dict(decision.lag), newest, datetime.now(UTC))
        run_metrics_emit.publish(idle, ti)
        history.metrics(idle)
    return decision.run


def _family_reingest_windows(name: str, checkpoint: str, config: Mapping[str, str], since: datetime) -> bool:
    """A family's re-ingest: each member's window, checked without a JVM; true when any has records."""
    found = windows.resolve_family_windows(name, checkpoint, config, since)
    for member, window in found.items():
        log.info("re-ingest window of %s: %s", member, window.describe())
    if not any(w.records for w in found.values()):
        log.info("skipping the Spark job: Kafka has nothing in the windows the stream has passed")
    return any(w.records for w in found.values())


def _family_has_new_offsets(
    name: str,
    checkpoint: str,
    kafka_conn_id: str,
    family: Mapping[str, Any],
    table_path: str | None,
    ti: Any,
    history: run_history_emit.Recorder,
    fail_on_data_loss: bool = True,
) -> bool:
    """The pre-flight of a family: its members as Kafka has them now, each checked as a single
    topic is (identity, expired offsets, anything new), no JVM."""
    config = kafka_config_for(kafka_conn_id)
    position = table_position.read_position(table_path) if table_path else None
    try:
        state = read_family_checkpoint(checkpoint)
    except ValueError as err:
        log.warning(
            "%s: the checkpoint cannot be read (%s); the ingest job rebuilds it from the table", name, err
        )
        return True
    known = set(position.members or {}) if position else set()
    known |= set(state.committed) if state else set()
    members = resolve_members(
        family.get("topics") or (), family.get("topic_pattern"), offsets.topic_names(config), known
    )
    if members.missing:
        log.warning(
            "%s: members %s are not in Kafka (deleted, or not created yet): their rows stay in the "
            "table; the others are read",
            name,
            ", ".join(members.missing),
        )
    if not members.present:
        detail = f"no member of family {name!r} exists on the cluster at {config.get('bootstrap.servers')}"
        raise failures.TopicMissingError(failures.failure(failures.Kind.TOPIC_MISSING, detail).message)
    # One client for all members: a pattern may match hundreds of topics.
    marks = offsets.family_watermarks(config, members.present)
    ids = offsets.topic_ids(config, marks)
    failed = table_position.family_identity_failure(ids, position)
    if failed is not None:
        log.error("%s", failed.message)
        raise failed.error()
    decision = offsets.decide_family(state, marks, str(family.get("starting_offsets", "earliest")))
    lag = run_metrics.family_lag(decision.lag)
    log.info(
        "%s: %s; lag per member %s",
        name,
        decision.reason,
        {t: sum(p.values()) for t, p in decision.lag.items()},
    )
    if decision.expired and fail_on_data_loss:
        member, expired = sorted(decision.expired.items())[0]
        message = job_failures.offsets_expired_message(member, expired)
        log.error("%s", message)
        raise failures.OffsetsExpiredError(message)
    if decision.expired:
        log.warning(
            "fail_on_data_loss is false for %s: the ingest skips what expired and records each lost "
            "range in %s/_kafkalake/gaps; per member {partition: (committed offset, earliest offset in "
            "Kafka)} = %s",
            name,
            table_path,
            decision.expired,
        )
    if not decision.run:
        log.info("skipping the Spark job: the table already holds every offset Kafka has of every member")
        newest = run_metrics_emit.table_newest_timestamp_ms(table_path) if table_path else None
        idle = run_metrics.idle_metrics(name, lag, newest, datetime.now(UTC))
        run_metrics_emit.publish(replace(idle, new_members=[], missing_members=list(members.missing)), ti)
        history.metrics(idle)
    return decision.run


def check_topic_identity(config: Mapping[str, str], topic_name: str, table_path: str) -> None:
    """Fail at once (no JVM) when Kafka's topic is not the one the table's offsets came from, and
    (retried) when Kafka does not say its ID while the table's offsets carry one: never skipped."""
    current = offsets.topic_id(config, topic_name)
    failed = table_position.identity_failure(topic_name, current, table_position.read_position(table_path))
    if failed is not None:
        log.error("%s", failed.message)
        raise failed.error()


class KafkalakeSparkSubmitOperator(SparkSubmitOperator):  # type: ignore[misc]  # provider is untyped
    """spark-submit of one of the project's jobs.

    Three guarantees on top of the provider's operator: when the Spark connection is missing it runs
    on ``local[*]`` (the provider would silently submit to YARN), jars are local files resolved at
    set-up (no ``--packages``, no network at run time), and every Spark task takes a slot of the
    pool :data:`~kafkalake.airflow.pools.SPARK_POOL`, which caps the Spark jobs running at once.
    What it submits (application, arguments, settings, jars, environment) is built by
    :func:`~kafkalake.launch.submit.submission`; the operators look up connections and hand it over.
    """

    # Nothing is rendered as Jinja: the settings come from the catalog, where a value such as
    # `{{ conn.kafka_default.password }}` would otherwise be rendered onto spark-submit's command
    # line and into the task's rendered fields. The jobs need no templating: they read the run's
    # context in execute().
    template_fields: Sequence[str] = ()

    def __init__(self, *, job: str, catalog_file: Path, lake_root: Path, **kwargs: Any) -> None:
        kwargs.setdefault("pool", SPARK_POOL)
        super().__init__(application=str(submit.application(job)), **kwargs)
        self.application: str
        self.env_vars: dict[str, str] | None
        self.application_args: list[str]
        self.conf: dict[str, Any] | None
        #: The topic the job serves, for its failure messages.
        self.topic_name = ""
        self.catalog_file = str(catalog_file)
        self.lake_root = str(lake_root)
        #: The topic whose tables the job works on, when known (for its object-store settings).
        self.topic: TopicConfig | None = None

    def _use_local_spark_if_undefined(self) -> None:
        try:
            BaseHook.get_connection(self._conn_id)
        except AirflowNotFoundException:
            # Defining it through the environment-variable secrets backend, in this task's process
            # only, is the provider's own lookup path: it then never reaches its YARN default.
            os.environ[f"AIRFLOW_CONN_{self._conn_id.upper()}"] = json.dumps(
                {"conn_type": "spark", "host": LOCAL_SPARK_MASTER}
            )
            self.log.warning(
                "connection %r is not defined: running Spark on %s. Define it to use a cluster, "
                'e.g. AIRFLOW_CONN_%s=\'{"conn_type": "spark", "host": "spark://host:7077"}\'',
                self._conn_id,
                LOCAL_SPARK_MASTER,
                self._conn_id.upper(),
            )

    def execute(self, context: Any) -> None:
        if self.topic is None:
            raise ValueError(f"task {self.task_id}: no topic to run {Path(self.application).name} for")
        self._submit(context, self.topic, conf=self.conf)

    def _submit(
        self,
        context: Any,
        topic: TopicConfig,
        *,
        conf: Mapping[str, str] | None,
        args: Sequence[str] = (),
        short_run: bool | None = None,
        kafka_settings: Path | None = None,
        metrics_file: Path | None = None,
        topic_id: str | None = None,
    ) -> None:
        """Submit the job as :func:`~kafkalake.launch.submit.submission` builds it (its arguments
        are that function's), with the topic's object-store settings file."""
        self._use_local_spark_if_undefined()
        built = submit.submission(
            Path(self.application).name,
            topic,
            catalog=Path(self.catalog_file),
            lake=Path(self.lake_root),
            args=args,
            conf=conf,
            short_run=short_run,
            kafka_settings=kafka_settings,
            metrics_file=metrics_file,
            topic_id=topic_id,
            env=self.env_vars,
        )
        self.application = str(built.application)
        self.application_args = list(built.application_args)
        self.conf = dict(built.conf)
        self.jars = built.jars_arg()
        self.name = built.name
        self.env_vars = dict(built.env)
        # The path only: the secret stays in the file (a --conf would show it in ps).
        self.properties_file = None if built.properties_file is None else str(built.properties_file)
        try:
            with storage_settings_file(topic) as storage_env, registry_settings_file(topic) as registry_env:
                self.env_vars = {**self.env_vars, **storage_env, **registry_env}
                if not self._ran_on_job_host(built, topic):
                    super().execute(context)
        except AirflowException as err:
            # The provider's error holds the exit code and the job's last lines: turn it into a
            # typed error the DAG's retry policy acts on, with the on-call message first.
            failed = job_failures.classify_job_failure(Path(self.application).name, self.topic_name, str(err))
            self.log.error("%s", failed.message)
            raise failed.error() from err

    def _ran_on_job_host(self, built: submit.Submission, topic: TopicConfig) -> bool:
        """Whether a job host ran the job (:mod:`kafkalake.launch.job_host`: the test suite's, when
        its environment names one; never in production). The host's output and failure go through
        the provider's own line handling, so a failed job raises the text spark-submit's would."""
        address = job_host.host_address()
        if address is None:
            return False
        self._hook = hook = self._get_hook()
        # The job's environment under spark-submit is this process's and env_vars: the host's child
        # takes kafkalake's variables from both (the rest is Airflow's, which no job reads).
        env = {**job_host.project_variables(os.environ), **(self.env_vars or {})}
        why_not = job_host.why_not_hosted(built, hook._connection["master"], env=env)
        if why_not is not None:
            self.log.info("spark-submit, not the job host: %s", why_not)
            return False
        # Beside the provider's "Spark-Submit cmd": the job and its arguments (never a secret).
        self.log.info(
            "%s %s (at %s)",
            job_host.JOB_HOST_CMD,
            shlex.join([str(built.application), *built.application_args]),
            address,
        )
        outcome = job_host.run_hosted(address, built, env, lambda out: hook._process_spark_submit_log([out]))
        if isinstance(outcome, str):
            self.log.info("spark-submit, not the job host: %s", outcome)
            return False
        self.log.info("%s ran on the job host at %s: exit %d", built.application.name, address, outcome)
        if outcome != 0:
            raise AirflowException(
                f"Cannot execute: {built.application.name} on the job host {address}. "
                f"Error code is: {outcome}.{hook._submit_log_tail}"
            )
        return True


class TopicSparkSubmitOperator(KafkalakeSparkSubmitOperator):
    """spark-submit of one of the project's jobs for the topic of its DAG."""

    def __init__(
        self,
        *,
        topic: TopicConfig,
        job: str,
        lake_root: Path,
        conf: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        """``conf``: the topic's settings (:func:`topic_conf`), when the caller made them already (a
        DAG's Spark tasks share them); made here otherwise."""
        super().__init__(
            job=job,
            lake_root=lake_root,
            application_args=submit.topic_args(topic.name),
            conf=dict(conf) if conf is not None else topic_conf(topic, lake_root),
            name=submit.app_name(job, topic.name),
            **kwargs,
        )
        self.topic_name = topic.name
        self.topic = topic


class IngestOperator(TopicSparkSubmitOperator):
    """The ingest job, handed its Kafka settings in a private file (secrets never on a command line).

    ``alert_data_age``: the run's data age over the SLA raises a data-age SLA miss as it ends
    (:mod:`kafkalake.airflow.data_age_alert`), posted to ``sla_webhook_conn_id`` too.
    """

    def __init__(
        self,
        *,
        kafka_conn_id: str,
        topic: TopicConfig,
        alert_data_age: bool = False,
        sla_webhook_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(job="ingest_topic.py", topic=topic, **kwargs)
        self.kafka_conn_id = kafka_conn_id
        self.alert_data_age = alert_data_age
        self.sla_webhook_conn_id = sla_webhook_conn_id
        self.topic: TopicConfig = topic
        #: The parsed tables were behind bronze as the run started: it catches them up.
        self._catching_up = False

    def execute(self, context: Any) -> None:
        mode = current_mode(context.get("dag_run"), context.get("params"))
        if mode.mode is Mode.BACKFILL:
            # Also when someone clears this task of a backfill run by hand.
            raise AirflowSkipException(mode.note)
        kind = "reingest" if mode.mode is Mode.REINGEST else "ingest"
        self._catching_up = False
        with run_history_emit.recorded(
            self.topic,
            kind,
            context.get("ti"),
            alert_data_age=self.alert_data_age,
            webhook_conn_id=self.sla_webhook_conn_id,
        ) as history:
            self._ingest(context, mode, history)

    def _ingest(self, context: Any, mode: RunMode, history: run_history_emit.Recorder) -> None:
        args: list[str] = []
        if mode.mode is Mode.REINGEST:
            assert mode.reingest_from is not None
            self.log.info("%s", mode.note)
            args = ["--reingest-from", mode.reingest_from.isoformat()]
        use_topic_storage(self.topic)
        client_config = kafka_config_for(self.kafka_conn_id)
        java_config = kafka_client.java_client_config(client_config)
        mask_secrets(java_config)
        self.log.info("Kafka client settings: %s", redaction.redacted(java_config))
        # Measured just before the job: its availableNow run reads up to the end offsets it sees at start.
        lag_before, marks = run_metrics_emit.lag_and_marks(client_config, self.topic)
        short = self._is_short(mode, lag_before)
        if self._catching_up and mode.mode is not Mode.REINGEST:
            history.kind = "catch_up"
        # A family's job asks for its members' IDs itself, once it knows its members.
        topic_id = None if self.topic.is_family else offsets.topic_id(client_config, self.topic.name)
        history.track_offsets(self.topic, marks)
        history.set(schema_version=run_history_emit.schema_version(self.topic), jvm_count=1)
        with handover.config_file(java_config) as path, job_metrics_file() as metrics_path:
            started = time.monotonic()
            try:
                self._submit(
                    context,
                    self.topic,
                    conf=self.conf or {},
                    args=args,
                    short_run=short,
                    kafka_settings=path,
                    metrics_file=metrics_path,
                    topic_id=topic_id,
                )
            except BaseException:
                # What a failed job landed before it stopped (a killed one wrote nothing).
                if metrics_path.exists():
                    history.job(read_job_metrics(metrics_path), time.monotonic() - started)
                raise
            duration = time.monotonic() - started
            job = read_job_metrics(metrics_path)
        history.job(job, duration)
        history.set(schema_version=run_history_emit.schema_version(self.topic))
        if job is None:
            return
        ti = context.get("ti")
        if ti is not None:
            # What the job did after its stream, for the follow-up tasks to report (one JVM per run).
            ti.xcom_push(key=FOLLOW_UPS_XCOM_KEY, value=job.follow_ups)
        metrics = run_metrics.ingest_metrics(
            self.topic.name,
            job,
            lag_before=lag_before,
            lag_after=run_metrics_emit.lag_now(client_config, self.topic),
            # Only read when the job landed nothing: the Delta log then says how old the table is.
            table_newest_ms=(
                None
                if job.newest_timestamp_ms is not None
                else run_metrics_emit.table_newest_timestamp_ms(self.topic.path)
            ),
            duration_seconds=duration,
            now=datetime.now(UTC),
        )
        run_metrics_emit.publish(metrics, context.get("ti"))
        history.metrics(metrics)

    def _is_short(self, mode: RunMode, lag: run_metrics.PartitionLag | None) -> bool:
        """Whether this run reads few records (the stream's backlog, nothing for the parsed side to
        catch up from bronze, no re-ingest) and has no table care due: its driver then starts with
        the quick compiler (:func:`~kafkalake.launch.spark_conf.for_run`)."""
        if mode.mode is Mode.REINGEST or lag is None:
            return False
        records = sum(lag.values())
        try:
            if parsed_backlog.read(self.topic) is not None:
                self._catching_up = True
                return False
            due = care_due.due_now(self.topic)[0]
        except Exception as err:  # only a choice of compiler: the job itself meets any real fault
            self.log.warning("a long run assumed: the tables' state could not be read (%s)", err)
            return False
        short = is_short_run(records, due)
        self.log.info(
            "%s run: %d records to read%s",
            "a short" if short else "a long",
            records,
            ": the driver starts with Java's quick compiler only" if short else "",
        )
        return short


@contextmanager
def job_metrics_file() -> Iterator[Path]:
    """A fresh path for the job to write its metrics to, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="kafkalake-metrics-") as folder:
        yield Path(folder) / "metrics.json"


def read_job_metrics(path: Path) -> run_metrics.JobMetrics | None:
    """What the job wrote; None (with a warning) when it wrote nothing usable: metrics never fail a run."""
    try:
        return run_metrics.JobMetrics.from_json(path.read_text(), source=str(path))
    except (OSError, ValueError) as err:
        log.warning("no run metrics from the ingest job: %s", err)
        return None


#: XCom key under which the ingest task hands over what its job did after the stream.
FOLLOW_UPS_XCOM_KEY = "follow_ups"


def first_try(context: Any) -> bool:
    """False for a retry or a task cleared by hand: then a follow-up task does its work itself."""
    ti = context.get("ti")
    return ti is None or int(getattr(ti, "try_number", 1) or 1) <= 1


class FollowUpOperator(TopicSparkSubmitOperator):
    """A task whose work the ingest job normally does in its own Spark application.

    It reports what the ingest did (from the ingest's XCom) and starts no JVM. It runs its own job
    when the ingest did not do the work (a re-ingest run, a follow-up that failed there, an older
    ingest), and always on a retry or when cleared by hand, so on-call can force it.
    """

    def execute(self, context: Any) -> None:
        if not self.done_by_ingest(context):
            with run_history_emit.recorded(self.topic, self.task_id, context.get("ti")) as history:
                history.set(jvm_count=1)
                super().execute(context)
                if self.topic is not None:
                    history.set(schema_version=run_history_emit.schema_version(self.topic))

    def done_by_ingest(self, context: Any) -> bool:
        """Whether the ingest job did this task's work (then logged here); never on a retry."""
        ti = context.get("ti")
        done = (
            ti.xcom_pull(task_ids=sla_alerts.INGEST_TASK_ID, key=FOLLOW_UPS_XCOM_KEY)
            if ti is not None
            else None
        )
        if first_try(context) and isinstance(done, dict) and self.task_id in done:
            self.log.info(
                "done in the ingest job's Spark application (no JVM started): %s", done[self.task_id]
            )
            return True
        return False


class RegisterOperator(TopicSparkSubmitOperator):
    """Registration in the metastore, skipped without a JVM when every table is already registered."""

    def __init__(self, *, topic: TopicConfig, **kwargs: Any) -> None:
        super().__init__(topic=topic, job="register_table.py", **kwargs)
        self.topic: TopicConfig = topic

    def execute(self, context: Any) -> None:
        if first_try(context):
            use_topic_storage(self.topic)
            with store_refusal_kinds.named(self.topic.name, self.topic.storage_conn_id):
                missing = registry.unregistered(
                    registry.registry_dir(Path(self.lake_root)), list(topic_tables(self.topic))
                )
            if missing == []:
                self.log.info(
                    "every table of topic %s is registered already (no JVM started)", self.topic.name
                )
                return
            self.log.info("to register: %s", missing)
        with run_history_emit.recorded(self.topic, "register", context.get("ti")) as history:
            history.set(jvm_count=1)
            super().execute(context)


class MaintenanceOperator(FollowUpOperator):
    """OPTIMIZE / VACUUM / table properties, run only when something is due.

    When the run's ingest found it due, the ingest job did it in its own Spark application and
    this task reports it. Otherwise (an idle run, a backfill, a retry) the due check reads the
    Delta log with delta-rs in the task's own process: when nothing is due the task is skipped
    without starting a JVM.
    """

    def __init__(self, *, topic: TopicConfig, **kwargs: Any) -> None:
        super().__init__(topic=topic, job="maintain_table.py", **kwargs)
        self.topic: TopicConfig = topic

    def execute(self, context: Any) -> None:
        use_topic_storage(self.topic)
        run_history_emit.care_for_history(self.topic)
        if self.done_by_ingest(context):
            return
        with store_refusal_kinds.named(self.topic.name, self.topic.storage_conn_id):
            run, lines = care_due.due_now(self.topic)
        for line in lines:
            self.log.info("%s", line)
        if not run:
            raise AirflowSkipException("no table maintenance due (no Spark job started)")
        with run_history_emit.recorded(self.topic, "care", context.get("ti")) as history:
            history.care_before(self.topic)
            history.set(jvm_count=1)
            TopicSparkSubmitOperator.execute(self, context)


class ReplayOperator(KafkalakeSparkSubmitOperator):
    """The replay job for the topic and snapshot the DAG run's params name.

    The topic is known only when the run starts: its Spark settings are looked up in the catalog
    then, as the topic DAGs' tasks get theirs at parse time.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(job="replay_topic.py", **kwargs)

    def execute(self, context: Any) -> None:
        params = context["params"]
        topic = load_topic(Path(self.catalog_file), Path(self.lake_root), str(params["topic"]))
        self.topic_name = topic.name
        self.topic = topic
        options = replay_options(params)
        self.log.info("replay of topic %s: %s", topic.name, " ".join(submit.topic_args(topic.name, options)))
        use_topic_storage(topic)
        with run_history_emit.recorded(topic, "replay", context.get("ti")) as history:
            history.set(jvm_count=1)
            # The topic's settings as they are now (conf=None), not another topic's from an earlier run.
            self._submit(context, topic, conf=None, args=options)
            history.set(schema_version=run_history_emit.schema_version(topic))


#: The replay DAG's params, as the job's options.
REPLAY_PARAMS = ("as_of_version", "as_of_timestamp")


def replay_options(params: Any) -> list[str]:
    """The replay job's options after ``--topic``; a param left empty is not passed."""
    args: list[str] = []
    for name in REPLAY_PARAMS:
        value = params.get(name)
        if value is not None and str(value).strip():
            args += [f"--{name.replace('_', '-')}", str(value).strip()]
    return args
