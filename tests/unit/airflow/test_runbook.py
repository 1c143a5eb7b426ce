"""RUNBOOK.md has a section for every failure kind and every situation the code points on-call to."""

from __future__ import annotations

import re

import pytest

from kafkalake.airflow import runbook
from kafkalake.core.errors import Kind, failure
from kafkalake.core.paths import REPO_ROOT

TEXT = runbook.RUNBOOK_FILE.read_text()
HEADINGS = re.findall(r"^#{2,4} (.+?)\s*$", TEXT, flags=re.MULTILINE)


def test_the_runbook_is_at_the_repository_root():
    assert runbook.RUNBOOK_FILE == REPO_ROOT / "RUNBOOK.md"


@pytest.mark.parametrize("kind", list(Kind), ids=str)
def test_every_failure_kind_has_a_section_named_after_it(kind):
    """Adding a kind without a runbook section fails here."""
    assert str(kind) in HEADINGS, f"RUNBOOK.md has no section '### {kind}'"
    section = TEXT.split(f"### {kind}\n", 1)[1].split("\n#", 1)[0]
    retry = "Non-retryable" if failure(kind, "x").retryable is False else "Transient"
    assert section.lstrip().startswith(f"**{retry}.**"), f"section {kind} should start with **{retry}.**"


@pytest.mark.parametrize("section", runbook.OTHER_SECTIONS)
def test_every_other_situation_has_a_section(section):
    assert section in HEADINGS


def test_links_inside_the_runbook_reach_a_heading():
    anchors = {runbook.anchor(heading) for heading in HEADINGS}
    links = re.findall(r"\]\(#([^)]+)\)", TEXT)
    assert links, "expected cross-references between sections"
    assert sorted(set(links) - anchors) == []


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("offsets_expired", "offsets_expired"),
        ("Table missing from the metastore", "table-missing-from-the-metastore"),
        ("Pool starvation", "pool-starvation"),
    ],
)
def test_anchor_is_the_one_github_gives(heading, anchor):
    assert runbook.anchor(heading) == anchor


@pytest.mark.parametrize("kind", list(Kind), ids=str)
def test_every_on_call_message_names_its_section(kind):
    assert failure(kind, "x").message.endswith(f"See RUNBOOK.md, section {kind}.")


def test_doc_without_a_url_names_the_file_and_the_sections(monkeypatch):
    monkeypatch.delenv(runbook.ENV_RUNBOOK_URL, raising=False)
    doc = runbook.doc_md()
    assert "`RUNBOOK.md` at the root of the kafkalake repository" in doc
    assert "](" not in doc, "a relative link would resolve against the Airflow UI's address"
    for section in [*map(str, Kind), *runbook.OTHER_SECTIONS]:
        assert f"`{section}`" in doc


def test_doc_with_a_url_links_every_section(monkeypatch):
    url = "https://git.example.com/data/kafkalake/blob/main/RUNBOOK.md"
    monkeypatch.setenv(runbook.ENV_RUNBOOK_URL, url)
    doc = runbook.doc_md()
    assert f"[RUNBOOK.md]({url})" in doc
    assert f"[offsets_expired]({url}#offsets_expired)" in doc
    assert f"[Stuck run]({url}#stuck-run)" in doc


def test_readme_failures_section_points_to_the_runbook():
    readme = (REPO_ROOT / "README.md").read_text()
    section = readme.split("## Failures and what to do", 1)[1].split("\n## ", 1)[0]
    assert "[RUNBOOK.md](RUNBOOK.md)" in section
