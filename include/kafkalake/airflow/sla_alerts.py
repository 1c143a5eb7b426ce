"""What happens when a topic's run misses its deadline: its table is out of its freshness SLA.

Every generated DAG carries a Deadline Alert (:func:`deadline_alert`): measured from the run's queued
time, the deadline is ``SLA - run interval`` (see :class:`kafkalake.config.schedule.SlaPlan`). When a run
has not finished by then, Airflow's scheduler queues :func:`on_sla_miss`, which the triggerer runs.
It always logs one ``SLA miss`` line naming the DAG, the run, the SLA and the deadline; when the topic
names an HTTP connection (catalog field ``sla_webhook_conn_id``, or ``KAFKALAKE_SLA_WEBHOOK_CONN_ID``
for every topic), it also POSTs the alert as JSON there. The payload has a ``text`` field, so a
Slack incoming webhook (or any chat tool that takes one) shows the message as it is.

The HTTP connection: ``host`` is the server or a whole URL; ``schema`` the scheme (default http);
``port``; ``login``/``password`` for basic auth; extra ``endpoint`` (a path) and ``headers``. E.g.
``AIRFLOW_CONN_SLA_WEBHOOK='{"conn_type": "http", "host": "https://hooks.slack.com/services/T/B/X"}'``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx
from airflow.sdk.definitions.callback import AsyncCallback
from airflow.sdk.definitions.deadline import DeadlineAlert, DeadlineReference

from kafkalake.config.schedule import sla_plan
from kafkalake.config.topic import TopicConfig
from kafkalake.core.durations import format_duration
from kafkalake.core.errors import WebhookError

# Airflow's run-time machinery (the triggerer's supervisor channel, connections, the secrets masker) is
# imported inside the callbacks that run there: the DAG file imports this module, and parsing must neither
# load it nor look a connection up.

log = logging.getLogger(__name__)

#: Names an HTTP connection to POST every topic's SLA misses to (a topic's catalog entry wins).
ENV_WEBHOOK_CONN_ID = "KAFKALAKE_SLA_WEBHOOK_CONN_ID"
#: Set to 0 to build DAGs without a Deadline Alert (``airflow dags test`` only: see local_airflow).
ENV_DEADLINE_ALERTS = "KAFKALAKE_DEADLINE_ALERTS"
WEBHOOK_TIMEOUT_SECONDS = 10.0
#: The task whose success means a run brought the table up to what Kafka held when it started.
INGEST_TASK_ID = "ingest"
PREFLIGHT_TASK_ID = "check_new_offsets"
#: The pre-flight's XCom: how many ingests of its DAG had succeeded when it began.
LANDED_COUNT_XCOM_KEY = "landed_ingests_before"
MARK_ATTEMPTS, MARK_WAIT_SECONDS = 6, 2.0


def miss_message(
    context: Mapping[str, Any] | None, *, topic: str, table: str, sla: str, deadline: str
) -> str:
    """The alert's one line: which run, which table, which SLA, which deadline."""
    run = (context or {}).get("dag_run") or {}
    due = (context or {}).get("deadline") or {}
    return (
        f"SLA miss: DAG {run.get('dag_id', '?')} run {_run_id(run)} "
        f"(queued at {run.get('queued_at', '?')}) has not finished by its deadline "
        f"{due.get('deadline_time', '?')} (queued + {deadline}): table {table} of Kafka topic "
        f"{topic} is now older than its freshness SLA of {sla}"
    )


def payload(
    context: Mapping[str, Any] | None,
    message: str,
    *,
    topic: str,
    table: str,
    sla: str,
    deadline: str,
    landing_checked: bool = False,
) -> dict[str, Any]:
    run = (context or {}).get("dag_run") or {}
    due = (context or {}).get("deadline") or {}
    return {
        "text": message,
        "event": "kafkalake.sla_miss",
        "dag_id": run.get("dag_id"),
        "run_id": _run_id(run),
        "queued_at": _text(run.get("queued_at")),
        "deadline_time": _text(due.get("deadline_time")),
        "topic": topic,
        "table": table,
        "freshness_sla": sla,
        "deadline_after_queued": deadline,
        # False: Airflow could not be asked whether an ingest landed the topic since (on_sla_miss).
        "landing_checked": landing_checked,
    }


def _run_id(run: Mapping[str, Any]) -> str:
    # The scheduler hands over the REST API's view of the run, where the run id is "dag_run_id".
    return str(run.get("dag_run_id") or run.get("run_id") or "?")


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def webhook_url(host: str | None, schema: str | None, port: int | None, extra: Mapping[str, Any]) -> str:
    """The URL an HTTP connection points at (``host`` may be a whole URL)."""
    if not host:
        raise ValueError("the SLA webhook connection has no host")
    if "://" in host:
        base = host
    else:
        base = f"{schema or 'http'}://{host}" + (f":{port}" if port else "")
    endpoint = str(extra.get("endpoint") or "")
    if not endpoint:
        return base
    return base.rstrip("/") + "/" + endpoint.lstrip("/")


