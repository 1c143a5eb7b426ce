"""suite_cpu's kinds from real command lines, and its sampling of a real process tree."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kafkalake.dev.suite_cpu import busy_ticks, by_module, kind_of, machine_between, per_minute, sample, watch


@pytest.mark.parametrize(
    ("command", "name", "kind"),
    [
        ("/usr/bin/java -cp x org.apache.spark.deploy.SparkSubmit /r/jobs/ingest_topic.py --topic t", "java",
         "spark driver JVM: ingest_topic"),
        ("/usr/bin/java -cp x org.apache.spark.deploy.SparkSubmit pyspark-shell", "java",
         "spark session JVM (tests)"),
        ("/usr/bin/java -Xmx1G -cp k kafka.Kafka /tmp/server.properties", "java", "JVM: broker"),
        ("/usr/bin/java -cp c org.apache.hadoop.hive.metastore.HiveMetaStore", "java", "JVM: hive metastore"),
        ("/r/.venv/bin/python /r/jobs/register_table.py --topic t", "python",
         "job's python driver: register_table"),
        ("/r/.venv/bin/python /r/.venv/bin/airflow dags test kafkalake_x", "airflow", "airflow: dags test"),
        ("airflow api_server -- host:127.0.0.1", "airflow api_serv", "airflow: api-server"),
        ("/r/.venv/bin/python -m pyspark.daemon pyspark.worker", "python", "pyspark python workers"),
        ("/r/.venv/bin/python -c import sys; exec('execnet')", "python", "pytest"),
        ("/usr/lib/postgresql/15/bin/postgres -D /tmp/pg", "postgres", "postgresql"),
        ("/usr/lib/chromium/chromium --headless", "chromium", "chromium"),
        ("bash /r/.venv/bin/spark-submit", "bash", "other: bash"),
    ],
)  # fmt: skip
def test_kinds(command: str, name: str, kind: str) -> None:
    assert kind_of(command, name) == kind


def test_a_process_that_execs_is_counted_as_what_it_became() -> None:
    # bash (as spark-submit is) execs a python that spends about a second of CPU; a child of that
    # python spends about half a second more.
    burn = "import time; t = time.process_time()\nwhile time.process_time() - t < {s}: pass"
    script = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {burn.format(s=0.5)!r}]); " + (
        "exec(" + repr(burn.format(s=1.0)) + ")"
    )
    process = subprocess.Popen(["bash", "-c", f"sleep 0.3; exec {sys.executable} -c {script!r}"])
    totals = sample(process.pid, interval=0.05)
    process.wait()
    assert totals["python: other"]["processes"] == 2
    assert 1.2 <= totals["python: other"]["cpu_s"] <= 2.5
    assert totals.get("other: bash", {"cpu_s": 0.0})["cpu_s"] < 0.3


def test_cpu_goes_to_the_test_module_in_the_environment_a_process_started_with(tmp_path: Path) -> None:
    # A process started for one test, which then starts one for another: each keeps its own, and a
    # process with no test in its environment is counted apart.
    burn = tmp_path / "burn.py"
    burn.write_text("import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass\n")
    outer = tmp_path / "outer.py"
    outer.write_text(
        "import os, subprocess, sys\n"
        "env = {**os.environ, 'PYTEST_CURRENT_TEST': 'tests/integration/test_b.py::test_y (setup)'}\n"
        f"subprocess.run([sys.executable, {str(burn)!r}], env=env)\n"
        f"exec(open({str(burn)!r}).read())\n"
    )
    outside = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    test_a = "PYTEST_CURRENT_TEST='tests/integration/test_a.py::test_x (call)'"
    process = subprocess.Popen(
        ["bash", "-c", f"sleep 0.3; {sys.executable} {burn} & env {test_a} {sys.executable} {outer}; wait"],
        env=outside,
    )
    modules = by_module(watch(process.pid, interval=0.05))
    process.wait()
    assert set(modules) == {"tests/integration/test_a.py", "tests/integration/test_b.py", ""}, modules
    for module in modules:
        assert 0.4 <= modules[module]["cpu_s"] <= 1.5, modules


def test_a_process_that_becomes_a_tests_program_is_that_tests(tmp_path: Path) -> None:
    # Seen first as a shell with no test in its environment (it sleeps long enough to be read),
    # then it execs `env PYTEST_CURRENT_TEST=... python`: its CPU is the test's.
    burn = tmp_path / "burn.py"
    burn.write_text("import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass\n")
    outside = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    test_c = "PYTEST_CURRENT_TEST='tests/integration/test_c.py::test_z (call)'"
    process = subprocess.Popen(
        ["bash", "-c", f"sleep 0.5; exec env {test_c} {sys.executable} {burn}"], env=outside
    )
    modules = by_module(watch(process.pid, interval=0.05))
    process.wait()
    assert 0.4 <= modules["tests/integration/test_c.py"]["cpu_s"] <= 1.5, modules
    # Outside any test: only its `sleep`, which spends nothing.
    assert set(modules) <= {"tests/integration/test_c.py", ""}, modules
    assert modules.get("", {"cpu_s": 0.0})["cpu_s"] < 0.2, modules


def stat_line(user: int, idle: int, iowait: int = 0, guest: int = 0) -> str:
    # user nice system idle iowait irq softirq steal guest guest_nice
    return f"cpu  {user} 0 10 {idle} {iowait} 0 5 0 {guest} 0\n"


def test_the_machine_is_busy_with_all_but_idle_and_io_wait_and_guest_time_counts_once() -> None:
    before, after = stat_line(1_000, 500), stat_line(1_000 + 150, 500 + 40, iowait=10, guest=100)
    machine = machine_between((0.0, before), (2.0, after))
    # 150 user ticks (the guest's 100 among them), nothing else busy: 1.5 CPU-s in 2 s.
    assert (machine.seconds, machine.cpu_s, machine.cores_busy) == (2.0, 1.5, 0.75)
    assert busy_ticks(after) - busy_ticks(before) == 150


def test_each_whole_minute_gets_its_cores_busy_and_a_last_part_minute_none() -> None:
    reads = [(0.0, stat_line(0, 0)), (30.0, stat_line(3_000, 0)), (60.0, stat_line(12_000, 0))]
    reads += [(90.0, stat_line(12_000, 3_000)), (120.0, stat_line(12_600, 8_400))]
    reads += [(150.0, stat_line(20_000, 8_400))]
    assert per_minute(reads) == [2.0, 0.1]
    assert per_minute(reads[:1]) == [] and per_minute([]) == []


def test_a_watch_reads_the_machine_while_the_command_runs() -> None:
    reads: list[tuple[float, str]] = []
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"])
    watch(process.pid, interval=0.05, machine=reads)
    process.wait()
    assert len(reads) >= 3 and all(line.startswith("cpu ") for _, line in reads)
    assert [t for t, _ in reads] == sorted(t for t, _ in reads)
    # The reads span the command's run (its half-second sleep), not only its start.
    assert machine_between(reads[0], reads[-1]).seconds >= 0.4
