"""docker-compose.yml's secrets: one file each under ``secrets/``, generated with random values.

    python -m kafkalake.dev.compose_secrets [--dir secrets] [--force] [--chown]

Each service gets only the files it reads (compose ``secrets:``, mounted at ``/run/secrets/<name>``;
which service reads which: :data:`kafkalake.dev.topology.SERVICES`). Every value is random and every
file is written 0600 in a 0700 folder, never printed. Values that belong together are written
together (the Airflow database's password and its URL, the broker's users and the admin's client
settings, the S3 server's keys and the Airflow connection that uses them), so the command writes the
whole set or nothing: it refuses to touch a folder that holds some of them already unless ``--force``.

The broker's PEM keystore and its CA (:data:`FROM_YOUR_PKI`) are not generated: they come from your
PKI (the keystore names ``kafka`` and ``localhost``).

Compose bind-mounts secret files as they are on the host, owner and mode included, and the
containers run as other users. ``--chown`` (as root) gives each file to the user of the service that
reads it, read-only, with group 0 where kafkalake's image (uid 50000, group 0) reads it too.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from kafkalake.core.paths import REPO_ROOT
from kafkalake.dev.topology import SERVICES
from kafkalake.launch.spark_auth import properties_text

DEFAULT_DIR = REPO_ROOT / "secrets"

#: Where the containers see them.
MOUNT_DIR = "/run/secrets"

#: Not generated: the broker's key and certificate chain (PEM keystore) and the CA that signed it.
FROM_YOUR_PKI = ("kafka-broker-keystore.pem", "kafka-ca.pem")

#: The user (uid, gid) each service runs as in docker-compose.yml; the others run kafkalake's image.
SERVICE_USERS = {"postgres": (999, 999), "kafka": (1000, 1000), "s3": (65534, 65534)}
IMAGE_USER = (50000, 0)

PIPELINE_USER = "lander"
ADMIN_USER = "admin"
S3_IDENTITY = "kafkalake"


def _password() -> str:
    return secrets.token_urlsafe(24)  # URL-safe: the database's goes into a URL as it is


def contents() -> dict[str, str]:
    """A fresh set of generated files (name → text), values random and consistent with each other."""
    from cryptography.fernet import Fernet

    airflow_db, admin, lander, s3_key = _password(), _password(), _password(), _password()
    ca = f"{MOUNT_DIR}/kafka-ca.pem"
    kafka_default = {
        "conn_type": "kafka",
        "host": "kafka",
        "port": 9092,
        "login": PIPELINE_USER,
        "password": lander,
        "extra_dejson": {"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN", "ssl_ca_location": ca},
    }
    s3 = {
        "conn_type": "aws",
        "login": S3_IDENTITY,
        "password": s3_key,
        "extra_dejson": {"endpoint_url": "http://s3:80", "region_name": "us-east-1"},
    }
    admin_client = {
        "bootstrap.servers": "kafka:9092",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.username": ADMIN_USER,
        "sasl.password": admin,
        "ssl.ca.location": ca,
    }
    s3proxy = {
        "s3proxy.endpoint": "http://0.0.0.0:80",
        "s3proxy.authorization": "aws-v2-or-v4",
        "s3proxy.identity": S3_IDENTITY,
        "s3proxy.credential": s3_key,
        "jclouds.provider": "filesystem",
        "jclouds.filesystem.basedir": "/data",
    }
    return {
        "postgres-password": _password(),
        "airflow-db-password": airflow_db,
        "metastore-db-password": _password(),
        "airflow-db-conn": f"postgresql+psycopg2://airflow:{airflow_db}@postgres:5432/airflow",
        "airflow-jwt-secret": secrets.token_urlsafe(48),
        "airflow-fernet-key": Fernet.generate_key().decode(),
        "airflow-api-secret-key": secrets.token_urlsafe(48),
        "airflow-users.json": json.dumps({ADMIN_USER: _password()}),
        "airflow-connections.json": json.dumps(
            {"kafka_default": kafka_default, "kafkalake_s3": s3}, indent=1
        ),
        # One login context for every SASL listener; the broker logs in to itself as admin.
        "kafka-jaas.conf": (
            "KafkaServer {\n  org.apache.kafka.common.security.plain.PlainLoginModule required\n"
            f'  username="{ADMIN_USER}" password="{admin}"\n'
            f'  user_{ADMIN_USER}="{admin}"\n  user_{PIPELINE_USER}="{lander}";\n}};\n'
        ),
        "kafka-admin.json": json.dumps(admin_client, indent=1),
        "s3proxy.properties": "".join(f"{k}={v}\n" for k, v in s3proxy.items()),
        "spark-auth.properties": properties_text(secrets.token_urlsafe(32)),
    }


def names() -> tuple[str, ...]:
    """Every secret of the compose file: the generated ones, then those from your PKI."""
    return (*contents(), *FROM_YOUR_PKI)


def readers(name: str) -> list[str]:
    """The services that get secret ``name``."""
    return [s.name for s in SERVICES if name in s.secrets]


def ownership(name: str) -> tuple[int, int, int]:
    """(uid, gid, mode) of secret ``name``'s file for ``--chown``: its readers' user, read-only."""
    users = {SERVICE_USERS.get(service, IMAGE_USER) for service in readers(name)}
    if not users:
        raise ValueError(f"no service reads secret {name!r}")
    if len(users) == 1:
        uid, gid = users.pop()
        return uid, gid, 0o400
    others = users - {IMAGE_USER}
    if len(others) != 1:
        raise ValueError(f"secret {name!r} is read by users {sorted(users)}: one file cannot serve them")
    # kafkalake's image runs with group 0: it reads through the group, the other service as owner.
    return others.pop()[0], IMAGE_USER[1], 0o440


def generate(directory: Path, *, force: bool = False) -> list[Path]:
    """Write every generated secret into ``directory`` (0600 files in a 0700 folder)."""
    generated = contents()
    present = sorted(name for name in generated if (directory / name).exists())
    if present and not force:
        raise FileExistsError(
            f"{directory} already holds {', '.join(present)}: values that belong together would "
            "disagree; pass --force to replace the whole set"
        )
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    directory.chmod(0o700)
    written = []
    for name, text in generated.items():
        path = directory / name
        path.unlink(missing_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(text)
        written.append(path)
    return written


def give_to_readers(directory: Path, files: Sequence[str]) -> Mapping[str, tuple[int, int, int]]:
    """chown/chmod each file as :func:`ownership` says (needs root)."""
    done = {}
    for name in files:
        uid, gid, mode = ownership(name)
        os.chown(directory / name, uid, gid)
        (directory / name).chmod(mode)
        done[name] = (uid, gid, mode)
    return done


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kafkalake.dev.compose_secrets", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--dir", type=Path, default=DEFAULT_DIR, help="where to write them (default: ./secrets)"
    )
    parser.add_argument("--force", action="store_true", help="replace a set written before")
    parser.add_argument(
        "--chown", action="store_true", help="as root: give each file to the user that reads it"
    )
    args = parser.parse_args(argv)
    try:
        written = generate(args.dir, force=args.force)
    except FileExistsError as err:
        print(err, file=sys.stderr)
        return 1
    missing = [name for name in FROM_YOUR_PKI if not (args.dir / name).exists()]
    if args.chown:
        give_to_readers(args.dir, [p.name for p in written] + [n for n in FROM_YOUR_PKI if n not in missing])
    print(f"wrote {len(written)} secrets to {args.dir} (values not shown)")
    if missing:
        print(f"still to add from your PKI: {', '.join(str(args.dir / n) for n in missing)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
