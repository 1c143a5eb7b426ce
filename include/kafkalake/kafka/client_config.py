"""Kafka client settings: one Airflow connection, made right for both clients.

One connection (``conn_type`` kafka) describes how to reach and authenticate to a cluster; the
pre-flight and the tools use it through librdkafka (confluent-kafka), the ingest job through the
Java client inside Spark, and the two clients name and take settings differently. So:

1. :func:`librdkafka_config` reads the connection (the documented form below, or librdkafka's own
   dotted names, the convention of Airflow's Kafka provider) into **librdkafka settings**, the one
   canonical form. Java-only settings users often copy from a Java client (``sasl.jaas.config``,
   ``ssl.keystore.*``, ``ssl.truststore.*``) are translated when librdkafka has an equivalent and
   refused otherwise, with a :class:`~kafkalake.core.errors.KafkaConfigError` naming the setting.
2. :func:`java_client_config` derives the Java client's settings from that canonical form: a JAAS
   line for SASL, PEM trust and key stores, the OAuth login handler; it refuses what the Java
   client cannot do.

The documented connection form::

    host, port          a bootstrap broker (extra "bootstrap_servers": "b1:9093,b2:9093" for several)
    login, password     SASL username and password; for OAUTHBEARER the client id and secret
    extra:
      security_protocol       PLAINTEXT | SSL | SASL_PLAINTEXT | SASL_SSL
      sasl_mechanism          PLAIN | SCRAM-SHA-256 | SCRAM-SHA-512 | OAUTHBEARER
      ssl_ca_pem / ssl_ca_location                     the CA that signed the brokers' certificates
      ssl_certificate_pem / ssl_certificate_location   mutual TLS: the client's certificate (chain)
      ssl_key_pem / ssl_key_location                   ... and its private key (PKCS#8 PEM)
      ssl_key_password                                 ... if that key is encrypted
      ssl_check_hostname      true (default) | false: whether the broker's name must match its certificate
      oauth_token_endpoint, oauth_client_id, oauth_client_secret, oauth_scope   OAUTHBEARER (OIDC
                              client credentials); client id and secret may be login and password

Secrets travel to the Spark job in a file only its owner can read, which the job deletes as soon as
it has read it (:mod:`kafkalake.launch.handover`); never on a command line, in a log, in XCom or in
an exception message (:mod:`kafkalake.kafka.redaction`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from kafkalake.core.errors import KafkaConfigError

#: The connection's extra, documented form → librdkafka's names.
FRIENDLY_KEYS = {
    "bootstrap_servers": "bootstrap.servers",
    "security_protocol": "security.protocol",
    "sasl_mechanism": "sasl.mechanism",
    "ssl_ca_pem": "ssl.ca.pem",
    "ssl_ca_location": "ssl.ca.location",
    "ssl_certificate_pem": "ssl.certificate.pem",
    "ssl_certificate_location": "ssl.certificate.location",
    "ssl_key_pem": "ssl.key.pem",
    "ssl_key_location": "ssl.key.location",
    "ssl_key_password": "ssl.key.password",
    "oauth_token_endpoint": "sasl.oauthbearer.token.endpoint.url",
    "oauth_client_id": "sasl.oauthbearer.client.id",
    "oauth_client_secret": "sasl.oauthbearer.client.secret",
    "oauth_scope": "sasl.oauthbearer.scope",
}
# librdkafka's own settings without a dot; any other undotted key is a misspelt documented one.
_UNDOTTED = {"debug", "log_level", "acks", "retries"}
_SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")

_PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
_SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
_OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
# kafka-clients 3.9's handler for OIDC client credentials (the ".secured." one is its old name).
_OAUTH_HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
_LOGIN_MODULES = {
    "PLAIN": _PLAIN_MODULE,
    "SCRAM-SHA-256": _SCRAM_MODULE,
    "SCRAM-SHA-512": _SCRAM_MODULE,
}
# Consumer settings Spark's Kafka source manages itself and refuses at start-up; connections made
# for other consumers often carry them.
SPARK_MANAGED = {
    "auto.offset.reset",
    "enable.auto.commit",
    "key.deserializer",
    "value.deserializer",
    "interceptor.classes",
}
# librdkafka settings the Java client takes under another form (mapped below) or not at all.
_NOT_FOR_JAVA = {
    "sasl.username",
    "sasl.password",
    "sasl.mechanisms",
    "sasl.oauthbearer.method",
    "sasl.oauthbearer.client.id",
    "sasl.oauthbearer.client.secret",
    "sasl.oauthbearer.scope",
    "sasl.oauthbearer.extensions",
    "ssl.ca.location",
    "ssl.ca.pem",
    "ssl.certificate.location",
    "ssl.certificate.pem",
    "ssl.key.location",
    "ssl.key.pem",
    "ssl.keystore.location",
    "ssl.keystore.password",
    "log_level",
    "enable.ssl.certificate.verification",
    "ssl.endpoint.identification.algorithm",
}
# Java client settings librdkafka has no equivalent for; translated or refused by _from_java.
_JAVA_ONLY_PREFIXES = ("ssl.keystore.", "ssl.truststore.")
_JAVA_ONLY = {
    "sasl.jaas.config",
    "sasl.login.callback.handler.class",
    "sasl.client.callback.handler.class",
    "ssl.keymanager.algorithm",
    "ssl.trustmanager.algorithm",
    "ssl.protocol",
    "ssl.provider",
    "ssl.engine.factory.class",
    "security.providers",
}
# ---------------------------------------------------------------------------------------------
# the connection → librdkafka (the canonical form)


def librdkafka_config(
    conn_id: str,
    host: str | None,
    port: int | None,
    extra: Mapping[str, Any],
    login: str | None = None,
    password: str | None = None,
) -> dict[str, str]:
    """librdkafka settings from a connection's parts; ``host:port`` stands in for bootstrap.servers.

    Raises:
        KafkaConfigError: naming the connection and the setting that cannot be used.
    """
    where = f"Kafka connection {conn_id!r}"
    config: dict[str, str] = {}
    for key, value in extra.items():
        name = FRIENDLY_KEYS.get(key, key)
        if key == "ssl_check_hostname":
            name, value = "ssl.endpoint.identification.algorithm", ("https" if _true(value) else "none")
        elif "." not in key and key not in FRIENDLY_KEYS and key not in _UNDOTTED:
            raise KafkaConfigError(
                f"{where}: extra {key!r} is not a setting: use one of "
                f"{sorted([*FRIENDLY_KEYS, 'ssl_check_hostname'])} or a librdkafka setting (dotted, "
                "e.g. 'socket.timeout.ms')"
            )
        if name in config:
            raise KafkaConfigError(f"{where}: {name!r} is given twice in extra (as {key!r} too): keep one")
        config[name] = _text(value)
    if "sasl.mechanisms" in config:  # librdkafka's alias
        config.setdefault("sasl.mechanism", config.pop("sasl.mechanisms"))
    config = _from_java(where, config)
    if login or password:
        _set_login(where, config, login or "", password or "")
    if "bootstrap.servers" not in config:
        if not host:
            raise KafkaConfigError(
                f"connection {conn_id!r} names no broker: set extra 'bootstrap.servers' "
                '(e.g. {"bootstrap.servers": "broker:9092"}) or the connection\'s host and port'
            )
        config["bootstrap.servers"] = f"{host}:{port}" if port else host
    _check(where, config)
    return config


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def _true(value: Any) -> bool:
    return str(value).strip().lower() in ("true", "1", "yes")


def _set_login(where: str, config: dict[str, str], login: str, password: str) -> None:
    """The connection's login and password: SASL credentials, or OAuth client credentials."""
    oauth = config.get("sasl.mechanism", "").upper() == "OAUTHBEARER" or any(
        k.startswith("sasl.oauthbearer.") for k in config
    )
    if oauth:
        pairs = (("sasl.oauthbearer.client.id", login), ("sasl.oauthbearer.client.secret", password))
    else:
        pairs = (("sasl.username", login), ("sasl.password", password))
    for name, value in pairs:
        if value and name in config and config[name] != value:
            raise KafkaConfigError(
                f"{where}: {name!r} is set in extra and differs from the connection's "
                "login/password: keep one"
            )
        if value:
            config[name] = value


