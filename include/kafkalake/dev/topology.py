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
        "AIRFLOW__CORE__PLUGINS_FOLDER",
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
#: Airflow keeps Derby). Its Kafka connection holds a password, so compose gives it in the
#: connections file (a secret) of the components that run tasks, not in the environment.
COMPOSE_AIRFLOW_ENV_KEYS = (AIRFLOW_ENV_KEYS - {"AIRFLOW_CONN_KAFKA_DEFAULT"}) | {
    "AIRFLOW_CONN_SPARK_DEFAULT",
    "KAFKALAKE_HOME",
    "KAFKALAKE_METASTORE_URI",
}

#: The metastore's: where its database is (the password is a secret), and the JVM.
METASTORE_ENV_KEYS = frozenset({"KAFKALAKE_METASTORE_DB_URL", "JAVA_HOME"})

#: Airflow's secrets: ``…_CMD`` reading files, in the local stack (deployed_airflow) and in compose.
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
    #: The compose secrets it gets (files under ``secrets/``, at ``/run/secrets/<name>``), and no
    #: other: :mod:`kafkalake.dev.compose_secrets` writes them.
    secrets: frozenset[str] = field(default_factory=frozenset)
    #: Runs once and exits (a migration): no healthcheck; the others wait for it to complete.
    oneshot: bool = False


_AIRFLOW_AFTER = ("airflow-init", "kafka-acls", "metastore", "s3", "spark-master")
_METASTORE_SECRETS = frozenset({"metastore-db-password"})
_SPARK_SECRETS = frozenset({"spark-auth.properties"})
#: Every Airflow component: its database, the JWT secret the api-server and the task workers share,
#: the key of the connections and variables stored in the database.
_AIRFLOW_SECRETS = frozenset({"airflow-db-conn", "airflow-jwt-secret", "airflow-fernet-key"})
#: Components that run tasks or triggers: the connections (Kafka's password, the S3 keys), the CA.
_TASK_SECRETS = frozenset({"airflow-connections.json", "kafka-ca.pem"})

SERVICES: tuple[Service, ...] = (
    Service(
        "postgres",
        env_keys=frozenset({"POSTGRES_USER", "POSTGRES_DB"}),
        secrets=frozenset({"postgres-password", "airflow-db-password"}) | _METASTORE_SECRETS,
    ),
    Service("kafka", published=(9094,), secrets=frozenset({"kafka-jaas.conf", "kafka-broker-keystore.pem"})),
    # The broker's ACLs, as its admin: the pipeline's user may read the catalog's topics, no more.
    Service(
        "kafka-acls",
        after=("kafka",),
        env_keys=frozenset({"KAFKALAKE_CATALOG"}),
        secrets=frozenset({"kafka-admin.json", "kafka-ca.pem"}),
        oneshot=True,
    ),
    Service("s3", secrets=frozenset({"s3proxy.properties"})),
    Service(
        "metastore-init",
        after=("postgres",),
        env_keys=METASTORE_ENV_KEYS,
        secrets=_METASTORE_SECRETS,
        oneshot=True,
    ),
    Service("metastore", after=("metastore-init",), env_keys=METASTORE_ENV_KEYS, secrets=_METASTORE_SECRETS),
    Service("spark-master", published=(8081,), secrets=_SPARK_SECRETS),
    Service("spark-worker", after=("spark-master",), secrets=_SPARK_SECRETS),
    # db migrate and a pool: the database only.
    Service(
        "airflow-init",
        after=("postgres",),
        env_keys=COMPOSE_AIRFLOW_ENV_KEYS,
        secrets=frozenset({"airflow-db-conn"}),
        oneshot=True,
    ),
    Service(
        "airflow-api-server",
        published=(8080,),
        after=_AIRFLOW_AFTER,
        env_keys=COMPOSE_AIRFLOW_ENV_KEYS,
        secrets=_AIRFLOW_SECRETS | {"airflow-api-secret-key", "airflow-users.json"},
    ),
    # LocalExecutor: the scheduler runs the tasks, so it submits the Spark jobs.
    Service(
        "airflow-scheduler",
        after=("airflow-api-server",),
        env_keys=COMPOSE_AIRFLOW_ENV_KEYS,
        secrets=_AIRFLOW_SECRETS | _TASK_SECRETS | _SPARK_SECRETS,
    ),
    Service("airflow-dag-processor", after=("airflow-api-server",), env_keys=COMPOSE_AIRFLOW_ENV_KEYS,
            secrets=_AIRFLOW_SECRETS),
    Service("airflow-triggerer", after=("airflow-api-server",), env_keys=COMPOSE_AIRFLOW_ENV_KEYS,
            secrets=_AIRFLOW_SECRETS | _TASK_SECRETS),
)  # fmt: skip


def service(name: str) -> Service:
    for candidate in SERVICES:
        if candidate.name == name:
            return candidate
    raise KeyError(f"no service {name!r} in the topology: {[s.name for s in SERVICES]}")
