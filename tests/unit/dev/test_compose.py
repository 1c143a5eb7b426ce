"""docker-compose.yml and the Dockerfile against the topology the local stack runs (kafkalake.dev.topology).

No Docker engine runs here, so the containers are never started: these tests hold the file to the
same description ``make stack`` follows (services, start order, environment keys), and to the rules
of the issue (ports on 127.0.0.1 only, pinned images, healthchecks, no root, secrets from an env file
that is not committed). Where Debian's ``docker-compose`` is installed, it validates the file too.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from kafkalake.core.paths import REPO_ROOT
from kafkalake.dev.deployed_airflow import deployed_environment
from kafkalake.dev.local_airflow import environment, standalone_environment
from kafkalake.dev.topology import AIRFLOW_COMPONENTS, AIRFLOW_ENV_KEYS, AIRFLOW_SECRET_KEYS, SERVICES

COMPOSE = REPO_ROOT / "docker-compose.yml"
ENV_EXAMPLE = REPO_ROOT / ".env.example"
DOCKERFILE = REPO_ROOT / "Dockerfile"


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


def test_secrets_come_from_the_env_file_never_from_the_compose_file(compose, services):
    airflow_env = compose["x-airflow-common"]["environment"]
    assert not AIRFLOW_SECRET_KEYS & set(airflow_env)
    example_keys = {
        line.split("=", 1)[0]
        for line in ENV_EXAMPLE.read_text().splitlines()
        if re.match(r"^[A-Z0-9_]+=", line)
    }
    assert AIRFLOW_SECRET_KEYS <= example_keys
    # Every ${VAR} the file interpolates is one the example names, and none has a default value.
    for name, default in re.findall(r"(?<!\$)\$\{([A-Z0-9_]+)(:?[-?][^}]*)?\}", COMPOSE.read_text()):
        assert name in example_keys, name
        assert not default.startswith((":-", "-")), f"{name} has a default in the compose file"
    for expected in SERVICES:
        if expected.secrets:
            assert services[expected.name].get("env_file") == ".env", expected.name
            assert expected.secrets <= example_keys, expected.name
    ignored = (REPO_ROOT / ".gitignore").read_text().splitlines()
    assert ".env" in ignored and "/secrets/" in ignored


def test_the_postgres_init_script_keeps_the_passwords_off_psql_s_command_line(tmp_path):
    # A stub psql records what the real one would get: its arguments are in `ps` while it runs.
    stub = tmp_path / "psql"
    stub.write_text('#!/bin/bash\nprintf "%s\\n" "$@" > "$STUB_OUT.argv"; cat > "$STUB_OUT.stdin"\n')
    stub.chmod(0o755)
    secrets = {"AIRFLOW_DB_PASSWORD": "canary-airflow", "KAFKALAKE_METASTORE_DB_PASSWORD": "canary-hive"}
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "STUB_OUT": str(tmp_path / "out")}
    env |= {"POSTGRES_USER": "kafkalake", "POSTGRES_DB": "airflow", **secrets}
    script = REPO_ROOT / "docker" / "postgres-init-metastore.sh"
    subprocess.run(["bash", str(script)], env=env, check=True)
    argv = (tmp_path / "out.argv").read_text()
    sql = (tmp_path / "out.stdin").read_text()
    assert not any(secret in argv or secret in sql for secret in secrets.values())
    assert "\\getenv airflow_pw AIRFLOW_DB_PASSWORD" in sql
    assert "\\getenv metastore_pw KAFKALAKE_METASTORE_DB_PASSWORD" in sql
    # An unset password still stops the script before psql runs.
    (tmp_path / "out.argv").unlink()
    unset = {k: v for k, v in env.items() if k != "AIRFLOW_DB_PASSWORD"}
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
    shutil.copy(ENV_EXAMPLE, tmp_path / ".env")
    done = subprocess.run(
        [binary, "-f", "docker-compose.yml", "config", "--quiet"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_standalone_sqlite_waits_out_a_write_lock_and_the_deployed_setup_does_not_pass_that_on(tmp_path):
    import importlib

    from kafkalake.dev.local_airflow import SQLITE_CONNECT_ARGS_KEY

    env = environment(tmp_path / "home", kafka_bootstrap="127.0.0.1:9092")
    standalone = standalone_environment(env, port=8080)
    module, _, name = standalone[SQLITE_CONNECT_ARGS_KEY].rpartition(".")
    # sqlite3's own default is 5 s, shorter than the scheduler holds the lock on a busy machine.
    assert getattr(importlib.import_module(module), name)["timeout"] >= 30
    assert SQLITE_CONNECT_ARGS_KEY not in deployed_environment(standalone, tmp_path / "secrets")
