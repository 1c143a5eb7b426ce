"""Keeping Kafka client secrets out of logs, XCom and exception messages.

Which settings hold secrets (:func:`is_secret`), a copy of the settings safe to log
(:func:`redacted`), the values to register with Airflow's secrets masker (:func:`secret_values`),
and a message with them taken out (:func:`scrub`). The settings themselves are
:mod:`kafkalake.kafka.client_config`'s.
"""

from __future__ import annotations

from collections.abc import Mapping

from kafkalake.kafka.client_config import jaas_options

_SECRET_SETTINGS = {"ssl.key.pem", "ssl.keystore.key"}
_SECRET_HINTS = ("password", "secret", "jaas")
# JAAS options that name who logs in and what it asks for, not secrets (as the connection's login,
# which Airflow does not mask either). Masked, a common word among them ("kafka" as the OAuth scope)
# would turn into *** wherever a task log says it.
_PUBLIC_JAAS_OPTIONS = {"username", "clientId", "scope"}


def is_secret(setting: str) -> bool:
    """Whether a client setting's value is a secret (never logged, never in a message)."""
    name = setting.lower()
    return name in _SECRET_SETTINGS or any(hint in name for hint in _SECRET_HINTS)


def redacted(config: Mapping[str, str]) -> dict[str, str]:
    """A copy safe to log."""
    return {k: ("***" if is_secret(k) or "PRIVATE KEY" in v else v) for k, v in config.items()}


def secret_values(config: Mapping[str, str]) -> list[str]:
    """Every secret in the settings, and the lines of multi-line ones (a PEM key logged line by line)."""
    found: list[str] = []
    for key, value in config.items():
        if not (is_secret(key) or "PRIVATE KEY" in value) or len(value) < 4:
            continue
        found.append(value)
        found += [
            line.strip() for line in value.splitlines() if len(line.strip()) >= 16 and "-----" not in line
        ]
    if "sasl.jaas.config" in config:
        options = jaas_options(config["sasl.jaas.config"])
        found += [v for k, v in options.items() if k not in _PUBLIC_JAAS_OPTIONS and len(v) >= 4]
    return found


def scrub(text: str, config: Mapping[str, str]) -> str:
    """``text`` with every secret of ``config`` replaced by ``***`` (for exception messages)."""
    for secret in sorted(secret_values(config), key=len, reverse=True):
        text = text.replace(secret, "***")
    return text
