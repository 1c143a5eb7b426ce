# kafkalake: `make demo` runs the pipeline end to end, `make test` runs the tests.
# Each target sets up what it runs, no more: the demo the venv and the jars of Spark and Kafka (a
# first table within minutes of `git clone`), the tests everything. Later runs reuse the venv and
# jars and work offline.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
UV := $(VENV)/bin/uv
STAMP := $(VENV)/.installed
# The browser test drives Debian's Chromium (a browser download by Playwright is not possible here).
CHROMIUM := /usr/bin/chromium
# Validates docker-compose.yml (tests/unit/dev/test_compose.py); no Docker engine is needed for that.
DOCKER_COMPOSE := /usr/bin/docker-compose
# The stack and the tests run private PostgreSQL clusters; kafkalake.dev.postgres finds the server's
# binaries (any major version), and `make postgresql` installs Debian's when it finds none.
AIRFLOW_PORT ?= 8080

.DEFAULT_GOAL := help
.PHONY: help setup runtime postgresql browser demo airflow stack test test-unit check bench kafka-start kafka-stop clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

# Bytecode is compiled at install: where PYTHONDONTWRITEBYTECODE is set (CI images often set it),
# Python would otherwise compile every imported module from source in every process. Each
# `airflow dags test` compiled ~2,000 modules (3.3 s of its 10 CPU-s); the suite starts hundreds of
# Airflow, Spark-driver and pytest processes.
$(STAMP): requirements.txt requirements-dev.txt pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else "kafkalake needs Python 3.11 (set PYTHON=python3.11)")'
	@command -v java >/dev/null || { echo "kafkalake needs a JDK 17 (java on PATH)"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check uv==0.9.30
	$(UV) pip install --quiet --compile-bytecode --python $(PY) -r requirements-dev.txt -e .
	$(PY) -m compileall -q include jobs dags
	$(PY) -m pip check
	touch $(STAMP)

setup: runtime  ## everything: the venv, every JVM jar set, the class archive, the tests' schema registry
	$(PY) -m kafkalake.launch.jars --group registry

# What running the catalog's DAGs over and over wants (any topic's jar sets, and the driver's class
# archive, which pays for its minute of training after a few runs), without the tests' registry.
runtime: $(STAMP)  ## the venv, every JVM jar set into .jars, kafkalake's JVM extension, the driver's class archive
	$(PY) -m kafkalake.launch.jars --no-registry
	$(PY) -m kafkalake.dev.class_archive_training

# Debian packages by apt-get, as root or with passwordless sudo; otherwise what to run by hand.
# $(call apt_install,who needs them,packages[,apt-get options])
apt_install = if [ "$$(id -u)" = 0 ]; then SUDO=; elif sudo -n true 2>/dev/null; then SUDO=sudo; else \
	  echo "$(1): run 'sudo apt-get install -y $(2)'"; exit 1; fi; \
	$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $(if $(3),$(3) )$(2)

$(CHROMIUM):
	@$(call apt_install,the browser test needs Debian's Chromium,chromium)

# Playwright drives Chromium from a Node.js of its own, which needs libatomic: a minimal Debian
# lacks it, and the browser tests then errored there ("libatomic.so.1: cannot open shared object").
browser: $(STAMP) $(CHROMIUM)  ## what the browser tests need: Debian's Chromium, and the libraries of Playwright's driver
	@node=$$($(PY) -c 'import pathlib, playwright; print(pathlib.Path(playwright.__file__).parent / "driver" / "node")'); \
	"$$node" --version >/dev/null 2>&1 && exit 0; \
	$(call apt_install,the browser tests need libatomic1 for Playwright's driver,libatomic1); \
	"$$node" --version >/dev/null || { echo "Playwright's driver ($$node) still does not start"; exit 1; }

$(DOCKER_COMPOSE):
	@$(call apt_install,the compose check needs Debian's docker-compose,docker-compose,--no-install-recommends)

postgresql: $(STAMP)  ## Debian's PostgreSQL server, unless one is installed (the stack and the tests run clusters of their own)
	@$(PY) -m kafkalake.dev.postgres bin >/dev/null 2>&1 && exit 0; \
	$(call apt_install,the stack and the tests need PostgreSQL's server,postgresql,--no-install-recommends); \
	$(PY) -m kafkalake.dev.postgres bin

# Only the venv first: the demo resolves the jars of Spark and Kafka and builds kafkalake's JVM
# extension itself (kafkalake.launch.jars.prepare), and trains no class archive (its training took
# 213 s to save ~45 s of a demo run: docs/benchmarks.md).
demo: $(STAMP)  ## start Kafka, produce sample events, run the orders DAG, show the Delta table
	$(PY) -m kafkalake.dev.demo

airflow: runtime  ## the real Airflow UI on the DAGs (airflow standalone), http://127.0.0.1:8080 or AIRFLOW_PORT=
	$(PY) -m kafkalake.dev.airflow_ui --port $(AIRFLOW_PORT)

stack: runtime postgresql  ## Airflow as deployed: PostgreSQL, LocalExecutor, its components as separate processes (AIRFLOW_PORT=)
	$(PY) -m kafkalake.dev.stack --port $(AIRFLOW_PORT)

# Four workers on 2 cores: much of a test's time is waiting (Airflow's latency, retries' backoff,
# servers starting), and with three the cores were busy 1.7 of 2 on average; four keep them ~1.9
# busy (full suite on a fresh clone, one shared broker: 1,478 s at -n 4; 1,673 s at -n 3 with a
# broker per worker).
# --dist loadfile keeps each test module on one worker (its tests share module-scoped topics and
# run in order; xdist's loadgroup does not group under pytest 9), and tests/conftest.py's scheduler
# hands out the longest modules first and the modules that share an Airflow server to one worker.
# PYTEST_WORKERS=0: serially.
PYTEST_WORKERS ?= 4

test: setup postgresql browser $(DOCKER_COMPOSE)  ## run the whole test suite (real broker, Spark and Delta, Chromium for the UI test)
	$(PY) -m pytest $(if $(filter-out 0,$(PYTEST_WORKERS)),-n $(PYTEST_WORKERS) --dist loadfile)

# A few unit tests compile the JVM extension or list the Spark set's jars: the core group, no more.
test-unit: $(STAMP)  ## only the fast unit tests
	$(PY) -m kafkalake.launch.jars --group core
	$(PY) -m pytest tests/unit

check: $(STAMP)  ## lint, type-check, and the layer rule (lint-imports, tests/unit/test_layers.py)
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check . && $(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache && $(PY) -m pytest -q -p no:cacheprovider tests/unit/test_layers.py

bench: runtime  ## benchmark: drain 2,000,000 events into bronze vs a raw Kafka read (not part of test)
	$(PY) -m kafkalake.dev.bench $(BENCH_ARGS)

kafka-start: $(STAMP)  ## start the local broker on 127.0.0.1:9092
	$(PY) -m kafkalake.launch.jars --group core
	$(PY) -m kafkalake.dev.broker start

kafka-stop:  ## stop the local broker
	$(PY) -m kafkalake.dev.broker stop

clean:  ## remove local state (lake, broker data, Airflow DBs, the stack's PostgreSQL, the CDC source); keeps .venv and .jars
	-$(PY) -m kafkalake.dev.broker stop
	-$(PY) -m kafkalake.dev.broker stop --dir .bench/kafka
	-$(PY) -m kafkalake.dev.cdc_source stop
	-$(PY) -m kafkalake.dev.postgres remove --dir .stack/postgres
	rm -rf .lake .kafka .airflow .airflow-ui .bench .stack .cdc
