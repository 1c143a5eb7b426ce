"""What the DAG tests share: the fixture catalogs, what they must give, and how a test parses dags/.

Written out by hand (the DAG ids, the SLA plans), not derived by the code under test.
"""

from __future__ import annotations

import contextlib
import errno
import inspect
import socket
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy
from airflow.dag_processing.dagbag import DagBag
from airflow.sdk import BaseHook, Connection
from airflow.sdk.definitions.timetables.interval import DeltaDataIntervalTimetable
from airflow.sdk.definitions.timetables.trigger import DeltaTriggerTimetable

REPO = Path(__file__).resolve().parents[3]
DAGS_DIR = REPO / "dags"
DAG_FILE = DAGS_DIR / "kafka_topics.py"
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
CATALOGS = FIXTURES / "dag_catalogs"

FOUR_TOPICS = CATALOGS / "four_topics.yaml"
BROKEN_SLA = CATALOGS / "broken_sla.yaml"
POLICY = CATALOGS / "policy.yaml"

#: four_topics.yaml: topic name -> the DAG id it must get (sanitised by hand, not by the code under test).
FOUR_DAG_IDS = {
    "orders-v2": "ingest_orders_v2",
    "Web.Clicks": "ingest_web_clicks",
    "payments": "ingest_payments",
    "9lives": "ingest_t_9lives",
}


@dataclass(frozen=True)
class Expected:
    """What policy.yaml says about one topic, written out by hand."""

    topic: str
    dag_id: str
    table: str
    sla: str
    interval: timedelta
    owner: str
    extra_tags: tuple[str, ...] = ()
    priority: int = 1


POLICY_TOPICS = [
    Expected(
        "payments",
        "ingest_payments",
        "bronze.payments",
        "15m",
        timedelta(minutes=5),
        "lake-team",
        priority=10,
    ),
    Expected(
        "clickstream", "ingest_clickstream", "bronze.clickstream", "1h", timedelta(minutes=20), "web-team"
    ),
    Expected(
        "orders-v2",
        "ingest_orders_v2",
        "bronze.orders_v2",
        "6h",
        timedelta(hours=2),
        "lake-team",
        ("orders", "pii"),
    ),
    Expected(
        "ledger.daily",
        "ingest_ledger_daily",
        "bronze.ledger_daily",
        "1d",
        timedelta(hours=8),
        "lake-team",
        ("from-defaults",),
    ),
    # 7m / 3 = 2m20s, rounded down to the minute.
    Expected("odd-seven", "ingest_odd_seven", "bronze.odd_seven", "7m", timedelta(minutes=2), "lake-team"),
]
POLICY_IDS = [e.topic for e in POLICY_TOPICS]
#: policy.yaml: topic -> (deadline after the run is queued = SLA - interval, SLA webhook connection).
POLICY_DEADLINES = {
    "payments": (timedelta(minutes=10), None),
    "clickstream": (timedelta(minutes=40), "web_team_alerts"),
    "orders-v2": (timedelta(hours=4), None),
    "ledger.daily": (timedelta(hours=16), None),
    "odd-seven": (timedelta(minutes=5), None),  # 7m - 2m
}
#: A Kafka connection with a secret: the tests check it never reaches a command line.
PASSWORD = "s3cret-pw"
KAFKA_EXTRA = {
    "bootstrap.servers": "broker-1.example:9093",
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "PLAIN",
    "sasl.username": "alice",
    "sasl.password": PASSWORD,
}
TASK_ORDER = ["check_new_offsets", "ingest", "refresh_schema", "register_table", "maintain_table"]


def forget_dag_modules() -> None:
    """Drop every module loaded from dags/ so the next parse executes the DAG file again."""
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if file and Path(file).resolve().parent == DAGS_DIR:
            del sys.modules[name]


def parse_dags() -> DagBag:
    forget_dag_modules()
    return DagBag(dag_folder=str(DAGS_DIR), safe_mode=True)


