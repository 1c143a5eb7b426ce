"""A real single-node Kafka broker that only speaks TLS, with SASL/SCRAM, client certificates and ACLs.

For the tests of the secured paths; the demo keeps the PLAINTEXT broker of :mod:`kafkalake.dev.broker`.

* ``SASL_SSL`` listener (:attr:`SecuredKafka.port`): SCRAM-SHA-512 and SCRAM-SHA-256 over TLS.
* ``SSL`` listener (:attr:`SecuredKafka.ssl_port`): mutual TLS, a client certificate is required;
  its subject ``CN=<name>`` becomes the principal ``User:<name>`` (the same principal a SCRAM
  user of that name gets, so one set of ACLs serves both).
* A CA, the broker's certificate (SAN ``localhost`` and ``127.0.0.1``) and client certificates are
  made with ``openssl`` at the first start, in ``<directory>/pki``; so is a second CA that signed
  nothing the broker uses, for clients that must not trust the broker.
* ACLs: KRaft's ``StandardAuthorizer``; no ACL means no access. ``admin`` is a super user.

    python -m kafkalake.dev.secured_broker start --dir .kafka-secured
"""

from __future__ import annotations

import argparse
import logging
import secrets
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kafkalake.dev.broker import BrokerError, LocalKafka, free_port

# confluent_kafka is imported where the ACLs and users are set up: the test session imports this module at
# collection, and only the secured broker's own tests need the client.

log = logging.getLogger(__name__)

ADMIN = "admin"
#: The pipeline's principal in the tests: a SCRAM user and a client certificate of this name.
PIPELINE_USER = "lander"
SCRAM_MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256")
#: Consumer groups the pipeline's principal may read: none. Spark's executors name a group
#: (``spark-kafka-source-…``) and the pre-flight one (``kafkalake…``), but both only assign partitions
#: and never join, fetch or commit a group's offsets; the DAG runs over SCRAM and mTLS pass without.
CONSUMER_GROUP_PREFIXES: tuple[str, ...] = ()


@dataclass(frozen=True)
class ClientCert:
    name: str
    certificate: Path
    key: Path

    def pem(self) -> tuple[str, str]:
        return self.certificate.read_text(), self.key.read_text()


