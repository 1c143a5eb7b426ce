"""The per-test CPU record (dev/test_cpu): lines per worker, summed by module, the costliest first."""

from __future__ import annotations

from kafkalake.dev import test_cpu


def test_workers_lines_sum_by_module_and_the_costliest_test_comes_first(tmp_path):
    # The folder need not exist beforehand: make check's process records its tests first.
    tmp_path = tmp_path / "not-yet"
    test_cpu.record(tmp_path, "gw0", "tests/integration/test_a.py::test_one", 10.0, 12.0)
    test_cpu.record(tmp_path, "gw0", "tests/integration/test_a.py::test_two", 2.5, 3.0)
    test_cpu.record(tmp_path, "gw1", "tests/integration/test_b.py::test_big[x]", 30.0, 20.0)

    rows = test_cpu.read(tmp_path)
    assert len(rows) == 3
    lines = test_cpu.summary(rows, top=5).splitlines()
    assert lines[0] == "     42.5 CPU-s in 3 tests"
    modules = lines[lines.index("modules (CPU-s, wall s, tests):") + 1 :][:2]
    assert modules == [
        "     30.0     20.0     1  tests/integration/test_b.py",
        "     12.5     15.0     2  tests/integration/test_a.py",
    ]
    assert lines[lines.index("tests (CPU-s, wall s):") + 1].endswith("test_b.py::test_big[x]")


def test_an_empty_folder_is_an_error_not_a_silent_zero(tmp_path, capsys):
    assert test_cpu.main([str(tmp_path)]) == 1
    assert "no measurements" in capsys.readouterr().err
