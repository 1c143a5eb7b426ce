"""The freshness view: an Airflow 3 plugin serving two pages from the api-server.

``/kafkalake/freshness/`` lists every catalog entry by risk (data age / SLA);
``/kafkalake/freshness/dags/<dag_id>`` shows one topic over the last days. Both read the run history
(kafkalake.lake.run_history) with delta-rs: no JVM in the web server. The UI links them from its
navigation ("Freshness") and from each DAG's page (a "Freshness" tab); docs/freshness-view.md.

Auth: each request names its user by Airflow's own means (the UI's ``_token`` cookie, or a bearer
token), and Airflow's auth manager decides: the fleet page lists only the DAGs the user may read, a
topic page needs read access to its DAG. No token: 401. Plugin apps get no auth from Airflow by
themselves, hence the dependency on every route.

The entry file Airflow loads is include/airflow_plugins/kafkalake_freshness.py (the plugins folder
kafkalake.dev.local_airflow and docker-compose.yml point Airflow at).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, ClassVar

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails
from airflow.api_fastapi.core_api.security import get_user
from airflow.plugins_manager import AirflowPlugin
from fastapi import Depends, FastAPI, HTTPException, Query, Request, status
from fastapi.responses import HTMLResponse

from kafkalake.airflow import freshness_figures as fig
from kafkalake.airflow import freshness_pages as pages
from kafkalake.airflow.connections import storage_settings
from kafkalake.config.catalog import load_catalog
from kafkalake.config.topic import TopicConfig
from kafkalake.core.paths import catalog_path, lake_root
from kafkalake.lake import run_history, store_settings

log = logging.getLogger(__name__)

URL_PREFIX = fig.URL_PREFIX
#: How far back the fleet page looks for a topic's last measured run (its newest timestamp).
FLEET_LOOKBACK = timedelta(days=7)
DEFAULT_DAYS = 3.0
MAX_DAYS = 90.0

User = Annotated[Any, Depends(get_user)]


def _topics() -> list[TopicConfig]:
    # Lenient, like the DAG processor in production: one broken entry must not hide the others.
    return list(load_catalog(catalog_path(), lake_root(), strict=False).topics)


def _store(topic: TopicConfig) -> store_settings.StorageSettings | None:
    """The topic's own store settings, from its storage connection, per call: the web server reads
    many topics at once, so it never puts one topic's settings in use for the whole process."""
    if not topic.on_object_store:
        return None
    return storage_settings(topic.name, topic.history_path, topic.storage_conn_id)


def _read(topic: TopicConfig, since: datetime) -> list[run_history.RunRecord]:
    return run_history.read(topic.history_path, since=since, settings=_store(topic))


def _runs(topic: TopicConfig, since: datetime) -> list[run_history.RunRecord]:
    store = _store(topic)  # one connection look-up for both reads
    runs = run_history.read(topic.history_path, since=since, settings=store)
    if not runs and (last := run_history.latest(topic.history_path, store)) is not None:
        runs = [last]
    return runs


def _status(topic: TopicConfig, runs: Sequence[run_history.RunRecord], now: datetime) -> fig.TopicStatus:
    return fig.status(topic.name, topic.dag_id, topic.freshness_sla.total_seconds(), runs, now)


def _base(request: Request) -> str:
    """The app's own path as the browser sees it (with Airflow's base URL, if any)."""
    return str(request.scope.get("root_path", "")).rstrip("/") or URL_PREFIX


def create_app() -> FastAPI:
    app = FastAPI(title="kafkalake freshness", docs_url=None, redoc_url=None, openapi_url=None)

    @app.exception_handler(HTTPException)
    def refused(request: Request, error: HTTPException) -> HTMLResponse:
        # The same status Airflow's API answers, as a page a person can act on: a browser that
        # opened a link without a session gets the way to the login page, not a JSON body.
        unauthenticated = error.status_code == status.HTTP_401_UNAUTHORIZED
        login = get_auth_manager().get_url_login(next_url=str(request.url)) if unauthenticated else None
        page = pages.refused_page(str(error.detail), login=login)
        return HTMLResponse(page, status_code=error.status_code, headers=error.headers)

    @app.get("/", response_class=HTMLResponse)
    def fleet(request: Request, user: User) -> HTMLResponse:
        readable = get_auth_manager().get_authorized_dag_ids(user=user, method="GET")
        now = datetime.now(UTC)
        statuses = []
        for topic in _topics():
            if topic.dag_id not in readable:
                continue
            try:
                runs = _runs(topic, now - FLEET_LOOKBACK)
            except Exception:
                # One unreadable history (a broken table, a store outage) must not blank the page
                # for every other topic: the row shows "no run" and the log says why.
                log.exception("cannot read the run history of %s at %s", topic.name, topic.history_path)
                runs = []
            statuses.append(_status(topic, runs, now))
        return HTMLResponse(pages.fleet_page(statuses, base=_base(request), now=now))

    @app.get("/dags/{dag_id}", response_class=HTMLResponse)
    def topic_page(
        request: Request,
        dag_id: str,
        user: User,
        days: Annotated[float, Query(gt=0, le=MAX_DAYS)] = DEFAULT_DAYS,
    ) -> HTMLResponse:
        if not get_auth_manager().is_authorized_dag(method="GET", details=DagDetails(id=dag_id), user=user):
            raise HTTPException(status.HTTP_403_FORBIDDEN, "Forbidden: you may not read this DAG")
        topic = next((t for t in _topics() if t.dag_id == dag_id), None)
        if topic is None:
            return HTMLResponse(pages.not_a_topic_page(dag_id, base=_base(request)), status_code=404)
        now = datetime.now(UTC)
        start = now - timedelta(days=days)
        runs = _read(topic, start)
        measured = any(r.newest_timestamp is not None for r in runs)
        current = _status(topic, runs if measured else _runs(topic, now - FLEET_LOOKBACK), now)
        return HTMLResponse(pages.topic_page(current, runs, base=_base(request), start=start, days=days))

    return app


class FreshnessViewPlugin(AirflowPlugin):  # type: ignore[misc]  # Airflow is untyped here
    """The pages, a "Freshness" entry in the UI's navigation, and a "Freshness" tab on each DAG."""

    name = "kafkalake_freshness"
    fastapi_apps: ClassVar[list[dict[str, Any]]] = [
        {"app": create_app(), "url_prefix": URL_PREFIX, "name": "kafkalake freshness"}
    ]
    # hrefs without a leading slash are relative to Airflow's base URL; {DAG_ID} is filled in by
    # the UI on a DAG's page. With a url_route the UI shows the page inside its own frame.
    external_views: ClassVar[list[dict[str, str]]] = [
        {
            "name": "Freshness",
            "href": URL_PREFIX.lstrip("/") + "/",
            "destination": "nav",
            "url_route": "kafkalake-freshness",
        },
        {
            "name": "Freshness",
            "href": URL_PREFIX.lstrip("/") + "/dags/{DAG_ID}",
            "destination": "dag",
            "url_route": "kafkalake-freshness-dag",
        },
    ]
