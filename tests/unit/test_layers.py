"""dags/ and jobs/ keep to the package's layers (the package itself is checked by lint-imports).

dags/ imports only the Airflow layer and what is below it; jobs/ only the Spark layer and below.
Neither imports the other side, nor kafkalake.dev or kafkalake.cli.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BELOW = ("kafkalake.kafka", "kafkalake.launch", "kafkalake.lake", "kafkalake.config", "kafkalake.core")
ALLOWED = {
    "dags": ("kafkalake.airflow", *BELOW),
    "jobs": ("kafkalake.spark", *BELOW),
}


def kafkalake_imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
            found += [
                (node.lineno, name) for name in (names if node.module == "kafkalake" else [node.module])
            ]
    return [(line, name) for line, name in found if name == "kafkalake" or name.startswith("kafkalake.")]


def breaks(folder: str, name: str) -> bool:
    return not any(name == allowed or name.startswith(allowed + ".") for allowed in ALLOWED[folder])


@pytest.mark.parametrize("folder", sorted(ALLOWED))
def test_entry_points_import_only_their_side_and_below(folder):
    files = sorted((REPO / folder).glob("*.py"))
    assert files, f"no Python files in {folder}/"
    broken = [
        f"{path.relative_to(REPO)}:{line}: {name}"
        for path in files
        for line, name in kafkalake_imports(path)
        if breaks(folder, name)
    ]
    assert not broken, f"{folder}/ may import only {', '.join(ALLOWED[folder])}:\n" + "\n".join(broken)


def test_the_check_catches_an_import_across_the_line(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from kafkalake.spark.stream import start_ingest\nfrom kafkalake import dev\n")
    names = [name for _line, name in kafkalake_imports(bad)]
    assert names == ["kafkalake.spark.stream", "kafkalake.dev"]
    assert breaks("dags", "kafkalake.spark.stream")
    assert breaks("jobs", "kafkalake.dev")
    assert not breaks("jobs", "kafkalake.spark.stream")
