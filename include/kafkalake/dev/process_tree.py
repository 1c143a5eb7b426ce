"""A process tree's CPU and peak memory from /proc, for the bench's measure of a ``spark-submit``
job: spark-submit, the driver JVM and the Python driver it starts. Any of them may end between two
reads."""

from __future__ import annotations

import os
import resource
from pathlib import Path


def children_cpu_s() -> float:
    """CPU-seconds of the children that ended and were waited for, with their own such children."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def stat_fields(pid: int) -> tuple[str, list[str]]:
    """The command name of a process and the fields after it in ``/proc/<pid>/stat`` (the state
    first, ``proc(5)``'s field 3).

    Raises:
        OSError: the process is gone.
    """
    stat = Path(f"/proc/{pid}/stat").read_text()
    # The command name may hold spaces and parentheses: the fields after it start past the last ')'.
    return stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :].split()


def children(pid: int) -> list[int]:
    # Any thread may have started a child (the JVM starts the Python driver from one of its own).
    # The process may end at any moment, between the listing and each read: it then has none.
    children: list[int] = []
    try:
        listings = list(Path(f"/proc/{pid}/task").glob("*/children"))
    except OSError:
        return children
    for listing in listings:
        try:
            children += [int(c) for c in listing.read_text().split()]
        except OSError:
            continue
    return children


def tree(pid: int) -> list[int]:
    pids, stack = [], [pid]
    while stack:
        current = stack.pop()
        pids.append(current)
        stack.extend(children(current))
    return pids


def peak_rss_mib(pid: int) -> tuple[str, float] | None:
    try:
        with open(f"/proc/{pid}/status") as src:
            status = dict(line.split(":", 1) for line in src if ":" in line)
        with open(f"/proc/{pid}/comm") as src:
            name = src.read().strip()
    except OSError:
        return None
    return name, int(status.get("VmHWM", "0 kB").split()[0]) / 1024


def tree_cpu_s(pid: int) -> float:
    """CPU-seconds so far of ``pid`` and the live processes below it, with the children each of
    them has waited for (a job host's forked jobs)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for member in tree(pid):
        try:
            fields = stat_fields(member)[1]
        except OSError:
            continue
        # proc(5): utime, stime, cutime, cstime are fields 14-17; the list starts at field 3.
        total += sum(int(f) for f in fields[11:15]) / tick
    return total
