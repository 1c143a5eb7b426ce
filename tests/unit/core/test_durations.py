"""parse_duration / format_duration: the ``1h30m`` spelling used for SLAs in the catalog."""

from __future__ import annotations

from datetime import timedelta

import pytest

from kafkalake.core.durations import format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("15m", timedelta(minutes=15)),
        ("1h", timedelta(hours=1)),
        ("6h", timedelta(hours=6)),
        ("1d", timedelta(days=1)),
        ("1w", timedelta(weeks=1)),
        ("90s", timedelta(seconds=90)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("1d2h3m4s", timedelta(days=1, hours=2, minutes=3, seconds=4)),
        # Spaces anywhere and upper-case units are accepted.
        ("2 h", timedelta(hours=2)),
        ("1h 30m", timedelta(hours=1, minutes=30)),
        ("  45m  ", timedelta(minutes=45)),
        ("6H", timedelta(hours=6)),
        # A zero part is fine as long as the total is positive.
        ("0h5m", timedelta(minutes=5)),
    ],
)
def test_parse_accepts(text, expected):
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "   ", "6", "h", "-1h", "1.5h", "6x", "1h30", "h1", "1 hour", "PT1H"])
def test_parse_rejects_with_a_message_saying_what_is_accepted(text):
    with pytest.raises(ValueError) as excinfo:
        parse_duration(text)
    message = str(excinfo.value)
    assert repr(text) in message
    # The message teaches the syntax: examples and the list of units.
    assert "15m" in message
    assert "1h30m" in message
    assert "units: s, m, h, d, w" in message


@pytest.mark.parametrize("text", ["0m", "0s", "0h0m"])
def test_parse_rejects_zero(text):
    with pytest.raises(ValueError, match="longer than zero") as excinfo:
        parse_duration(text)
    assert repr(text) in str(excinfo.value)


def test_parse_rejects_an_absurdly_large_amount_with_value_error():
    with pytest.raises(ValueError):
        parse_duration("99999999999d")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (timedelta(minutes=15), "15m"),
        (timedelta(hours=1, minutes=30), "1h30m"),
        (timedelta(days=1), "1d"),
        (timedelta(days=2, seconds=1), "2d1s"),
        (timedelta(seconds=90), "1m30s"),
        (timedelta(weeks=2), "14d"),
        (timedelta(0), "0s"),
    ],
)
def test_format(value, expected):
    assert format_duration(value) == expected


def test_format_drops_fractions_of_a_second():
    assert format_duration(timedelta(seconds=90, milliseconds=700)) == "1m30s"


@pytest.mark.parametrize(
    "value",
    [
        timedelta(seconds=1),
        timedelta(seconds=59),
        timedelta(minutes=20),
        timedelta(hours=2),
        timedelta(hours=1, seconds=1),
        timedelta(days=3, hours=23, minutes=59, seconds=59),
        timedelta(weeks=1),
    ],
)
def test_format_then_parse_round_trips(value):
    assert parse_duration(format_duration(value)) == value


@pytest.mark.parametrize(
    ("text", "canonical"),
    [("90s", "1m30s"), ("60m", "1h"), ("1w", "7d"), ("1h 30m", "1h30m"), ("24h", "1d")],
)
def test_parse_then_format_gives_the_canonical_spelling(text, canonical):
    assert format_duration(parse_duration(text)) == canonical
    assert parse_duration(canonical) == parse_duration(text)
