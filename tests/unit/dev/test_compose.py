"""docker-compose.yml and the Dockerfile against the topology the local stack runs (kafkalake.dev.topology).

No Docker engine runs here, so the containers are never started: these tests hold the file to the
same description ``make stack`` follows (services, start order, environment keys), and to the rules
of the issue (ports on 127.0.0.1 only, pinned images, healthchecks, no root, each service only the
secret files it needs, no secret in the file or an environment variable, placeholders refused at
start). Where Debian's ``docker-compose`` is installed, it validates the file too.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from kafkalake.core.paths import REPO_ROOT
from kafkalake.dev import compose_secrets
from kafkalake.dev.deployed_airflow import deployed_environment
from kafkalake.dev.local_airflow import environment, standalone_environment
from kafkalake.dev.topology import AIRFLOW_COMPONENTS, AIRFLOW_ENV_KEYS, AIRFLOW_SECRET_KEYS, SERVICES
from kafkalake.launch.spark_auth import SECRET_KEY, read_properties

COMPOSE = REPO_ROOT / "docker-compose.yml"
DOCKERFILE = REPO_ROOT / "Dockerfile"
CHECK_SECRETS = REPO_ROOT / "docker" / "check-secrets.sh"

_AIRFLOW = {"airflow-db-conn", "airflow-jwt-secret", "airflow-fernet-key"}
_TASKS = {"airflow-connections.json", "kafka-ca.pem"}
#: Which secret files each service needs, and why; it gets these and no other.
SECRETS_BY_SERVICE: dict[str, set[str]] = {
    # Its superuser's, and the two roles its init script creates.
    "postgres": {"postgres-password", "airflow-db-password", "metastore-db-password"},
    # The SASL users (JAAS) and its TLS key; the CA is in the keystore's chain.
    "kafka": {"kafka-jaas.conf", "kafka-broker-keystore.pem"},
    # The admin's client settings to create ACLs, and the CA to trust the broker.
    "kafka-acls": {"kafka-admin.json", "kafka-ca.pem"},
    "s3": {"s3proxy.properties"},
    "metastore-init": {"metastore-db-password"},
    "metastore": {"metastore-db-password"},
    "spark-master": {"spark-auth.properties"},
    "spark-worker": {"spark-auth.properties"},
    # db migrate: the database only.
    "airflow-init": {"airflow-db-conn"},
    # The UI: its session key and users on top.
    "airflow-api-server": _AIRFLOW | {"airflow-api-secret-key", "airflow-users.json"},
    # Runs the tasks (LocalExecutor): connections, the broker's CA, the Spark cluster's secret.
    "airflow-scheduler": _AIRFLOW | _TASKS | {"spark-auth.properties"},
    "airflow-dag-processor": _AIRFLOW,
    # Triggers and deadline callbacks may use connections.
    "airflow-triggerer": _AIRFLOW | _TASKS,
}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return loaded


@pytest.fixture(scope="module")
def services(compose) -> dict[str, dict[str, Any]]:
    return dict(compose["services"])


def _env_keys(service: dict[str, Any]) -> set[str]:
    env = service.get("environment") or {}
    return set(env) if isinstance(env, dict) else {item.split("=", 1)[0] for item in env}


def test_the_compose_file_runs_the_topology_s_services(services):
    assert list(services) == [s.name for s in SERVICES]
    for component in AIRFLOW_COMPONENTS:
        assert services[f"airflow-{component}"]["command"][:2] == ["airflow", component]


def test_each_service_starts_after_what_the_topology_says(services):
    for expected in SERVICES:
        depends = services[expected.name].get("depends_on") or {}
        assert set(depends) == set(expected.after), expected.name
        for name, rule in depends.items():
            wanted = "service_completed_successfully" if _service(name).oneshot else "service_healthy"
            assert rule == {"condition": wanted}, f"{expected.name} waits for {name}"


def _service(name: str) -> Any:
    return next(s for s in SERVICES if s.name == name)


def test_each_service_gets_the_topology_s_environment_keys(services):
    for expected in SERVICES:
        missing = expected.env_keys - _env_keys(services[expected.name])
        assert not missing, f"{expected.name} lacks {sorted(missing)}"


def test_the_local_stack_sets_the_same_airflow_keys_and_its_secrets_come_from_files(tmp_path):
    env = environment(
        tmp_path / "home", kafka_bootstrap="127.0.0.1:9092", catalog=tmp_path, lake_root=tmp_path
    )
    deployed = deployed_environment(standalone_environment(env, port=8080), tmp_path / "secrets")
    assert AIRFLOW_ENV_KEYS <= set(deployed)
    assert deployed["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
    for key in AIRFLOW_SECRET_KEYS:
        assert key not in deployed, f"{key} would hold a secret in the environment"
        assert deployed[f"{key}_CMD"].startswith(f"cat {tmp_path / 'secrets'}/")


def _service_secrets(service: dict[str, Any]) -> set[str]:
    return {item if isinstance(item, str) else item["source"] for item in service.get("secrets") or []}


def test_each_service_gets_exactly_the_secrets_it_needs(compose, services):
    assert set(SECRETS_BY_SERVICE) == set(services)
    for name, service in services.items():
        assert _service_secrets(service) == SECRETS_BY_SERVICE[name], name
        assert set(next(s for s in SERVICES if s.name == name).secrets) == SECRETS_BY_SERVICE[name], name
    # Every secret is a file under ./secrets/ the generator writes (or your PKI gives), used by someone.
    declared = compose["secrets"]
    assert set(declared) == set(compose_secrets.names())
    assert set(declared) == set().union(*SECRETS_BY_SERVICE.values())
    for name, spec in declared.items():
        assert spec == {"file": f"./secrets/{name}"}, name
    ignored = (REPO_ROOT / ".gitignore").read_text().splitlines()
    assert "/secrets/" in ignored


def test_no_service_reads_a_secret_file_it_was_not_given(services):
    for name, service in services.items():
        text = json.dumps(
            {k: service.get(k) for k in ("environment", "command", "entrypoint", "healthcheck")}
        )
        used = set(re.findall(r"/run/secrets/([A-Za-z0-9_.-]+)", text))
        assert used <= SECRETS_BY_SERVICE[name], f"{name} reads {sorted(used - SECRETS_BY_SERVICE[name])}"


def test_no_secret_is_in_the_compose_file_or_an_environment_variable(compose, services):
    text = COMPOSE.read_text()
    assert "env_file" not in text
    assert not re.search(r"(?<!\$)\$\{", text), "the file interpolates a variable (a value from outside)"
    assert not re.search(r"change-me-[a-z]", text), "a placeholder value in the compose file"
    for name, service in services.items():
        assert "env_file" not in service, name
        for key, value in (service.get("environment") or {}).items():
            if re.search(r"PASSWORD|SECRET|FERNET|CREDENTIAL|TOKEN|SQL_ALCHEMY_CONN|JAAS", key):
                assert key.endswith(("_FILE", "_CMD", "_PATH", "_BACKEND", "_KWARGS", "PASSWORDS_FILE")), (
                    f"{name}: {key} would hold a secret in the environment"
                )
                assert "/run/secrets/" in str(value) or key.endswith("_BACKEND"), f"{name}: {key}"
            assert not re.search(r"(?i)password\W*[:=]", str(value)), f"{name}: {key} holds a password"
    # Airflow's secret settings come from files, for every component that has them.
    for component in (
        "airflow-api-server",
        "airflow-scheduler",
        "airflow-dag-processor",
        "airflow-triggerer",
    ):
        env = services[component]["environment"]
        for key in AIRFLOW_SECRET_KEYS - {"AIRFLOW__API__SECRET_KEY"}:
            assert key not in env and env[f"{key}_CMD"].startswith("cat /run/secrets/"), (component, key)
    assert services["airflow-api-server"]["environment"]["AIRFLOW__API__SECRET_KEY_CMD"].startswith("cat ")


def test_the_generated_secrets_are_private_random_and_agree_with_each_other(tmp_path):
    directory = tmp_path / "secrets"
    written = compose_secrets.generate(directory)
    assert {p.name for p in written} == set(compose_secrets.names()) - set(compose_secrets.FROM_YOUR_PKI)
    assert directory.stat().st_mode & 0o777 == 0o700
    for path in written:
        assert path.stat().st_mode & 0o777 == 0o600, path.name
        assert path.read_text().strip() and "change-me-" not in path.read_text(), path.name

    def read(name: str) -> str:
        return (directory / name).read_text()

    assert f"airflow:{read('airflow-db-password')}@postgres:5432/airflow" in read("airflow-db-conn")
    connections = json.loads(read("airflow-connections.json"))
    lander = connections["kafka_default"]["password"]
    admin = json.loads(read("kafka-admin.json"))["sasl.password"]
    assert f'user_lander="{lander}"' in read("kafka-jaas.conf")
    assert f'user_admin="{admin}"' in read("kafka-jaas.conf") and lander != admin
    s3 = read_properties(read("s3proxy.properties"))
    assert connections["kafkalake_s3"]["password"] == s3["s3proxy.credential"]
    spark = read_properties(read("spark-auth.properties"))
    assert spark["spark.authenticate"] == spark["spark.network.crypto.enabled"] == "true"
    assert len(spark[SECRET_KEY]) >= 32
    # A second run would make values that disagree with the first: refused unless asked.
    with pytest.raises(FileExistsError, match="--force"):
        compose_secrets.generate(directory)
    again = compose_secrets.generate(directory, force=True)
    assert (directory / "airflow-db-password").read_text() != lander and len(again) == len(written)
    assert compose_secrets.main(["--dir", str(directory)]) == 1


def test_secret_files_go_to_the_user_of_the_services_that_read_them(services):
    for name in compose_secrets.names():
        uid, gid, mode = compose_secrets.ownership(name)
        assert mode in (0o400, 0o440), name
        for service in compose_secrets.readers(name):
            user, group = (int(x) for x in str(services[service]["user"]).split(":"))
            assert uid == user or (gid == group and mode & 0o040), f"{service} cannot read {name}"


def _check(tmp_path: Path, files: dict[str, str]) -> subprocess.CompletedProcess[str]:
    directory = tmp_path / "run-secrets"
    directory.mkdir()
    for name, text in files.items():
        (directory / name).write_text(text)
    marker = tmp_path / "started"
    env = {"PATH": os.environ["PATH"], "KAFKALAKE_SECRETS_DIR": str(directory)}
    return subprocess.run(
        ["sh", str(CHECK_SECRETS), "touch", str(marker)], env=env, capture_output=True, text=True, check=False
    )


def test_a_service_refuses_to_start_on_a_placeholder_or_an_empty_secret_naming_the_file(tmp_path):
    done = _check(tmp_path, {"kafka-jaas.conf": 'user_lander="change-me-kafka-lander";', "ok": "x1"})
    assert done.returncode == 78 and not (tmp_path / "started").exists()
    assert "run-secrets/kafka-jaas.conf still holds a change-me- placeholder" in done.stderr
    assert "change-me-kafka-lander" not in done.stderr + done.stdout
    assert "/ok" not in done.stderr


@pytest.mark.parametrize("text", ["", "\n", "  \n\t"])
def test_an_empty_secret_is_refused(tmp_path, text):
    done = _check(tmp_path, {"airflow-fernet-key": text})
    assert done.returncode == 78 and "airflow-fernet-key is empty" in done.stderr
    assert not (tmp_path / "started").exists()


def test_a_service_whose_secrets_are_set_starts_its_own_entrypoint(tmp_path):
    secrets_dir = tmp_path / "generated"
    compose_secrets.generate(secrets_dir)
    files = {p.name: p.read_text() for p in secrets_dir.iterdir()}
    done = _check(tmp_path, files)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "started").exists()
    # Every service starts through the check, then its image's own entrypoint.
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    for name, service in services.items():
        assert service["entrypoint"][0] == "/usr/local/bin/kafkalake-check-secrets", name
        assert "./docker/check-secrets.sh:/usr/local/bin/kafkalake-check-secrets:ro" in service["volumes"], (
            name
        )


def test_the_postgres_init_script_keeps_the_passwords_off_psql_s_command_line(tmp_path):
    # A stub psql records what the real one would get: its arguments are in `ps` while it runs.
    stub = tmp_path / "psql"
    stub.write_text(
        '#!/bin/bash\nprintf "%s\\n" "$@" > "$STUB_OUT.argv"\n'
        'cat > "$STUB_OUT.stdin"; env > "$STUB_OUT.env"\n'
    )
    stub.chmod(0o755)
    secrets = {"AIRFLOW_DB_PASSWORD": "canary-airflow", "KAFKALAKE_METASTORE_DB_PASSWORD": "canary-hive"}
    for name, value in secrets.items():
        (tmp_path / name).write_text(value + "\n")
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "STUB_OUT": str(tmp_path / "out")}
    env |= {"POSTGRES_USER": "kafkalake", "POSTGRES_DB": "airflow"}
    env |= {f"{name}_FILE": str(tmp_path / name) for name in secrets}
    script = REPO_ROOT / "docker" / "postgres-init-metastore.sh"
    subprocess.run(["bash", str(script)], env=env, check=True)
    argv = (tmp_path / "out.argv").read_text()
    sql = (tmp_path / "out.stdin").read_text()
    assert not any(secret in argv or secret in sql for secret in secrets.values())
    assert "\\getenv airflow_pw AIRFLOW_DB_PASSWORD" in sql
    assert "\\getenv metastore_pw KAFKALAKE_METASTORE_DB_PASSWORD" in sql
    # psql, and only psql, gets them from the secrets' files (the script's own env has the paths).
    assert {f"{k}={v}" for k, v in secrets.items()} <= set((tmp_path / "out.env").read_text().splitlines())
    # An unset password still stops the script before psql runs.
    (tmp_path / "out.argv").unlink()
    unset = {k: v for k, v in env.items() if k != "AIRFLOW_DB_PASSWORD_FILE"}
    assert subprocess.run(["bash", str(script)], env=unset, capture_output=True).returncode != 0
    assert not (tmp_path / "out.argv").exists()


def test_ports_are_published_on_loopback_only(services):
    for expected in SERVICES:
        ports = services[expected.name].get("ports") or []
        published = [int(str(p).split(":")[1]) for p in ports]
        assert published == list(expected.published), expected.name
        for port in ports:
            assert str(port).startswith("127.0.0.1:"), f"{expected.name} publishes {port} beyond loopback"


def test_images_are_pinned_and_ours_is_built_here(compose, services):
    for name, service in services.items():
        image = service["image"]
        repository, _, tag = image.rpartition(":")
        assert repository and tag and tag != "latest" and "/" not in tag, f"{name}: {image}"
    assert compose["x-airflow-common"]["build"] == "."
    base = re.search(r"^FROM (\S+)", DOCKERFILE.read_text(), re.MULTILINE)
    assert base and base.group(1) == "apache/airflow:3.3.2-python3.11"
    requirements = (REPO_ROOT / "requirements.txt").read_text()
    assert "apache-airflow==3.3.2" in requirements


def test_the_image_bakes_java_and_the_jars_and_runs_unprivileged():
    dockerfile = DOCKERFILE.read_text()
    assert "openjdk-17-jre-headless" in dockerfile
    assert "python -m kafkalake.launch.jars" in dockerfile
    users = re.findall(r"^USER (\S+)", dockerfile, re.MULTILINE)
    assert users[-1] == "airflow"


def test_long_running_services_have_healthchecks_and_no_one_runs_as_root(services):
    for expected in SERVICES:
        service = services[expected.name]
        assert expected.oneshot or service.get("healthcheck", {}).get("test"), (
            f"{expected.name}: no healthcheck"
        )
        user = str(service.get("user", ""))
        assert user and user.split(":")[0] not in ("root", "0"), f"{expected.name} runs as {user or 'root'}"


def test_docker_compose_validates_the_file(tmp_path: Path):
    binary = shutil.which("docker-compose")
    if binary is None:
        pytest.skip("Debian's docker-compose is not installed (apt-get install docker-compose)")
    shutil.copy(COMPOSE, tmp_path / "docker-compose.yml")
    compose_secrets.generate(tmp_path / "secrets")
    done = subprocess.run(
        [binary, "-f", "docker-compose.yml", "config"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    # The rendered file names the secrets' files, never their values.
    for path in (tmp_path / "secrets").iterdir():
        assert path.read_text().strip() not in done.stdout, path.name


def test_standalone_sqlite_waits_out_a_write_lock_and_the_deployed_setup_does_not_pass_that_on(tmp_path):
    import importlib

    from kafkalake.dev.local_airflow import SQLITE_CONNECT_ARGS_KEY

    env = environment(tmp_path / "home", kafka_bootstrap="127.0.0.1:9092")
    standalone = standalone_environment(env, port=8080)
    module, _, name = standalone[SQLITE_CONNECT_ARGS_KEY].rpartition(".")
    # sqlite3's own default is 5 s, shorter than the scheduler holds the lock on a busy machine.
    assert getattr(importlib.import_module(module), name)["timeout"] >= 30
    assert SQLITE_CONNECT_ARGS_KEY not in deployed_environment(standalone, tmp_path / "secrets")