_JAAS = re.compile(
    r"^\s*(?P<module>[\w.$]+)\s+(?P<flag>required|requisite|sufficient|optional)\s*(?P<options>.*?);?\s*$",
    re.S,
)
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|(\S+))')


#: A backslash escape in a quoted JAAS value, as Kafka's parser (Java's StreamTokenizer) reads it:
#: C's letters, up to three octal digits (two when the first is over 3), any other character as itself.
_JAAS_ESCAPE = re.compile(r"\\(?:([0-3][0-7]{0,2}|[4-7][0-7]?)|(.))", re.S)
_JAAS_LETTERS = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}


def _jaas_unescape(quoted: str) -> str:
    def one(m: re.Match[str]) -> str:
        if m.group(1) is not None:
            return chr(int(m.group(1), 8))
        return _JAAS_LETTERS.get(m.group(2), m.group(2))

    return _JAAS_ESCAPE.sub(one, quoted)


def jaas_options(text: str) -> dict[str, str]:
    """The options of a JAAS line's module (``username="u" password="p"``), unescaped as Kafka reads them."""
    return {
        m.group(1): (_jaas_unescape(m.group(2)) if m.group(2) is not None else m.group(3))
        for m in _JAAS_OPTION.finditer(text)
    }


def _from_java(where: str, config: dict[str, str]) -> dict[str, str]:
    """Java client settings in a connection, as librdkafka's; refused when it has no equivalent."""
    java = {k: v for k, v in config.items() if k in _JAVA_ONLY or k.startswith(_JAVA_ONLY_PREFIXES)}
    if not java:
        return config
    out = {k: v for k, v in config.items() if k not in java}
    if "sasl.jaas.config" in java:
        out.update(_jaas_to_librdkafka(where, java.pop("sasl.jaas.config"), out.get("sasl.mechanism")))
    truststore_type = java.pop("ssl.truststore.type", "JKS" if "ssl.truststore.location" in java else "PEM")
    if "ssl.truststore.location" in java or "ssl.truststore.certificates" in java:
        if truststore_type.upper() != "PEM":
            raise KafkaConfigError(
                f"{where}: 'ssl.truststore.type' {truststore_type!r}: librdkafka (the pre-flight's client) "
                "reads no JKS or PKCS12 truststore; give the CA as PEM instead: extra 'ssl_ca_pem' "
                "(the certificate's text) or 'ssl_ca_location' (a PEM file)"
            )
        if "ssl.truststore.location" in java:
            out["ssl.ca.location"] = java.pop("ssl.truststore.location")
        if "ssl.truststore.certificates" in java:
            out["ssl.ca.pem"] = java.pop("ssl.truststore.certificates")
    java.pop("ssl.truststore.password", None)  # a PEM truststore has none
    keystore_type = java.pop("ssl.keystore.type", "JKS" if "ssl.keystore.location" in java else "PEM")
    if keystore_type.upper() == "PKCS12" and "ssl.keystore.location" in java:
        # librdkafka reads PKCS#12 keystores too, under the same names.
        out["ssl.keystore.location"] = java.pop("ssl.keystore.location")
        if "ssl.keystore.password" in java:
            out["ssl.keystore.password"] = java.pop("ssl.keystore.password")
    elif keystore_type.upper() == "PEM":
        if "ssl.keystore.certificate.chain" in java:
            out["ssl.certificate.pem"] = java.pop("ssl.keystore.certificate.chain")
        if "ssl.keystore.key" in java:
            out["ssl.key.pem"] = java.pop("ssl.keystore.key")
        if "ssl.keystore.location" in java:
            location = java.pop("ssl.keystore.location")  # one PEM file: the key and the chain
            out["ssl.certificate.location"] = out["ssl.key.location"] = location
    elif any(k.startswith("ssl.keystore.") for k in java) or keystore_type:
        raise KafkaConfigError(
            f"{where}: 'ssl.keystore.type' {keystore_type!r}: librdkafka (the pre-flight's client) reads no "
            "JKS keystore; give the client certificate and key as PEM instead: extra "
            "'ssl_certificate_pem' and 'ssl_key_pem' (or '..._location'), or a PKCS12 keystore"
        )
    if "ssl.key.password" in java:
        out["ssl.key.password"] = java.pop("ssl.key.password")
    if java:
        names = sorted(java)
        raise KafkaConfigError(
            f"{where}: {names} are Java client settings librdkafka (the pre-flight's client) cannot take; "
            "describe the connection with the documented extra keys instead (docs/security.md, 'Pointing it "
            "at a secured Kafka cluster')"
        )
    return out


