"""Installed versions, read once per process."""

from __future__ import annotations

from importlib import metadata

import pytest

from kafkalake.launch import installed


def test_a_version_is_the_installed_one_and_read_once(monkeypatch):
    installed.version.cache_clear()
    reads = []
    real = metadata.version
    monkeypatch.setattr(installed, "_version", lambda name: reads.append(name) or real(name))

    assert installed.version("pyspark") == real("pyspark")
    assert installed.version("pyspark") == real("pyspark")
    assert reads == ["pyspark"]
    installed.version.cache_clear()


def test_a_distribution_that_is_not_installed_is_refused_each_time():
    for _ in range(2):
        with pytest.raises(metadata.PackageNotFoundError):
            installed.version("no-such-distribution-kafkalake")