def redacted_url(url: str) -> str:
    """The URL without what may be a secret: a webhook's path and query are often its token
    (Slack's ``/services/T…/B…/<token>``), and user info is a password. Scheme, host and port stay."""
    parts = httpx.URL(url)
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.host}{port}/***"


#: The shortest path or query masked on its own (tokens are longer; see :func:`secret_forms`).
MIN_SECRET_PART = 8


def secret_forms(url: str) -> list[str]:
    """Every form in which a log line may carry the URL's secret parts, for the secrets masker.

    The masker matches exact strings, and httpx logs the URL as it normalised it (host in lower
    case, ``:443`` dropped), so the URL as configured is not enough: its path with the query (a
    webhook's token), the path alone, decoded and not, the query, and the user info are masked on
    their own too.
    """
    parts = httpx.URL(url)
    forms = {url, str(parts)}
    if parts.userinfo:
        forms.add(parts.userinfo.decode())
    target = parts.raw_path.decode("ascii")  # the path and the query, as sent
    for form in (target, target.partition("?")[0], parts.path, parts.query.decode("ascii")):
        # A short path ("/hook") is no token, and masked it would blank that text in every line.
        if len(form.strip("/")) >= MIN_SECRET_PART:
            forms.add(form)
    return sorted(forms)


async def landed_since_preflight(dag_id: str, run_id: str) -> bool:
    """Whether an ``ingest`` of this DAG succeeded after the late run's pre-flight began.

    Airflow keeps a run's deadline when the run fails (apache/airflow#60927), so a run that failed
    fast fires its SLA-miss alert even when the next run, a minute later, landed everything: the
    table is fresh and on-call is paged for nothing. Each pre-flight records how many ingests of
    its DAG had succeeded (:func:`record_landed_count`); more now means one succeeded since: a
    later run's, or the late run's own when only a step after it failed. That ingest read Kafka
    after the late run was queued, so the table holds what Kafka held then, and by the deadline
    (SLA - interval after the queue) it is within its SLA. A count that went down meanwhile (a
    task cleared, ``airflow db clean``) can only hide a landing, never invent one.

    Asked from the triggerer the way Airflow's own SDK asks (its previous-task question cannot be
    used there: Airflow 3.3's trigger runner cannot decode the answer). Raises when Airflow cannot
    be asked or the run's pre-flight recorded nothing.
    """
    from airflow.sdk.execution_time import task_runner
    from airflow.sdk.execution_time.comms import GetTICount, GetXCom, TICount, XComResult
    from airflow.sdk.execution_time.xcom import XCom

    comms = task_runner.SUPERVISOR_COMMS
    ask = GetXCom(key=LANDED_COUNT_XCOM_KEY, dag_id=dag_id, run_id=run_id, task_id=PREFLIGHT_TASK_ID)
    mark = await comms.asend(ask)
    for _ in range(MARK_ATTEMPTS - 1):
        if isinstance(mark, XComResult) and mark.value is not None:
            break
        # A pre-flight try that is starting has had its XComs cleared and not yet recorded again.
        await asyncio.sleep(MARK_WAIT_SECONDS)
        mark = await comms.asend(ask)
    if not isinstance(mark, XComResult) or mark.value is None:
        raise RuntimeError(f"the pre-flight of run {run_id} recorded no count of landed ingests")
    before = int(XCom.deserialize_value(mark))
    now = await comms.asend(GetTICount(dag_id=dag_id, task_ids=[INGEST_TASK_ID], states=["success"]))
    if not isinstance(now, TICount):
        raise RuntimeError(f"Airflow answered {type(now).__name__} to a task count")
    return bool(now.count > before)


def record_landed_count(ti: Any) -> None:
    """In the pre-flight: how many ingests of this DAG have succeeded (see landed_since_preflight).

    Never fails the run: without the mark, an SLA miss of this run is sent as before.
    """
    try:
        count = ti.get_ti_count(dag_id=ti.dag_id, task_ids=[INGEST_TASK_ID], states=["success"])
        ti.xcom_push(key=LANDED_COUNT_XCOM_KEY, value=int(count))
    except Exception as err:
        log.warning("could not record the count of landed ingests for the SLA-miss check: %r", err)


async def post_webhook(conn_id: str, body: Mapping[str, Any]) -> int:
    """POST ``body`` as JSON to the HTTP connection ``conn_id``; raise unless it answers 2xx.

    httpx's own errors (and its INFO log line per request) carry the whole URL: every form of its
    secret parts is registered with Airflow's secrets masker (:func:`secret_forms`), and a failure
    is raised again with the URL redacted.
    """
    from airflow.sdk import BaseHook  # the triggerer's connection lookup, at run time only

    request = _Request.of(conn_id, await BaseHook.aget_connection(conn_id))
    try:
        async with httpx.AsyncClient(timeout=WEBHOOK_TIMEOUT_SECONDS, auth=request.auth) as client:
            response = await client.post(request.url, json=dict(body), headers=request.headers)
    except httpx.HTTPError as err:
        raise request.unanswered(err) from None
    return request.status(response)


def send_webhook(conn_id: str, body: Mapping[str, Any]) -> int:
    """:func:`post_webhook` from a task (synchronous, the task's connection lookup)."""
    from airflow.sdk import BaseHook

    request = _Request.of(conn_id, BaseHook.get_connection(conn_id))
    try:
        with httpx.Client(timeout=WEBHOOK_TIMEOUT_SECONDS, auth=request.auth) as client:
            response = client.post(request.url, json=dict(body), headers=request.headers)
    except httpx.HTTPError as err:
        raise request.unanswered(err) from None
    return request.status(response)


@dataclass(frozen=True)
class _Request:
    """Where and how a webhook connection is posted to, its URL's secrets already masked."""

    conn_id: str
    url: str
    safe_url: str
    auth: httpx.BasicAuth | None
    headers: dict[str, str]

    @classmethod
    def of(cls, conn_id: str, conn: Any) -> _Request:
        from airflow.sdk.log import mask_secret

        extra = conn.extra_dejson
        url = webhook_url(conn.host, conn.schema, conn.port, extra)
        for form in secret_forms(url):
            mask_secret(form)
        auth = httpx.BasicAuth(conn.login, conn.password or "") if conn.login else None
        return cls(conn_id, url, redacted_url(url), auth, dict(extra.get("headers") or {}))

    def unanswered(self, err: httpx.HTTPError) -> WebhookError:
        return WebhookError(
            f"SLA webhook connection {self.conn_id!r} ({self.safe_url}) did not answer: {type(err).__name__}"
        )

    def status(self, response: httpx.Response) -> int:
        if response.is_error:
            raise WebhookError(
                f"SLA webhook connection {self.conn_id!r} ({self.safe_url}) answered HTTP "
                f"{response.status_code}"
            )
        return response.status_code


async def on_sla_miss(
    context: Mapping[str, Any] | None = None,
    *,
    topic: str,
    table: str,
    sla: str,
    deadline: str,
    webhook_conn_id: str | None = None,
) -> str:
    """Deadline Alert callback, run by the triggerer with the run's context.

    Returns the message (Airflow stores it as the callback's result).
    """
    message = miss_message(context, topic=topic, table=table, sla=sla, deadline=deadline)
    run = (context or {}).get("dag_run") or {}
    if str(run.get("run_type")) in ("backfill", "DagRunType.BACKFILL_JOB"):
        # A backfill run never ingests (kafkalake.core.run_mode) and waits behind the backfill's other
        # runs: its lateness says nothing about the table's freshness. Log it, page no one.
        log.info("not an SLA miss: backfill run %s does not ingest (%s)", _run_id(run), message)
        return message
    checked = False
    if run.get("dag_id") and _run_id(run) != "?":
        try:
            landed = await landed_since_preflight(str(run["dag_id"]), _run_id(run))
            checked = True
        except Exception as err:
            # A check that cannot run must not swallow the alert: page as before.
            log.warning("could not ask Airflow whether an ingest landed the topic since: %r", err)
            landed = False
        if landed:
            log.info("not an SLA miss: an ingest succeeded after this run's pre-flight began (%s)", message)
            return message
    log.error("%s", message)
    if webhook_conn_id:
        body = payload(
            context, message, topic=topic, table=table, sla=sla, deadline=deadline, landing_checked=checked
        )
        status = await post_webhook(webhook_conn_id, body)
        log.info("SLA miss sent to webhook connection %r (HTTP %d)", webhook_conn_id, status)
    return message


def callback_kwargs(
    *, topic: str, table: str, sla: timedelta, deadline: timedelta, webhook_conn_id: str | None
) -> dict[str, str]:
    """What the DAG stores for the callback: strings only (it is serialized with the DAG)."""
    kwargs = {
        "topic": topic,
        "table": table,
        "sla": format_duration(sla),
        "deadline": format_duration(deadline),
    }
    if webhook_conn_id:
        kwargs["webhook_conn_id"] = webhook_conn_id
    return kwargs


def webhook_conn_id(topic: TopicConfig, environ: Mapping[str, str]) -> str | None:
    """The HTTP connection a topic's SLA alerts go to: its own, else ``KAFKALAKE_SLA_WEBHOOK_CONN_ID``'s."""
    return topic.sla_webhook_conn_id or environ.get(ENV_WEBHOOK_CONN_ID) or None


def deadlines_enabled(environ: Mapping[str, str]) -> bool:
    return environ.get(ENV_DEADLINE_ALERTS, "1") != "0"


def deadline_alert(topic: TopicConfig, environ: Mapping[str, str]) -> DeadlineAlert | None:
    """The Deadline Alert of a topic's DAG, or None where deadlines are switched off."""
    if not deadlines_enabled(environ):
        return None
    plan = sla_plan(topic.freshness_sla)
    kwargs = callback_kwargs(
        topic=topic.name,
        table=topic.qualified_table,
        sla=plan.sla,
        deadline=plan.deadline,
        webhook_conn_id=webhook_conn_id(topic, environ),
    )
    return DeadlineAlert(
        reference=DeadlineReference.DAGRUN_QUEUED_AT,
        interval=plan.deadline,
        callback=AsyncCallback(on_sla_miss, kwargs=kwargs),
        name="freshness_sla",
    )
