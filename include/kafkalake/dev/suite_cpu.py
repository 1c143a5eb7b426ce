"""Where a command's CPU goes, by kind of process: for the test suite's time (docs/benchmarks.md).

    python -m kafkalake.dev.suite_cpu --out cpu.json -- make test

runs the command and reads /proc twice a second: every process below it, its kind from its command
line (a job's Spark driver JVM by job, the tests' in-process Spark sessions, the broker, Airflow by
command, pytest's workers, ...), and its CPU-seconds so far. A process that execs another program
keeps its pid (spark-submit is a bash script that execs java): its kind is read again whenever its
command name changes, and the CPU goes to the kind it had last. What a process spends after the
last read before it ends (under half a second's worth) is not counted; the total printed beside
the command's own (``resource``) says how much that was.

It also reads the machine's busy time (/proc/stat) over the command, and each minute's: the cores
busy on average. Near all of them busy all along, the suite's time is its work at the machine's
speed, and only less work shortens it; minutes with idle cores are waits no other test filled.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TypedDict

from kafkalake.dev.process_tree import children_cpu_s, stat_fields

#: Seconds between two reads of /proc.
INTERVAL = 0.5
_TICK = os.sysconf("SC_CLK_TCK")
_JOB = re.compile(r"jobs/(\w+)\.py")
#: (what a JVM's command line holds, its kind), first match wins.
_JVMS = (
    ("kafka.Kafka", "broker"),
    ("StorageTool", "broker (format)"),
    ("ConnectStandalone", "kafka connect"),
    ("ConnectDistributed", "kafka connect"),
    ("HiveMetaStore", "hive metastore"),
    ("s3proxy", "s3proxy"),
    ("quarkus", "schema registry"),
    ("apicurio", "schema registry"),
    ("scala.tools.nsc", "scalac"),
    ("deploy.master.Master", "spark master"),
    ("deploy.worker.Worker", "spark worker"),
    ("CoarseGrainedExecutorBackend", "spark executor"),
)
_AIRFLOW = ("dags test", "standalone", "scheduler", "api-server", "api_server", "triggerer", "dag-processor",
            "worker", "db migrate", "dags reserialize", "forkserver")  # fmt: skip


def kind_of(command: str, name: str) -> str:
    """The kind of a process from its command line (arguments joined by spaces) and command name."""
    program = command.split(" ", 1)[0]
    if name == "java" or program.endswith("/java"):
        if "SparkSubmit" in command:
            job = _JOB.search(command)
            return f"spark driver JVM: {job.group(1)}" if job else "spark session JVM (tests)"
        return "JVM: " + next((kind for key, kind in _JVMS if key in command), "other")
    if name.startswith("postgres") or program.endswith("/postgres"):
        return "postgresql"
    if "chrom" in name or "chrom" in program:
        return "chromium"
    # Airflow's components retitle themselves ("airflow api_server -- ..."): no python in sight.
    if "python" in name or "python" in program or program.endswith("airflow") or name.startswith("airflow"):
        job = _JOB.search(command)
        if job:
            return f"job's python driver: {job.group(1)}"
        if "pyspark.daemon" in command or "pyspark/daemon" in command:
            return "pyspark python workers"
        if "airflow" in command:
            return "airflow: " + next((sub for sub in _AIRFLOW if sub in command), "other").replace("_", "-")
        if "pytest" in command or "xdist" in command or "execnet" in command:
            return "pytest"
        return "python: other"
    return f"other: {name}"


@dataclass
class _Seen:
    name: str
    kind: str
    #: CPU ticks it spent as each kind it was before its last exec.
    before: dict[str, int] = field(default_factory=dict)
    #: Its CPU ticks at its last exec, and at the last read.
    base: int = 0
    ticks: int = 0
    #: The test module it was started for, or that the program it became was ("" outside any test).
    module: str = ""

    def by_kind(self) -> dict[str, int]:
        spent = dict(self.before)
        spent[self.kind] = spent.get(self.kind, 0) + self.ticks - self.base
        return spent


def _stat(pid: int) -> tuple[str, int, int, str] | None:
    """(command name, parent pid, CPU ticks, start time) of a process; None once it is gone or has
    ended and waits to be reaped (a zombie: its CPU is all counted)."""
    try:
        name, rest = stat_fields(pid)
    except OSError:
        return None
    if rest[0] in ("Z", "X"):
        return None
    return name, int(rest[1]), int(rest[11]) + int(rest[12]), rest[19]


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _test_module(pid: int) -> str:
    """The test module in ``PYTEST_CURRENT_TEST`` of a process's environment at its start, or ""."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return ""
    for entry in environ.split(b"\0"):
        if entry.startswith(b"PYTEST_CURRENT_TEST="):
            return entry.split(b"=", 1)[1].decode(errors="replace").split("::", 1)[0]
    return ""


def busy_ticks(line: str) -> int:
    """The busy CPU ticks of every core so far, from /proc/stat's ``cpu`` line: all but idle and I/O
    wait. Guest time is inside user time already, so only the first eight fields count."""
    fields = [int(f) for f in line.split()[1:9]]
    return sum(fields) - fields[3] - fields[4]


def _read_machine() -> str:
    with open("/proc/stat") as stat:
        return stat.readline()


@dataclass
class Machine:
    """The machine's busy CPU between two reads of /proc/stat."""

    seconds: float
    cpu_s: float
    #: Cores busy on average: cpu_s / seconds.
    cores_busy: float