@dataclass(frozen=True)
class Pki:
    """Where the CA, the broker's and the clients' certificates live (all PEM, keys PKCS#8)."""

    directory: Path

    @property
    def ca(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def other_ca(self) -> Path:
        """A CA that signed nothing this broker presents: trusting only it must fail the handshake."""
        return self.directory / "other-ca.pem"

    @property
    def broker_keystore(self) -> Path:
        return self.directory / "broker-keystore.pem"

    def client(self, name: str) -> ClientCert:
        return ClientCert(name, self.directory / f"{name}.crt", self.directory / f"{name}.key")


def _openssl(*args: str | Path) -> None:
    done = subprocess.run(["openssl", *map(str, args)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise BrokerError(f"openssl {args[0]} failed: {done.stderr.strip()}")


def _new_ca(key: Path, cert: Path, name: str) -> None:
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert, "-days", "7",
        "-subj", f"/CN={name}",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
    )  # fmt: skip


def _signed(pki: Pki, name: str, cn: str, extensions: str) -> tuple[Path, Path]:
    key, csr, cert = (pki.directory / f"{name}.{ext}" for ext in ("key", "csr", "crt"))
    ext_file = pki.directory / f"{name}.ext"
    ext_file.write_text(extensions)
    # OpenSSL 3 writes PKCS#8 keys, the only private-key form the Java client reads from PEM.
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr, "-subj", f"/CN={cn}")
    _openssl(
        "x509", "-req", "-in", csr, "-CA", pki.ca, "-CAkey", pki.directory / "ca.key",
        "-set_serial", str(secrets.randbits(63)), "-out", cert, "-days", "7", "-extfile", ext_file,
    )  # fmt: skip
    key.chmod(0o600)
    return cert, key


def make_pki(directory: Path, clients: Iterable[str]) -> Pki:
    """A CA, the broker's keystore and one client certificate per name, unless they exist."""
    pki = Pki(directory)
    if pki.broker_keystore.exists():
        return pki
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    _new_ca(directory / "ca.key", pki.ca, "kafkalake dev CA")
    _new_ca(directory / "other-ca.key", pki.other_ca, "kafkalake untrusted CA")
    cert, key = _signed(
        pki,
        "broker",
        "localhost",
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n",
    )
    for name in clients:
        _signed(pki, name, name, "extendedKeyUsage=clientAuth\n")
    # Kafka's PEM keystore file: the private key, then the certificate chain.
    pki.broker_keystore.write_text(key.read_text() + cert.read_text() + pki.ca.read_text())
    pki.broker_keystore.chmod(0o600)
    return pki


def _jaas(module: str, **options: str) -> str:
    quoted = " ".join(f'{k}="{v}"' for k, v in options.items())
    return f"{module} required {quoted};"


_SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"


@dataclass
class SecuredKafka(LocalKafka):
    """A broker with a SASL_SSL (SCRAM) listener on ``port`` and an mTLS listener on ``ssl_port``.

    ``users`` are SCRAM users (name → password) created when the storage is formatted, for both
    SCRAM mechanisms; ``cert_clients`` get a client certificate. More users: :meth:`add_scram_user`.
    """

    ssl_port: int = 0
    admin_password: str = field(default_factory=lambda: secrets.token_urlsafe(16))
    users: dict[str, str] = field(default_factory=dict)
    cert_clients: tuple[str, ...] = (PIPELINE_USER,)

    @property
    def pki(self) -> Pki:
        return Pki(self.directory / "pki")

    @property
    def ssl_bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.ssl_port}"

    def _pick_ports(self) -> None:
        super()._pick_ports()
        self.ssl_port = self.ssl_port or free_port(avoid={self.port, self.controller_port})

    def _ports(self) -> list[int]:
        return [self.port, self.controller_port, self.ssl_port]

    def _set_ports(self, ports: list[int]) -> None:
        self.port, self.controller_port, self.ssl_port = ports

    def _prepare(self) -> None:
        make_pki(self.pki.directory, self.cert_clients)
        # The admin's password is kept with the broker's data, so a broker started earlier (the
        # `start` command, then the tests) still lets its admin in.
        saved = self.directory / "admin.password"
        if saved.exists():
            self.admin_password = saved.read_text().strip()
        else:
            saved.write_text(self.admin_password)
            saved.chmod(0o600)

    def _format_args(self) -> list[str]:
        args = []
        for name, password in {ADMIN: self.admin_password, **self.users}.items():
            for mechanism in SCRAM_MECHANISMS:
                args += ["--add-scram", f"{mechanism}=[name={name},password={password}]"]
        return args

    def _settings(self) -> dict[str, str]:
        p, c, s = self.port, self.controller_port, self.ssl_port
        return {
            **super()._settings(),
            "listeners": f"SASL_SSL://127.0.0.1:{p},SSL://127.0.0.1:{s},CONTROLLER://127.0.0.1:{c}",
            "advertised.listeners": f"SASL_SSL://127.0.0.1:{p},SSL://127.0.0.1:{s}",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL,SSL:SSL",
            "inter.broker.listener.name": "SASL_SSL",
            "sasl.enabled.mechanisms": ",".join(SCRAM_MECHANISMS),
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
            **{
                f"listener.name.sasl_ssl.{m.lower()}.sasl.jaas.config": _jaas(
                    _SCRAM_MODULE, username=ADMIN, password=self.admin_password
                )
                for m in SCRAM_MECHANISMS
            },
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.pki.broker_keystore),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.pki.ca),
            "listener.name.ssl.ssl.client.auth": "required",
            # CN=lander → User:lander, the principal the SCRAM user lander has.
            "ssl.principal.mapping.rules": "RULE:^CN=([^,]+)$/$1/,DEFAULT",
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            # ANONYMOUS is the broker itself on the loopback-only PLAINTEXT controller listener: the
            # controller authorizes the broker's registration and heartbeats. Clients never get it:
            # every client listener authenticates.
            "super.users": f"User:{ADMIN};User:ANONYMOUS",
            "allow.everyone.if.no.acl.found": "false",
            **self.extra_config,
        }

    def admin_config(self) -> dict[str, str]:
        return self.scram_config(ADMIN, self.admin_password)

    def scram_config(self, user: str, password: str, mechanism: str = "SCRAM-SHA-512") -> dict[str, str]:
        """librdkafka settings of a SCRAM client of this broker."""
        return {
            "bootstrap.servers": self.bootstrap_servers,
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": mechanism,
            "sasl.username": user,
            "sasl.password": password,
            "ssl.ca.location": str(self.pki.ca),
        }

    def mtls_config(self, client: str = PIPELINE_USER) -> dict[str, str]:
        """librdkafka settings of a client that authenticates with its certificate."""
        cert = self.pki.client(client)
        return {
            "bootstrap.servers": self.ssl_bootstrap_servers,
            "security.protocol": "SSL",
            "ssl.ca.location": str(self.pki.ca),
            "ssl.certificate.location": str(cert.certificate),
            "ssl.key.location": str(cert.key),
        }

    def add_scram_user(self, user: str, password: str) -> None:
        """Create (or change) a SCRAM user, for both mechanisms, through the admin API."""
        from confluent_kafka.admin import (
            AdminClient,
            ScramCredentialInfo,
            ScramMechanism,
            UserScramCredentialUpsertion,
        )

        admin = AdminClient(self.admin_config())
        # One request per mechanism: the broker refuses two changes of one user in one request.
        for mechanism in SCRAM_MECHANISMS:
            info = ScramCredentialInfo(ScramMechanism[mechanism.replace("-", "_")], 8192)
            upsert = UserScramCredentialUpsertion(user, info, password.encode())
            for future in admin.alter_user_scram_credentials([upsert]).values():
                future.result(timeout=30)

    def allow_read(self, principal: str, topics: Sequence[str], *, prefixed: bool = False) -> None:
        """Let ``User:<principal>`` read these topics (groups: :data:`CONSUMER_GROUP_PREFIXES`)."""
        from kafkalake.dev.compose_acls import TopicGrant, create_read_acls

        topic_grants = [TopicGrant(t, prefixed=prefixed) for t in topics]
        create_read_acls(self.admin_config(), principal, topic_grants, CONSUMER_GROUP_PREFIXES)


