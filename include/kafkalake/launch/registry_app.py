"""A schema registry for the tests and local runs: Apicurio Registry, built once at set-up.

Apicurio's ``apicurio-registry-app`` on Maven Central is a Quarkus application jar: it runs only
after Quarkus's build (augmentation) step. Set-up writes a small Maven project (:data:`POM`) that
unpacks the app jar as its own classes (so Quarkus indexes its beans and reads its
``application.properties``, as in Apicurio's own build), takes the app's dependencies through its
pom, and runs ``quarkus-maven-plugin``'s ``build``. The runnable jar and its ``lib/`` land in
``.jars/registry``; the Maven repository used for the build is thrown away, so nothing is fetched
after set-up and the 300 MB of build-time artifacts are not kept.

Why 2.4.2.Final and not 3.x: this machine's registry serves no ``apicurio-registry-schema-util-provider``
for any 3.x the app exists in (3.3.x: not published; 3.0.9: its parent pom is missing), and 3.x
is compiled for Java 21. 2.4.2.Final is the newest release whose app, parent pom and that module
are all served; it runs on Java 17, in memory (H2), and has the Confluent-compatible API under
``/apis/ccompat/v7``. Two of its dependencies need a nudge, both in :data:`POM`: everit's JSON
Schema library is taken from its Maven Central coordinates (``com.github.erosb``), and
``apicurio-common-app-components-config-index`` from 0.1.10.Final, whose deployment module is
served (0.1.18.Final's is not).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from kafkalake.core.errors import JarsMissingError
from kafkalake.core.paths import jars_dir

log = logging.getLogger(__name__)

APICURIO_VERSION = "2.4.2.Final"
#: The Quarkus version Apicurio 2.4.2.Final was built with (its parent pom's ``quarkus.version``).
QUARKUS_VERSION = "2.16.4.Final"

POM = f"""\
<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>kafkalake</groupId>
  <artifactId>registry</artifactId>
  <version>1</version>
  <properties>
    <project.build.sourceEncoding>UTF-8</project.build.sourceEncoding>
  </properties>
  <dependencyManagement>
    <dependencies>
      <dependency>
        <groupId>io.apicurio</groupId>
        <artifactId>apicurio-registry</artifactId>
        <version>{APICURIO_VERSION}</version>
        <type>pom</type>
        <scope>import</scope>
      </dependency>
      <dependency>
        <groupId>io.apicurio</groupId>
        <artifactId>apicurio-common-app-components-config-index</artifactId>
        <version>0.1.10.Final</version>
      </dependency>
    </dependencies>
  </dependencyManagement>
  <dependencies>
    <!-- The app's dependencies through its pom; its own jar is unpacked below. -->
    <dependency>
      <groupId>io.apicurio</groupId>
      <artifactId>apicurio-registry-app</artifactId>
      <version>{APICURIO_VERSION}</version>
      <type>pom</type>
      <exclusions>
        <exclusion>
          <groupId>com.github.everit-org.json-schema</groupId>
          <artifactId>org.everit.json.schema</artifactId>
        </exclusion>
      </exclusions>
    </dependency>
    <dependency>
      <groupId>com.github.erosb</groupId>
      <artifactId>everit-json-schema</artifactId>
      <version>1.14.2</version>
    </dependency>
  </dependencies>
  <build>
    <plugins>
      <plugin>
        <groupId>org.apache.maven.plugins</groupId>
        <artifactId>maven-dependency-plugin</artifactId>
        <version>3.8.1</version>
        <executions>
          <execution>
            <id>unpack-app</id>
            <phase>process-classes</phase>
            <goals><goal>unpack</goal></goals>
            <configuration>
              <artifactItems>
                <artifactItem>
                  <groupId>io.apicurio</groupId>
                  <artifactId>apicurio-registry-app</artifactId>
                  <version>{APICURIO_VERSION}</version>
                  <outputDirectory>${{project.build.outputDirectory}}</outputDirectory>
                </artifactItem>
              </artifactItems>
            </configuration>
          </execution>
        </executions>
      </plugin>
      <plugin>
        <groupId>io.quarkus</groupId>
        <artifactId>quarkus-maven-plugin</artifactId>
        <version>{QUARKUS_VERSION}</version>
        <executions>
          <execution>
            <goals><goal>build</goal></goals>
          </execution>
        </executions>
      </plugin>
    </plugins>
  </build>
</project>
"""

#: What Quarkus builds (its ``legacy-jar``, Apicurio's choice): this jar plus ``lib/`` beside it.
RUNNER = "registry-1-runner.jar"


def digest() -> str:
    return hashlib.sha256(POM.encode()).hexdigest()[:12]


def app_dir(target: Path | None = None) -> Path:
    return (target or jars_dir()) / "registry"


def _marker(target: Path | None = None) -> Path:
    return (target or jars_dir()) / "resolved-registry.txt"


def is_built(target: Path | None = None) -> bool:
    marker = _marker(target)
    return (
        marker.is_file()
        and marker.read_text() == f"apicurio-registry-app {APICURIO_VERSION} {digest()}\n"
        and (app_dir(target) / RUNNER).is_file()
    )


def runner_jar(target: Path | None = None) -> Path:
    """The runnable registry; a clear error when set-up never built it."""
    if not is_built(target):
        raise JarsMissingError(
            f"the schema registry (Apicurio {APICURIO_VERSION}) is not built in {app_dir(target)}: "
            "run `make setup` (or `python -m kafkalake.launch.jars`) once, with Maven and access to "
            "Maven Central"
        )
    return app_dir(target) / RUNNER


def build(target: Path | None = None, *, force: bool = False) -> Path:
    """Run Quarkus's build of the Apicurio app into :func:`app_dir` unless it is there already."""
    if is_built(target) and not force:
        log.info("schema registry already built in %s", app_dir(target))
        return app_dir(target) / RUNNER
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JarsMissingError(
            "mvn is not on PATH: the schema registry (Apicurio, a Quarkus application) is built with "
            "Maven at set-up (Debian: apt-get install maven)"
        )
    destination = app_dir(target)
    with tempfile.TemporaryDirectory(prefix="kafkalake-registry-") as tmp:
        project = Path(tmp)
        (project / "pom.xml").write_text(POM)
        cmd = [mvn, "-B", "-q", "package", f"-Dmaven.repo.local={project / 'm2'}"]
        log.info(
            "building the schema registry: Apicurio %s with Quarkus %s", APICURIO_VERSION, QUARKUS_VERSION
        )
        done = subprocess.run(cmd, cwd=project, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise JarsMissingError(
                f"Maven could not build the schema registry (exit {done.returncode}):\n"
                f"{done.stdout[-4000:]}\n{done.stderr[-2000:]}"
            )
        built = project / "target"
        # Assembled beside it, then put in place: a half-copied app is never taken for a build.
        partial = destination.with_name(f".registry.{os.getpid()}")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        shutil.copy2(built / RUNNER, partial / RUNNER)
        shutil.copytree(built / "lib", partial / "lib")
        shutil.rmtree(destination, ignore_errors=True)
        partial.replace(destination)
    _marker(target).write_text(f"apicurio-registry-app {APICURIO_VERSION} {digest()}\n")
    log.info("built the schema registry in %s", destination)
    return destination / RUNNER
