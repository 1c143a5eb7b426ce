"""Durations written the way people write them in config (``90s``, ``15m``, ``6h``, ``1d``,
``1h30m``), and the ISO 8601 timestamps people give on a command line or in a DAG param."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
_PART = re.compile(r"(\d+)([smhdw])")
_WHOLE = re.compile(r"(?:\d+[smhdw])+")


def parse_duration(text: str) -> timedelta:
    """Parse ``1h30m``-style text; raise ``ValueError`` saying what is accepted."""
    compact = text.strip().lower().replace(" ", "")
    if not _WHOLE.fullmatch(compact):
        raise ValueError(
            f"{text!r} is not a duration: write a number and a unit, e.g. 15m, 6h, 1d or 1h30m "
            "(units: s, m, h, d, w)"
        )
    total = timedelta()
    try:
        for amount, unit in _PART.findall(compact):
            total += timedelta(**{_UNITS[unit]: int(amount)})
    except OverflowError:
        raise ValueError(f"{text!r} is too long to be a duration") from None
    if total <= timedelta(0):
        raise ValueError(f"{text!r} must be longer than zero")
    return total


def format_duration(value: timedelta) -> str:
    """The shortest ``1h30m``-style spelling of a whole number of seconds."""
    seconds = int(value.total_seconds())
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size:
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
    return "".join(parts) or "0s"


def parse_timestamp(text: str) -> datetime:
    """An ISO 8601 timestamp, timezone-aware: one that names no zone is UTC.

    Raises ``ValueError`` when the text is not ISO 8601; the caller says which setting it was.
    """
    value = datetime.fromisoformat(text.strip())
    return value if value.tzinfo else value.replace(tzinfo=UTC)
