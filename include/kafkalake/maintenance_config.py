"""A topic's ``maintenance:`` block: OPTIMIZE cadence and layout, VACUUM retention, table properties.

Parsed once, with the catalog, into a frozen :class:`MaintenanceConfig`; every error is a
:class:`~kafkalake.catalog.CatalogError` naming the file, the topic and the field
(``maintenance.<key>``). Pure: no Spark, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from kafkalake.durations import format_duration, parse_duration

#: Builds the CatalogError of one key of the block.
Fail = Callable[[str | None, str], Exception]

FIELD = "maintenance"
#: Delta's own VACUUM guard (``delta.deletedFileRetentionDuration``'s default): readers and
#: streams still using older versions may need files this young.
DELTA_MIN_RETENTION = timedelta(days=7)
DEFAULT_OPTIMIZE_EVERY = timedelta(days=1)
NEVER = "never"
#: The property kafkalake sets on bronze and keeps: bronze only ever grows.
APPEND_ONLY = "delta.appendOnly"
RETENTION_PROPERTY = "delta.deletedFileRetentionDuration"

_KEYS = (
    "optimize_every",
    "zorder_by",
    "cluster_by",
    "vacuum_retain",
    "allow_vacuum_retain_below_7d",
    "properties",
)
_COLUMN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Delta's interval syntax for retention properties: "interval 30 days", "interval 12 hours".
_INTERVAL = re.compile(r"\s*interval\s+(\d+)\s+(week|day|hour|minute|second)s?\s*", re.IGNORECASE)


@dataclass(frozen=True)
class MaintenanceConfig:
    """How kafkalake looks after a topic's tables."""

    #: How often OPTIMIZE runs; None: never. VACUUM and property changes follow the same cadence.
    optimize_every: timedelta | None = DEFAULT_OPTIMIZE_EVERY
    #: Z-ORDER columns of OPTIMIZE (empty: plain bin-packing).
    zorder_by: tuple[str, ...] = ()
    #: Liquid-clustering columns (exclusive with ``zorder_by``).
    cluster_by: tuple[str, ...] = ()
    vacuum_retain: timedelta = DELTA_MIN_RETENTION
    allow_vacuum_retain_below_7d: bool = False
    #: Table properties kept in step with the catalog, sorted by key.
    properties: tuple[tuple[str, str], ...] = ()

    @property
    def layout_columns(self) -> tuple[str, ...]:
        return self.zorder_by or self.cluster_by

    @property
    def vacuum_every(self) -> timedelta:
        """VACUUM's cadence: OPTIMIZE's, or the default when OPTIMIZE never runs."""
        return self.optimize_every or DEFAULT_OPTIMIZE_EVERY


def interval_of(value: str) -> timedelta | None:
    """``interval 30 days`` → 30 days; None when Delta's spelling is not one this module reads."""
    match = _INTERVAL.fullmatch(value)
    if match is None:
        return None
    amount, unit = int(match.group(1)), match.group(2).lower()
    return timedelta(**{unit + "s": amount})


def parse_maintenance(file: Path, topic: str, raw: Any) -> MaintenanceConfig:
    """Validate a topic's ``maintenance`` mapping (None or absent: every default)."""
    from kafkalake.catalog import CatalogError

    def fail(key: str | None, message: str) -> CatalogError:
        return CatalogError(file, message, topic, f"{FIELD}.{key}" if key else FIELD)

    if raw is None:
        return MaintenanceConfig()
    if not isinstance(raw, Mapping):
        raise fail(None, f"must be a mapping with keys among {list(_KEYS)}")
    unknown = sorted(str(k) for k in raw if k not in _KEYS)
    if unknown:
        raise fail(unknown[0], f"unknown key; allowed: {list(_KEYS)}")

    optimize_every: timedelta | None = DEFAULT_OPTIMIZE_EVERY
    if "optimize_every" in raw:
        text = str(raw["optimize_every"])
        try:
            optimize_every = None if text.strip().lower() == NEVER else parse_duration(text)
        except ValueError as err:
            raise fail("optimize_every", f"{err}, or {NEVER!r}") from None

    zorder_by = _columns(raw, "zorder_by", fail)
    cluster_by = _columns(raw, "cluster_by", fail)
    if zorder_by and cluster_by:
        raise fail(
            "cluster_by",
            "zorder_by and cluster_by are mutually exclusive: Z-ORDER rewrites files by columns, liquid "
            "clustering replaces it; keep one",
        )

    allow_below = raw.get("allow_vacuum_retain_below_7d", False)
    if not isinstance(allow_below, bool):
        raise fail("allow_vacuum_retain_below_7d", "must be true or false")
    vacuum_retain = DELTA_MIN_RETENTION
    if "vacuum_retain" in raw:
        text = str(raw["vacuum_retain"])
        try:
            vacuum_retain = timedelta(0) if text.strip() in {"0", "0h", "0d"} else parse_duration(text)
        except ValueError as err:
            raise fail("vacuum_retain", str(err)) from None
    if vacuum_retain < DELTA_MIN_RETENTION and not allow_below:
        raise fail(
            "vacuum_retain",
            f"{format_duration(vacuum_retain)} is below Delta's 7-day guard: VACUUM could delete files "
            "that running readers and streams still need. Set allow_vacuum_retain_below_7d: true to "
            "accept that",
        )

    properties = _properties(raw.get("properties"), allow_below, fail)
    return MaintenanceConfig(
        optimize_every=optimize_every,
        zorder_by=zorder_by,
        cluster_by=cluster_by,
        vacuum_retain=vacuum_retain,
        allow_vacuum_retain_below_7d=allow_below,
        properties=properties,
    )


def _columns(raw: Mapping[str, Any], key: str, fail: Fail) -> tuple[str, ...]:
    value = raw.get(key) or []
    if not isinstance(value, list) or not all(isinstance(c, str) and _COLUMN.fullmatch(c) for c in value):
        raise fail(key, f"must be a list of column names, not {value!r}")
    if len(set(value)) != len(value):
        raise fail(key, f"lists a column twice: {value!r}")
    return tuple(value)


def _properties(value: Any, allow_below: bool, fail: Fail) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and k for k in value):
        raise fail("properties", "must map table property names to values")
    properties = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in value.items()}
    if APPEND_ONLY in properties:
        raise fail(
            f"properties.{APPEND_ONLY}",
            "kafkalake owns this property: bronze is append-only (delta.appendOnly=true) and the catalog "
            "can never turn that off; remove the key",
        )
    retention = properties.get(RETENTION_PROPERTY)
    if retention is not None:
        parsed = interval_of(retention)
        if parsed is None:
            raise fail(
                f"properties.{RETENTION_PROPERTY}", f"write it as 'interval 7 days', not {retention!r}"
            )
        if parsed < DELTA_MIN_RETENTION and not allow_below:
            raise fail(
                f"properties.{RETENTION_PROPERTY}",
                f"{retention!r} lowers Delta's 7-day VACUUM guard; set allow_vacuum_retain_below_7d: true "
                "to accept that",
            )
    return tuple(sorted(properties.items()))