def client_connection(config: Mapping[str, str]) -> dict[str, object]:
    """An Airflow connection (the documented form) equivalent to librdkafka settings of this broker."""
    host, _, port = config["bootstrap.servers"].partition(":")
    extra: dict[str, object] = {"security_protocol": config["security.protocol"]}
    conn: dict[str, object] = {"conn_type": "kafka", "host": host, "port": int(port)}
    if "sasl.username" in config:
        conn["login"], conn["password"] = config["sasl.username"], config["sasl.password"]
        extra["sasl_mechanism"] = config["sasl.mechanism"]
    extra["ssl_ca_pem"] = Path(config["ssl.ca.location"]).read_text()
    if "ssl.certificate.location" in config:
        extra["ssl_certificate_pem"] = Path(config["ssl.certificate.location"]).read_text()
        extra["ssl_key_pem"] = Path(config["ssl.key.location"]).read_text()
    conn["extra"] = extra
    return conn


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Start or stop the local secured Kafka broker.")
    parser.add_argument("action", choices=["start", "stop", "status"])
    parser.add_argument("--dir", type=Path, required=True, help="data, certificates and logs")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    broker = SecuredKafka(args.dir.resolve())
    if args.action == "start":
        broker.start()
        print(
            f"SASL_SSL {broker.bootstrap_servers}  SSL (mTLS) {broker.ssl_bootstrap_servers}  "
            f"CA {broker.pki.ca}"
        )
    elif args.action == "stop":
        broker.stop()
    else:
        pid = broker.running_pid()
        print(f"running, pid {pid}" if pid else "stopped")
        return 0 if pid else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
