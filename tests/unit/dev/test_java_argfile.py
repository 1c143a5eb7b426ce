"""Arguments handed to java through an @-file arrive exactly as given, and the file is gone after."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from kafkalake.dev.processes import run_java_quietly

pytestmark = pytest.mark.skipif(shutil.which("java") is None, reason="needs a JDK")

_ECHO = """
public class Echo {
    public static void main(String[] args) {
        for (String a : args) System.out.print("<" + a + ">");
        // The JVM options in the file reach the JVM, not the program.
        System.out.print(java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments()
            .contains("-Xshare:off"));
    }
}
"""


def test_odd_arguments_arrive_verbatim_and_leave_no_file(tmp_path: Path) -> None:
    source = tmp_path / "Echo.java"
    source.write_text(_ECHO)
    odd = [
        'SCRAM-SHA-512=[name=admin,password=p w"q\\r#s]',
        "back\\\\slashes\\",
        "tab\there",
        "line\nbreak",
        "",
        "'single' @at ünïcode",
    ]
    done = run_java_quietly(shutil.which("java") or "java", ["-Xshare:off", str(source), *odd], tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "".join(f"<{a}>" for a in odd) + "true"
    assert sorted(os.listdir(tmp_path)) == ["Echo.java"]


def test_the_argument_file_goes_even_when_java_fails(tmp_path: Path) -> None:
    done = run_java_quietly(
        shutil.which("java") or "java", ["-cp", str(tmp_path), "NoSuchClass", "secret"], tmp_path
    )
    assert done.returncode != 0
    assert "secret" not in done.stderr
    assert os.listdir(tmp_path) == []