def _jaas_to_librdkafka(where: str, jaas: str, mechanism: str | None) -> dict[str, str]:
    parsed = _JAAS.match(jaas)
    module = parsed.group("module") if parsed else ""
    options = jaas_options(parsed.group("options")) if parsed else {}
    if module in (_PLAIN_MODULE, _SCRAM_MODULE) and "username" in options:
        if module == _SCRAM_MODULE and not (mechanism or "").upper().startswith("SCRAM-"):
            raise KafkaConfigError(
                f"{where}: 'sasl.jaas.config' uses SCRAM: set 'sasl_mechanism' to SCRAM-SHA-256 or "
                "SCRAM-SHA-512"
            )
        return {
            "sasl.mechanism": mechanism or "PLAIN",
            "sasl.username": options["username"],
            "sasl.password": options.get("password", ""),
        }
    if module == _OAUTH_MODULE and "clientId" in options:
        found = {"sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc"}
        found["sasl.oauthbearer.client.id"] = options["clientId"]
        found["sasl.oauthbearer.client.secret"] = options.get("clientSecret", "")
        if "scope" in options:
            found["sasl.oauthbearer.scope"] = options["scope"]
        return found
    raise KafkaConfigError(
        f"{where}: 'sasl.jaas.config' with login module {module or '?'!r} cannot be translated for "
        "librdkafka (the pre-flight's client); put the username and password in the connection's "
        "login and password and set extra 'sasl_mechanism' (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), or "
        "the oauth_* keys for OAUTHBEARER"
    )


