"""The production-shaped topology, described once: what ``make stack`` starts and docker-compose runs.

``make stack`` (:mod:`kafkalake.dev.stack`) starts these services as local processes, and
``docker-compose.yml`` runs them as containers; ``tests/unit/dev/test_compose.py`` holds the compose
file to this description (the same services, start order, environment keys, ports published on
127.0.0.1 only, healthchecks, pinned images, no root), so the two cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: Airflow's components, each its own process (container), in start order: the api-server first,
#: since the others report to it (the task workers call its execution API).
AIRFLOW_COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")

#: Settings every Airflow component gets, in both the local stack and the compose file (values
#: differ: paths, hosts). Secrets are not among them (:data:`AIRFLOW_SECRET_KEYS`).
AIRFLOW_ENV_KEYS = frozenset(
    {
        "AIRFLOW__CORE__DAGS_FOLDER",
        "AIRFLOW__CORE__LOAD_EXAMPLES",
        "AIRFLOW__CORE__EXECUTOR",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL",
        "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT",
        "AIRFLOW_CONN_KAFKA_DEFAULT",
        "KAFKALAKE_CATALOG",
        "KAFKALAKE_LAKE_ROOT",
        "JAVA_HOME",
    }
)
#: What compose sets on top: Spark jobs go to the cluster's master (locally: local[*], the default),
#: and register tables in the metastore service (make stack sets that one too; the tests' deployed
#: Airflow keeps Derby).
COMPOSE_AIRFLOW_ENV_KEYS = AIRFLOW_ENV_KEYS | {
    "AIRFLOW_CONN_SPARK_DEFAULT",
    "KAFKALAKE_HOME",
    "KAFKALAKE_METASTORE_URI",
}

#: The metastore's: where its database is (the password is a secret), and the JVM.
METASTORE_ENV_KEYS = frozenset({"KAFKALAKE_METASTORE_DB_URL", "JAVA_HOME"})

#: Airflow's secrets: ``…_CMD`` files in the local stack (deployed_airflow), the env file in compose.
AIRFLOW_SECRET_KEYS = frozenset(
    {
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN",
        "AIRFLOW__API_AUTH__JWT_SECRET",
        "AIRFLOW__CORE__FERNET_KEY",
        "AIRFLOW__API__SECRET_KEY",
    }
)


@dataclass(frozen=True)
class Service:
    """One service of the topology."""

    name: str
    #: Ports a user on the host reaches (published on 127.0.0.1 only); the others stay inside.
    published: tuple[int, ...] = ()
    #: Services that must be healthy (or, for a one-shot, done) before this one starts.
    after: tuple[str, ...] = ()
    #: Environment keys the service is given (values differ between compose and the local stack).
    env_keys: frozenset[str] = field(default_factory=frozenset)
    #: Secrets it reads from the environment: compose's env file (locally: 0600 files).
    secrets: frozenset[str] = field(default_factory=frozenset)
    #: Runs once and exits (a migration): no healthcheck; the others wait for it to complete.
    oneshot: bool = False


_AIRFLOW_AFTER = ("airflow-init", "kafka", "metastore", "s3", "spark-master")
_METASTORE_SECRETS = frozenset({"KAFKALAKE_METASTORE_DB_PASSWORD"})

SERVICES: tuple[Service, ...] = (
    Service(
        "postgres",
        env_keys=frozenset({"POSTGRES_USER", "POSTGRES_DB"}),
        secrets=frozenset({"POSTGRES_PASSWORD", "AIRFLOW_DB_PASSWORD"}) | _METASTORE_SECRETS,
    ),
    Service("kafka", published=(9094,)),
    Service("s3", secrets=frozenset({"S3PROXY_IDENTITY", "S3PROXY_CREDENTIAL"})),
    Service(
        "metastore-init",
        after=("postgres",),
        env_keys=METASTORE_ENV_KEYS,
        secrets=_METASTORE_SECRETS,
        oneshot=True,
    ),
    Service("metastore", after=("metastore-init",), env_keys=METASTORE_ENV_KEYS, secrets=_METASTORE_SECRETS),
    Service("spark-master", published=(8081,)),
    Service("spark-worker", after=("spark-master",)),
    Service(
        "airflow-init",
        after=("postgres",),
        env_keys=COMPOSE_AIRFLOW_ENV_KEYS,
        secrets=AIRFLOW_SECRET_KEYS,
        oneshot=True,
    ),
    Service(
        "airflow-api-server",
        published=(8080,),
        after=_AIRFLOW_AFTER,
        env_keys=COMPOSE_AIRFLOW_ENV_KEYS,
        secrets=AIRFLOW_SECRET_KEYS,
    ),
    *(
        Service(
            f"airflow-{component}",
            after=("airflow-api-server",),
            env_keys=COMPOSE_AIRFLOW_ENV_KEYS,
            secrets=AIRFLOW_SECRET_KEYS,
        )
        for component in AIRFLOW_COMPONENTS[1:]
    ),
)


def service(name: str) -> Service:
    for candidate in SERVICES:
        if candidate.name == name:
            return candidate
    raise KeyError(f"no service {name!r} in the topology: {[s.name for s in SERVICES]}")
