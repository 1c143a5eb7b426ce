"""The schema registry's set-up step: when it counts as built, and what it builds."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from kafkalake.core.errors import JarsMissingError
from kafkalake.launch import registry_app


def test_not_built_until_its_marker_names_this_build(tmp_path: Path) -> None:
    with pytest.raises(JarsMissingError, match="make setup"):
        registry_app.runner_jar(tmp_path)
    (tmp_path / "registry").mkdir()
    (tmp_path / "registry" / registry_app.RUNNER).write_bytes(b"jar")
    assert not registry_app.is_built(tmp_path)
    (tmp_path / "resolved-registry.txt").write_text("apicurio-registry-app 2.0.0.Final 000000000000\n")
    assert not registry_app.is_built(tmp_path)  # another build: made again
    (tmp_path / "resolved-registry.txt").write_text(
        f"apicurio-registry-app {registry_app.APICURIO_VERSION} {registry_app.digest()}\n"
    )
    assert registry_app.runner_jar(tmp_path) == tmp_path / "registry" / registry_app.RUNNER


def test_the_pom_runs_quarkus_build_on_the_unpacked_app() -> None:
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    pom = ET.fromstring(registry_app.POM)
    plugins = {p.findtext("m:artifactId", namespaces=ns): p for p in pom.iterfind(".//m:plugin", ns)}
    quarkus = plugins["quarkus-maven-plugin"]
    assert quarkus.findtext("m:version", namespaces=ns) == registry_app.QUARKUS_VERSION
    assert quarkus.findtext(".//m:goal", namespaces=ns) == "build"
    unpacked = plugins["maven-dependency-plugin"].find(".//m:artifactItem", ns)
    assert unpacked is not None
    assert unpacked.findtext("m:artifactId", namespaces=ns) == "apicurio-registry-app"
    assert unpacked.findtext("m:version", namespaces=ns) == registry_app.APICURIO_VERSION