def _check(where: str, config: dict[str, str]) -> None:
    """What neither client would reject at once but would silently get wrong."""
    protocol = config.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in _SECURITY_PROTOCOLS:
        raise KafkaConfigError(
            f"{where}: 'security.protocol' {config['security.protocol']!r} is not one of "
            f"{list(_SECURITY_PROTOCOLS)}"
        )
    mechanism = config.get("sasl.mechanism", "").upper()
    if mechanism == "OAUTHBEARER" or any(k.startswith("sasl.oauthbearer.") for k in config):
        config.setdefault("sasl.mechanism", "OAUTHBEARER")
        config.setdefault("sasl.oauthbearer.method", "oidc")
    elif "sasl.username" in config and not mechanism:
        # librdkafka's default mechanism is GSSAPI, the Java client's PLAIN: say it, so both agree.
        config["sasl.mechanism"] = "PLAIN"
    sasl_settings = [k for k in ("sasl.username", "sasl.oauthbearer.client.id") if k in config]
    if sasl_settings and not protocol.startswith("SASL_"):
        raise KafkaConfigError(
            f"{where}: SASL credentials are set ({sasl_settings[0]!r}) but 'security.protocol' is "
            f"{protocol}: set extra 'security_protocol' to SASL_SSL (or SASL_PLAINTEXT), or the "
            "credentials would never be sent"
        )
    certs = [k for k in ("ssl.certificate.pem", "ssl.certificate.location") if k in config]
    keys = [k for k in ("ssl.key.pem", "ssl.key.location") if k in config]
    if bool(certs) != bool(keys):
        missing = "ssl_key_pem (or ssl_key_location)" if certs else "ssl_certificate_pem (or ..._location)"
        raise KafkaConfigError(
            f"{where}: a client certificate needs its key and the key its certificate: set {missing}"
        )
    if len(certs) > 1 or len(keys) > 1 or ("ssl.ca.pem" in config and "ssl.ca.location" in config):
        raise KafkaConfigError(
            f"{where}: give each of the CA, certificate and key once, as PEM text or as a location"
        )


