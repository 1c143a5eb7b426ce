"""Every exception class of the package is a KafkalakeError, so its kind says retry or fail.

An error class outside the hierarchy is classed ``unknown`` wherever it is raised, and retried even
when retrying cannot help. The few that are outside on purpose are listed, each with its reason.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import kafkalake
from kafkalake.core.errors import KafkalakeError

#: Exception classes outside the hierarchy on purpose: "module.Class" -> why.
ALLOWED: dict[str, str] = {}

#: Third-party packages a module may need that a bare install lacks: such a module is skipped.
OPTIONAL = ("pyspark", "delta", "airflow", "deltalake", "confluent_kafka")


def package_modules() -> list[str]:
    """Every module of the package but kafkalake.dev (the local stack and the bench, never run in
    production), imported; one that needs a missing optional dependency is left out."""
    names = []
    for module in pkgutil.walk_packages(kafkalake.__path__, prefix="kafkalake."):
        if module.name == "kafkalake.dev" or module.name.startswith("kafkalake.dev."):
            continue
        try:
            importlib.import_module(module.name)
        except ImportError as err:
            if err.name and err.name.split(".")[0] in OPTIONAL:
                continue
            raise
        names.append(module.name)
    return names


def exception_classes() -> dict[str, type[BaseException]]:
    found = {}
    for name in package_modules():
        for _, value in inspect.getmembers(importlib.import_module(name), inspect.isclass):
            if issubclass(value, BaseException) and value.__module__ == name:
                found[f"{name}.{value.__qualname__}"] = value
    return found


def test_the_walk_finds_the_package_and_its_errors():
    classes = exception_classes()
    assert "kafkalake.core.errors.KafkalakeError" in classes
    assert "kafkalake.spark.registration.RegistrationError" in classes


def test_every_exception_class_is_a_kafkalake_error():
    outside = sorted(
        name
        for name, cls in exception_classes().items()
        if not issubclass(cls, KafkalakeError) and name not in ALLOWED
    )
    assert outside == [], (
        "these exception classes are outside KafkalakeError, so they would be classed unknown and "
        "retried: put each under the branch its meaning says (kafkalake.core.errors), or list it in "
        f"ALLOWED with the reason: {outside}"
    )


def test_the_allow_list_names_only_classes_outside_the_hierarchy():
    classes = exception_classes()
    stale = sorted(
        name for name in ALLOWED if name not in classes or issubclass(classes[name], KafkalakeError)
    )
    assert stale == []
