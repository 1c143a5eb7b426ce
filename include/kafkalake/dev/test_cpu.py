"""CPU-seconds per test: which tests the suite's time goes to (docs/benchmarks.md).

    KAFKALAKE_TEST_CPU_DIR=/tmp/test-cpu make test     # each worker writes DIR/<worker>.jsonl
    python -m kafkalake.dev.test_cpu /tmp/test-cpu     # the tests and modules that cost most

tests/conftest.py reads, around each test (its set-up, call and tear-down), the CPU-seconds of the
pytest process and every live process below it, with the children each has waited for
(:func:`~kafkalake.dev.process_tree.tree_cpu_s`): the worker's Spark session and job host, the
spark-submits and Airflow commands the test starts, the servers it starts. Not counted: processes
that left the tree (a daemon's double fork). Counted against the wrong test: what a process the
worker started does for another worker (the shared broker serves all four), and a module's shared
fixtures, whose set-up lands on its first test.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

#: Where each pytest worker writes a line per test; unset: nothing is measured.
ENV_TEST_CPU_DIR = "KAFKALAKE_TEST_CPU_DIR"


def record(folder: Path, worker: str, test: str, cpu_s: float, wall_s: float) -> None:
    # Made here, not by the caller: the first test to end may be in any process (make check's own).
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / f"{worker}.jsonl").open("a") as out:
        out.write(json.dumps({"test": test, "cpu_s": round(cpu_s, 2), "wall_s": round(wall_s, 2)}) + "\n")


def read(folder: Path) -> list[dict[str, Any]]:
    rows = []
    for path in sorted(folder.glob("*.jsonl")):
        rows += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return rows


def summary(rows: list[dict[str, Any]], top: int) -> str:
    by_module: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    for row in rows:
        module = by_module[row["test"].split("::", 1)[0]]
        module[0] += row["cpu_s"]
        module[1] += row["wall_s"]
        module[2] += 1
    total = sum(m[0] for m in by_module.values())
    lines = [f"{total:9.1f} CPU-s in {len(rows)} tests", "", "modules (CPU-s, wall s, tests):"]
    for name, (cpu, wall, count) in sorted(by_module.items(), key=lambda kv: -kv[1][0])[:top]:
        lines.append(f"{cpu:9.1f} {wall:8.1f} {int(count):5d}  {name}")
    lines += ["", "tests (CPU-s, wall s):"]
    for row in sorted(rows, key=lambda r: -r["cpu_s"])[:top]:
        lines.append(f"{row['cpu_s']:9.1f} {row['wall_s']:8.1f}  {row['test']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help=f"the folder {ENV_TEST_CPU_DIR} named")
    parser.add_argument("--top", type=int, default=40, help="how many modules and tests to list")
    args = parser.parse_args(argv)
    rows = read(args.folder)
    if not rows:
        print(f"no measurements in {args.folder}", file=sys.stderr)
        return 1
    print(summary(rows, args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