# ---------------------------------------------------------------------------------------------
# librdkafka → the Java client


def _jaas_quote(value: str) -> str:
    """``value`` as a quoted JAAS option value. A line break ends a quoted value in Kafka's parser,
    which then fails on the rest of the secret and names it in its error: written as ``\\n``/``\\r``."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    return '"' + escaped + '"'


def _read(setting: str, location: str) -> str:
    try:
        return Path(location).read_text()
    except OSError as err:
        raise KafkaConfigError(f"{setting!r}: cannot read {location}: {err.strerror}") from None


_PKCS8 = ("-----BEGIN PRIVATE KEY-----", "-----BEGIN ENCRYPTED PRIVATE KEY-----")


def java_client_config(config: Mapping[str, str], read: Callable[[str, str], str] = _read) -> dict[str, str]:
    """Map librdkafka settings to the Java client's (what Spark's Kafka source takes).

    Certificate and key files are read here (``read``) and handed over as PEM text, so the Spark
    job needs no file beyond its settings file, wherever its executors run.
    """
    java = {k: v for k, v in config.items() if k not in _NOT_FOR_JAVA | SPARK_MANAGED}
    mechanism = (config.get("sasl.mechanism") or config.get("sasl.mechanisms") or "").upper()
    if mechanism:
        java["sasl.mechanism"] = mechanism
    if mechanism == "OAUTHBEARER" and "sasl.jaas.config" not in config:
        java.update(_oauth_settings(config))
    elif "sasl.username" in config and "sasl.jaas.config" not in config:
        module = _LOGIN_MODULES.get(mechanism or "PLAIN")
        if module is None:
            raise KafkaConfigError(
                f"sasl.mechanism {mechanism!r} with sasl.username: only {sorted(_LOGIN_MODULES)} and "
                "OAUTHBEARER map to the Java client; give 'sasl.jaas.config' yourself for other mechanisms"
            )
        java["sasl.jaas.config"] = (
            f"{module} required username={_jaas_quote(config['sasl.username'])} "
            f"password={_jaas_quote(config.get('sasl.password', ''))};"
        )
    if "ssl.ca.pem" in config:
        java["ssl.truststore.type"] = "PEM"
        java["ssl.truststore.certificates"] = config["ssl.ca.pem"]
    elif "ssl.ca.location" in config:
        java["ssl.truststore.type"] = "PEM"
        java["ssl.truststore.location"] = config["ssl.ca.location"]
    java.update(_keystore(config, read))
    if config.get("enable.ssl.certificate.verification", "true").lower() == "false":
        raise KafkaConfigError(
            "'enable.ssl.certificate.verification' false: the Java client (the ingest job's) cannot skip "
            "verifying the broker's certificate; give the CA that signed it instead (extra 'ssl_ca_pem' "
            "or 'ssl_ca_location'), and 'ssl_check_hostname': false if its name does not match"
        )
    if config.get("ssl.endpoint.identification.algorithm", "https").lower() == "none":
        java["ssl.endpoint.identification.algorithm"] = ""
    return java


def _keystore(config: Mapping[str, str], read: Callable[[str, str], str]) -> dict[str, str]:
    if "ssl.keystore.location" in config:
        keystore = {"ssl.keystore.type": "PKCS12", "ssl.keystore.location": config["ssl.keystore.location"]}
        if "ssl.keystore.password" in config:
            keystore["ssl.keystore.password"] = config["ssl.keystore.password"]
        return keystore
    if "ssl.certificate.pem" in config:
        chain = config["ssl.certificate.pem"]
    elif "ssl.certificate.location" in config:
        chain = read("ssl.certificate.location", config["ssl.certificate.location"])
    else:
        return {}
    if "ssl.key.pem" in config:
        key_setting, key = "ssl.key.pem", config["ssl.key.pem"]
    else:
        key_setting, key = "ssl.key.location", read("ssl.key.location", config["ssl.key.location"])
    found = re.search(r"-----BEGIN [A-Z ]*PRIVATE KEY-----", key)
    if found is None or found.group(0) not in _PKCS8:
        kind = found.group(0) if found else "no private key"
        raise KafkaConfigError(
            f"{key_setting!r}: the Java client (the ingest job's) reads only PKCS#8 private keys "
            f"('BEGIN PRIVATE KEY'), this holds {kind!r}; convert it with "
            "`openssl pkcs8 -topk8 -nocrypt -in key.pem -out key-pkcs8.pem` (or -v2 aes256 to keep it "
            "encrypted, with ssl_key_password)"
        )
    # A key file may hold the certificates too (a combined PEM): only the key block goes to Java.
    key_block = re.search(
        r"-----BEGIN (?:ENCRYPTED )?PRIVATE KEY-----.*?-----END (?:ENCRYPTED )?PRIVATE KEY-----", key, re.S
    )
    certs = re.findall(r"-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----", chain, re.S)
    if key_block is None or not certs:
        raise KafkaConfigError("the client certificate or key is not PEM ('-----BEGIN ...')")
    keystore = {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.certificate.chain": "\n".join(certs) + "\n",
        "ssl.keystore.key": key_block.group(0) + "\n",
    }
    if "ssl.key.password" in config:
        keystore["ssl.key.password"] = config["ssl.key.password"]
    return keystore


def _oauth_settings(config: Mapping[str, str]) -> dict[str, str]:
    """OIDC client credentials for the Java client: its login module and callback handler."""
    missing = [
        friendly
        for friendly, name in FRIENDLY_KEYS.items()
        if friendly in ("oauth_token_endpoint", "oauth_client_id", "oauth_client_secret")
        and not config.get(name)
    ]
    if config.get("sasl.oauthbearer.method", "oidc").lower() != "oidc" or missing:
        raise KafkaConfigError(
            "sasl.mechanism OAUTHBEARER: the Java client (the ingest job's) fetches tokens with OIDC "
            f"client credentials only; set extra {missing or ['oauth_token_endpoint', 'oauth_client_id']}"
        )
    options = {
        "clientId": config["sasl.oauthbearer.client.id"],
        "clientSecret": config["sasl.oauthbearer.client.secret"],
    }
    if config.get("sasl.oauthbearer.scope"):
        options["scope"] = config["sasl.oauthbearer.scope"]
    for pair in filter(None, config.get("sasl.oauthbearer.extensions", "").split(",")):
        name, _, value = pair.partition("=")
        options[f"extension_{name.strip()}"] = value.strip()
    jaas = " ".join(f"{k}={_jaas_quote(v)}" for k, v in options.items())
    return {
        "sasl.jaas.config": f"{_OAUTH_MODULE} required {jaas};",
        "sasl.login.callback.handler.class": _OAUTH_HANDLER,
        "sasl.oauthbearer.token.endpoint.url": config["sasl.oauthbearer.token.endpoint.url"],
    }