def set_catalog(mp: pytest.MonkeyPatch, catalog: Path, lake: Path, *, strict: bool) -> None:
    mp.setenv("KAFKALAKE_CATALOG", str(catalog))
    mp.setenv("KAFKALAKE_LAKE_ROOT", str(lake))
    if strict:
        mp.setenv("KAFKALAKE_STRICT", "1")
    else:
        mp.delenv("KAFKALAKE_STRICT", raising=False)


def unset_env_for_test(mp: pytest.MonkeyPatch, name: str) -> None:
    """Unset ``name`` so that it is also removed again at teardown if the code under test sets it.

    ``monkeypatch.delenv`` records nothing when the variable is absent, so a value set later by
    the code under test would leak into other tests; setting it first makes monkeypatch remember
    the original state.
    """
    mp.setenv(name, "placeholder")
    mp.delenv(name)


@dataclass
class ParseGuard:
    """Records database queries, connection lookups and network calls made inside ``watch()``."""

    queries: list[str] = field(default_factory=list)
    lookups: list[str] = field(default_factory=list)
    network: list[str] = field(default_factory=list)

    def _on_query(self, conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        self.queries.append(statement)

    @contextlib.contextmanager
    def watch(self) -> Iterator[ParseGuard]:
        guard = self

        def wrap_classmethod(owner: type, name: str) -> None:
            original = inspect.getattr_static(owner, name)
            assert isinstance(original, classmethod), f"{owner.__name__}.{name} is no longer a classmethod"

            def recorder(cls: type, conn_id: str, *args: Any, **kwargs: Any) -> Any:
                guard.lookups.append(f"{owner.__name__}.{name}({conn_id!r})")
                return original.__func__(cls, conn_id, *args, **kwargs)

            mp.setattr(owner, name, classmethod(recorder))

        def connect(sock: socket.socket, address: Any) -> None:
            guard.network.append(f"connect {address!r}")
            raise OSError(errno.ENETUNREACH, f"network blocked by test: {address!r}")

        def connect_ex(sock: socket.socket, address: Any) -> int:
            guard.network.append(f"connect_ex {address!r}")
            return errno.ENETUNREACH

        def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
            guard.network.append(f"getaddrinfo {host!r}")
            raise socket.gaierror(socket.EAI_NONAME, f"DNS blocked by test: {host!r}")

        with pytest.MonkeyPatch.context() as mp:
            wrap_classmethod(BaseHook, "get_connection")
            if isinstance(inspect.getattr_static(Connection, "get", None), classmethod):
                wrap_classmethod(Connection, "get")
            mp.setattr(socket.socket, "connect", connect)
            mp.setattr(socket.socket, "connect_ex", connect_ex)
            mp.setattr(socket, "getaddrinfo", getaddrinfo)
            # Class level: every Engine, Airflow's own and any a DAG file could create.
            sqlalchemy.event.listen(sqlalchemy.engine.Engine, "before_cursor_execute", self._on_query)
            try:
                yield self
            finally:
                sqlalchemy.event.remove(sqlalchemy.engine.Engine, "before_cursor_execute", self._on_query)


@contextlib.contextmanager
def fresh_kafkalake_modules() -> Iterator[None]:
    """Import ``kafkalake`` anew inside the block, as a fresh DAG-processor process would.

    Its module-level code then runs under the recorders too. The original modules are put back
    afterwards, so classes seen by other tests keep their identity.
    """

    def ours(name: str) -> bool:
        return name == "kafkalake" or name.startswith("kafkalake.")

    saved = {name: module for name, module in sys.modules.items() if ours(name)}
    for name in saved:
        del sys.modules[name]
    try:
        yield
    finally:
        for name in [name for name in sys.modules if ours(name)]:
            del sys.modules[name]
        sys.modules.update(saved)


def schedule_delta(dag: Any) -> timedelta:
    timetable = dag.timetable
    assert isinstance(timetable, DeltaTriggerTimetable | DeltaDataIntervalTimetable), (
        f"{dag.dag_id}: a timedelta schedule should give a delta timetable, got {type(timetable).__name__}"
    )
    assert isinstance(timetable.delta, timedelta)
    return timetable.delta
