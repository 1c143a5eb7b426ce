"""A topic's ``maintenance:`` block: OPTIMIZE cadence and layout, VACUUM retention, partitioning,
table properties.

Parsed once, with the catalog, into a frozen :class:`MaintenanceConfig`; every error is a
:class:`~kafkalake.core.errors.CatalogError` naming the file, the topic and the field
(``maintenance.<key>``). Pure: no Spark, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from kafkalake.config.parsed import ParsedConfig
from kafkalake.core.durations import format_duration, parse_duration
from kafkalake.core.errors import CatalogError

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
#: ``partition_by`` value for a date column Delta derives from each table's ingestion time.
INGESTION_DATE = "ingestion_date"
#: Catalog switches for Delta's write-time file sizing, and the table property each one sets.
SWITCHES = {
    "optimize_write": "delta.autoOptimize.optimizeWrite",
    "auto_compact": "delta.autoOptimize.autoCompact",
}
#: Parsed-table columns kafkalake writes itself (parsing.KAFKA_COLUMN, schemas.RESCUED_COLUMN).
_OWN_PARSED_COLUMNS = ("_kafka", "_rescued_data")

_KEYS = (
    "optimize_every",
    "zorder_by",
    "cluster_by",
    "vacuum_retain",
    "allow_vacuum_retain_below_7d",
    "partition_by",
    *SWITCHES,
    "properties",
)
_COLUMN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Delta's interval syntax for retention properties: "interval 30 days", "interval 12 hours".
_COMPLEX = re.compile(r"\s*(struct|array|map)\s*<", re.IGNORECASE)
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
    #: Table properties kept in step with the catalog, sorted by key (``optimize_write`` and
    #: ``auto_compact`` included, as the properties they stand for).
    properties: tuple[tuple[str, str], ...] = ()
    #: Partition column of new tables: :data:`INGESTION_DATE` (bronze, parsed, dead letters) or a
    #: column of the parsed table (that table only); None: unpartitioned.
    partition_by: str | None = None

    @property
    def layout_columns(self) -> tuple[str, ...]:
        return self.zorder_by or self.cluster_by

    @property
    def vacuum_every(self) -> timedelta:
        """VACUUM's cadence: OPTIMIZE's, or the default when OPTIMIZE never runs."""
        return self.optimize_every or DEFAULT_OPTIMIZE_EVERY


def interval_of(value: str) -> timedelta | None:
    """``interval 30 days`` → 30 days; None when Delta's spelling is not one this module reads.

    Raises:
        ValueError: when the interval is too long for a duration (``interval 99999999999 days``).
    """
    match = _INTERVAL.fullmatch(value)
    if match is None:
        return None
    amount, unit = int(match.group(1)), match.group(2).lower()
    try:
        return timedelta(**{unit + "s": amount})
    except OverflowError:
        raise ValueError(f"{value.strip()!r} is too long to be a duration") from None


def parse_maintenance(
    file: Path, topic: str, raw: Any, parsed: ParsedConfig | None = None
) -> MaintenanceConfig:
    """Validate a topic's ``maintenance`` mapping (None or absent: every default).

    ``parsed`` is the topic's parsed-table config: a ``partition_by`` column is checked against it.
    """

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
    properties = _with_switches(raw, properties, fail)
    partition_by = _partition_by(
        raw.get("partition_by"), parsed or ParsedConfig(), zorder_by, cluster_by, fail
    )
    return MaintenanceConfig(
        optimize_every=optimize_every,
        zorder_by=zorder_by,
        cluster_by=cluster_by,
        vacuum_retain=vacuum_retain,
        allow_vacuum_retain_below_7d=allow_below,
        properties=properties,
        partition_by=partition_by,
    )


def _with_switches(
    raw: Mapping[str, Any], properties: tuple[tuple[str, str], ...], fail: Fail
) -> tuple[tuple[str, str], ...]:
    """``optimize_write``/``auto_compact`` folded into the properties they set."""
    merged = dict(properties)
    for key, prop in SWITCHES.items():
        if key not in raw:
            continue
        if not isinstance(raw[key], bool):
            raise fail(key, f"must be true or false, not {raw[key]!r}")
        if prop in merged:
            raise fail(key, f"also set as properties.{prop}: keep one")
        merged[prop] = str(raw[key]).lower()
    return tuple(sorted(merged.items()))


def _partition_by(
    value: Any, parsed: ParsedConfig, zorder_by: tuple[str, ...], cluster_by: tuple[str, ...], fail: Fail
) -> str | None:
    """Checks what the catalog alone can tell; a column the inferred schema lacks fails the first run."""
    if value is None:
        return None
    key = "partition_by"
    if not isinstance(value, str) or not _COLUMN.fullmatch(value):
        raise fail(key, f"must be {INGESTION_DATE!r} or a column name of the parsed table, not {value!r}")
    if cluster_by:
        raise fail(key, "a table is either partitioned or liquid-clustered (cluster_by), not both; keep one")
    if value in zorder_by:
        raise fail(key, f"Z-ORDER cannot use a partition column: remove {value!r} from zorder_by")
    if value == INGESTION_DATE:
        if parsed.schema is not None and any(name == INGESTION_DATE for name, _ in parsed.schema):
            raise fail(
                key, f"parsed.schema has a field {INGESTION_DATE!r}, the name of the derived partition column"
            )
        return value
    if not parsed.enabled:
        raise fail(
            key,
            f"bronze can only be partitioned by {INGESTION_DATE!r}; a column name partitions the parsed "
            "table, and this topic has none (parsed: false)",
        )
    if value in _OWN_PARSED_COLUMNS:
        raise fail(key, f"{value!r} is a struct kafkalake writes; partition by {INGESTION_DATE!r} instead")
    if parsed.schema is not None:
        types = dict(parsed.schema)
        if value not in types:
            raise fail(key, f"the pinned parsed.schema has no field {value!r} (it has {', '.join(types)})")
        if _COMPLEX.match(types[value]):
            raise fail(key, f"{value!r} is a {types[value]}: Delta partitions by simple types only")
    return value


def _columns(raw: Mapping[str, Any], key: str, fail: Fail) -> tuple[str, ...]:
    # Only a missing (or null) list is empty: `zorder_by: false` is a mistake, not "no columns".
    value = [] if raw.get(key) is None else raw[key]
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
    for key, item in value.items():
        if item is None or isinstance(item, Mapping | list):
            # str() would set the property to "None" or "{'a': 1}".
            raise fail(
                f"properties.{key}", f"must be a single value (text, number, true/false), not {item!r}"
            )
    properties = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in value.items()}
    if APPEND_ONLY in properties:
        raise fail(
            f"properties.{APPEND_ONLY}",
            "kafkalake owns this property: bronze is append-only (delta.appendOnly=true) and the catalog "
            "can never turn that off; remove the key",
        )
    retention = properties.get(RETENTION_PROPERTY)
    if retention is not None:
        try:
            parsed = interval_of(retention)
        except ValueError as err:
            raise fail(f"properties.{RETENTION_PROPERTY}", str(err)) from None
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