def machine_between(first: tuple[float, str], last: tuple[float, str]) -> Machine:
    """What the machine did between two (monotonic time, /proc/stat line) reads."""
    (start, before), (end, after) = first, last
    busy = busy_ticks(after) - busy_ticks(before)
    seconds = max(end - start, 1e-9)
    return Machine(round(end - start, 1), round(busy / _TICK, 1), round(busy / _TICK / seconds, 2))


def per_minute(reads: list[tuple[float, str]], minute: float = 60.0) -> list[float]:
    """Cores busy in each whole minute of ``reads`` (monotonic time, /proc/stat line), in order;
    the last part-minute is left out."""
    if not reads:
        return []
    busy: list[float] = []
    start = reads[0]
    for read in reads[1:]:
        if read[0] - start[0] >= minute:
            busy.append(machine_between(start, read).cores_busy)
            start = read
    return busy


def watch(
    root: int, interval: float = INTERVAL, machine: list[tuple[float, str]] | None = None
) -> list[_Seen]:
    """Every process below ``root`` (itself included) with the CPU it spent, read until ``root``
    ends; ``machine`` gets a (monotonic time, /proc/stat line) read at each round."""
    seen: dict[tuple[int, str], _Seen] = {}
    tree = {root}
    while _stat(root) is not None:
        if machine is not None:
            machine.append((time.monotonic(), _read_machine()))
        live = {root}
        for entry in sorted(int(p) for p in os.listdir("/proc") if p.isdigit()):
            stat = _stat(entry)
            if stat is None:
                continue
            name, parent, ticks, start = stat
            process = seen.get((entry, start))
            if process is None:
                if entry != root and parent not in tree and parent not in live:
                    continue
                process = seen[(entry, start)] = _Seen(
                    name, kind_of(_command(entry), name), module=_test_module(entry)
                )
            elif name != process.name:
                # An exec: what it spent so far stays with the kind it was; the rest goes to the new one.
                process.before = process.by_kind()
                process.base = process.ticks
                process.name, process.kind = name, kind_of(_command(entry), name)
                # The program it became may have been handed a test its starter did not have
                # (`env PYTEST_CURRENT_TEST=... python ...`, first seen as `env`): the process is that test's.
                process.module = _test_module(entry) or process.module
            process.ticks = ticks
            live.add(entry)
        tree = live
        time.sleep(interval)
    return list(seen.values())


def by_kind(processes: list[_Seen]) -> dict[str, dict[str, float]]:
    """CPU-seconds and process counts by kind, the most CPU first."""
    totals: dict[str, dict[str, float]] = {}
    for process in processes:
        for kind, ticks in process.by_kind().items():
            total = totals.setdefault(kind, {"cpu_s": 0.0, "processes": 0})
            total["cpu_s"] += ticks / _TICK
            total["processes"] += 1
    return dict(sorted(totals.items(), key=lambda kv: -kv[1]["cpu_s"]))


def cpu_total(kinds: dict[str, dict[str, float]]) -> float:
    """The CPU-seconds of :func:`by_kind`'s figures, all kinds together."""
    return sum(total["cpu_s"] for total in kinds.values())


class ModuleCpu(TypedDict):
    cpu_s: float
    kinds: dict[str, dict[str, float]]


def by_module(processes: list[_Seen]) -> dict[str, ModuleCpu]:
    """CPU-seconds by test module ("" outside any test), each with its CPU by kind; the most first."""
    modules: dict[str, list[_Seen]] = {}
    for process in processes:
        modules.setdefault(process.module, []).append(process)
    totals: dict[str, ModuleCpu] = {}
    for module, members in modules.items():
        kinds = by_kind(members)
        totals[module] = {"cpu_s": round(cpu_total(kinds), 1), "kinds": kinds}
    return dict(sorted(totals.items(), key=lambda kv: -kv[1]["cpu_s"]))


def sample(root: int, interval: float = INTERVAL) -> dict[str, dict[str, float]]:
    """CPU-seconds and process counts by kind of everything below ``root`` (itself included),
    read until ``root`` ends."""
    return by_kind(watch(root, interval))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="the JSON: CPU by kind and by test module")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --")
    reads = [(time.monotonic(), _read_machine())]
    process = subprocess.Popen(command)
    processes = watch(process.pid, machine=reads)
    code = process.wait()
    reads.append((time.monotonic(), _read_machine()))
    machine, minutes = machine_between(reads[0], reads[-1]), per_minute(reads)
    totals, modules = by_kind(processes), by_module(processes)
    counted = cpu_total(totals)
    whole = {"kinds": totals, "modules": modules, "machine": {**asdict(machine), "per_minute": minutes}}
    args.out.write_text(json.dumps(whole, indent=1) + "\n")
    for kind, total in totals.items():
        print(f"{total['cpu_s']:9.1f} CPU-s  {int(total['processes']):5d}  {kind}")
    print("by test module:")
    for module, figures in modules.items():
        print(f"{figures['cpu_s']:9.1f} CPU-s  {module or '(outside any test)'}")
    print(f"{counted:9.1f} CPU-s counted of {children_cpu_s():.1f} the command's tree spent (exit {code})")
    print(
        f"machine: {machine.cpu_s:.1f} CPU-s busy in {machine.seconds:.0f} s, {machine.cores_busy:.2f} of "
        f"{os.cpu_count()} cores on average; each minute: {' '.join(f'{m:.2f}' for m in minutes)}"
    )
    return code


if __name__ == "__main__":
    sys.exit(main())
