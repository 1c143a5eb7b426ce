"""The Spark side asks its session whether kafkalake's JVM extension is loaded, once per session."""

from __future__ import annotations

from kafkalake.launch.jvm_extension import EXTENSION_CLASS
from kafkalake.launch.spark_conf import DELTA_EXTENSION, delta_settings
from kafkalake.spark import extension


class Conf:
    def __init__(self, extensions: str | None) -> None:
        self.extensions = extensions
        self.asked = 0

    def get(self, key: str, default: str | None = None) -> str | None:
        assert key == "spark.sql.extensions"
        self.asked += 1
        return default if self.extensions is None else self.extensions


class Session:
    """What ``loaded`` reads of a SparkSession: its settings."""

    def __init__(self, extensions: str | None) -> None:
        self.conf = Conf(extensions)


def test_the_session_s_extensions_decide_and_are_read_once_per_session():
    on = Session(delta_settings(extension=True)["spark.sql.extensions"])
    off = Session(delta_settings(extension=False)["spark.sql.extensions"])
    assert extension.loaded(on) is True
    assert extension.loaded(off) is False
    assert extension.loaded(Session(None)) is False
    assert extension.loaded(Session(f"{DELTA_EXTENSION}, {EXTENSION_CLASS}")) is True
    for _ in range(3):
        assert extension.loaded(on) is True
    assert on.conf.asked == 1


def test_an_explicit_choice_wins_over_the_session():
    off = Session(DELTA_EXTENSION)
    assert extension.resolve(True, off) is True
    assert extension.resolve(None, off) is False
    assert off.conf.asked == 1
