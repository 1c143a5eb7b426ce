"""The schema of a sample of JSON objects, decided by most of the sample: pure, no JVM.

Spark's JSON inference widens a field to ``string`` as soon as one sampled record disagrees, so one
``{"id": "not-a-number"}`` among thousands of numeric ids made ``id`` a string for the whole table.
Here each field's type is the kind most of its non-null values have, and the values of other kinds
are left to the parser, which keeps them in ``_rescued_data`` (never a silent null):

* kinds are boolean, number, string, object and array. Numbers are ``bigint`` when every sampled
  one is whole and fits 64 bits, ``decimal(38,0)`` for whole numbers beyond that, else ``double``
  (JSON writers drop the ``.0`` of whole doubles, so ``12`` and ``12.5`` are one kind). A tie goes to
  ``string``, which keeps any value's JSON text;
* a field seen only as null or ``{}`` is a ``string`` (its JSON text): Parquet cannot store an empty
  struct, and nothing is known of its type yet; an array seen only empty is ``array<string>``;
* **depth**: an object or array nested deeper than ``max_depth`` levels in its column becomes a
  ``string`` holding its JSON text, so no record can make a schema other engines cannot open
  (delta-rs refuses one nested ~42 structs deep);
* **width**: at most ``max_columns`` fields in all, at every depth; fields are taken level by level,
  the most frequent first, and the rest stay in ``_rescued_data``;
* **names**: any JSON key is a field (its column is
  :func:`~kafkalake.lake.schema_algebra.column_name` of it), except the twins of a key whose
  column would be the same (``Name`` beside ``name``, ``first name`` beside ``first_name``; Spark and
  Delta resolve names regardless of case): the most frequent is the field and the others are
  rescued. Top-level keys whose column the table keeps for its own (``_rescued_data``,
  ``_kafka*``) are rescued too, as are keys holding a lone surrogate escape (``"\\ud800"``), which
  no UTF-8 can carry to Spark.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kafkalake.config.parsed import clash_key
from kafkalake.lake.schema_algebra import Schema, is_reserved, is_unicode

_INT64 = (-(2**63), 2**63 - 1)
_DECIMAL_DIGITS = 38
#: Tie-break between kinds seen equally often: the first keeps the most.
_TIE_ORDER = ("string", "object", "array", "number", "boolean")


@dataclass(frozen=True)
class Limits:
    max_depth: int = 10
    max_columns: int = 500


@dataclass
class _Node:
    """What the sample holds at one field path."""

    kinds: Counter[str] = field(default_factory=Counter)
    #: Numbers: any with a fraction or an exponent; any whole one beyond 64 bits; any beyond 38 digits.
    fractional: bool = False
    big: bool = False
    huge: bool = False
    #: Object fields by name, in the order first seen; array elements.
    fields: dict[str, _Node] = field(default_factory=dict)
    element: _Node | None = None
    #: Objects or arrays seen here at the depth limit: the field is kept as JSON text.
    cut: bool = False

    def observe(self, value: Any, depth: int, limits: Limits) -> None:
        """Count ``value``, which sits ``depth`` objects or arrays deep in its column."""
        if value is None:
            self.kinds["null"] += 1
        elif isinstance(value, bool):
            self.kinds["boolean"] += 1
        elif isinstance(value, int):
            self.kinds["number"] += 1
            if not _INT64[0] <= value <= _INT64[1]:
                self.big = True
                self.huge = self.huge or len(str(abs(value))) > _DECIMAL_DIGITS
        elif isinstance(value, float):
            self.kinds["number"] += 1
            self.fractional = True
        elif isinstance(value, str):
            self.kinds["string"] += 1
        elif isinstance(value, dict):
            self.kinds["object"] += 1
            if depth >= limits.max_depth:
                self.cut = True
                return
            self.observe_fields(value, depth + 1, limits)
        elif isinstance(value, list):
            self.kinds["array"] += 1
            if depth >= limits.max_depth:
                self.cut = True
                return
            if self.element is None:
                self.element = _Node()
            for inner in value:
                self.element.observe(inner, depth + 1, limits)

    def observe_fields(self, document: dict[str, Any], depth: int, limits: Limits) -> None:
        for name, inner in document.items():
            node = self.fields.get(name)
            if node is None:
                node = self.fields[name] = _Node()
            node.observe(inner, depth, limits)

    @property
    def seen(self) -> int:
        return sum(self.kinds.values())

    def kind(self) -> str | None:
        """The kind most non-null values have (ties: :data:`_TIE_ORDER`); None if only nulls."""
        counts = {k: n for k, n in self.kinds.items() if k != "null"}
        if not counts:
            return None
        return max(_TIE_ORDER, key=lambda k: (counts.get(k, 0), -_TIE_ORDER.index(k)))


def infer(texts: Iterable[str], limits: Limits | None = None) -> Schema:
    """The schema of the JSON objects among ``texts`` (others, and unreadable ones, are skipped)."""
    limits = limits or Limits()
    root = _Node()
    for text in texts:
        try:
            document = json.loads(text)
        except (ValueError, RecursionError):
            # Too deep for Python's parser, or not JSON: the parser sorts such records out.
            continue
        if isinstance(document, dict):
            # A top-level field's value is 0 levels deep in its column.
            root.observe_fields(document, 0, limits)
    return {"type": "struct", "fields": _struct_fields(root, limits, top=True)}


def _struct_fields(root: _Node, limits: Limits, *, top: bool) -> list[dict[str, Any]]:
    """The fields of ``root`` (an object node), within the width budget, level by level."""
    budget = [limits.max_columns]
    admitted = _admit(root, top, budget)
    # Breadth first: every level is admitted before the next, so a wide nested struct cannot take
    # the budget from the top-level fields.
    queue: list[tuple[_Node, list[tuple[str, _Node]]]] = [(root, admitted)]
    chosen: dict[int, list[tuple[str, _Node]]] = {id(root): admitted}
    while queue:
        next_queue = []
        for _parent, children in queue:
            for _name, child in children:
                for holder in _object_holders(child):
                    picked = _admit(holder, False, budget)
                    chosen[id(holder)] = picked
                    next_queue.append((holder, picked))
        queue = next_queue
    return [_field(name, node, chosen) for name, node in admitted]


def _object_holders(node: _Node) -> list[_Node]:
    """The nodes under ``node`` whose fields become struct fields: itself, or its array elements'."""
    while node.kind() == "array" and not node.cut and node.element is not None:
        node = node.element
    if node.kind() == "object" and not node.cut and node.fields:
        return [node]
    return []


def _admit(node: _Node, top: bool, budget: list[int]) -> list[tuple[str, _Node]]:
    """The fields of an object node that become columns: one per column name, within the budget."""
    by_case: dict[str, tuple[str, _Node]] = {}
    for name, child in node.fields.items():
        # A key with a lone surrogate escape can never reach Spark as a name: its values are rescued.
        if (top and is_reserved(name)) or not is_unicode(name):
            continue
        key = clash_key(name)
        held = by_case.get(key)
        if held is None or child.seen > held[1].seen:
            by_case[key] = (name, child)
    order = {name: index for index, name in enumerate(node.fields)}
    # The most frequent first when the budget runs out; the table keeps first-seen order.
    ranked = sorted(by_case.values(), key=lambda item: (-item[1].seen, order[item[0]]))
    taken = {name for name, _ in ranked[: max(0, budget[0])]}
    budget[0] -= len(taken)
    return [(name, child) for name, child in node.fields.items() if name in taken]


def _field(name: str, node: _Node, chosen: dict[int, list[tuple[str, _Node]]]) -> dict[str, Any]:
    return {"name": name, "type": _type(node, chosen), "nullable": True, "metadata": {}}


def _type(node: _Node, chosen: dict[int, list[tuple[str, _Node]]]) -> Any:
    kind = node.kind()
    if kind == "boolean":
        return "boolean"
    if kind == "number":
        if node.fractional or node.huge:
            return "double"
        return f"decimal({_DECIMAL_DIGITS},0)" if node.big else "long"
    if kind == "object" and not node.cut:
        fields = chosen.get(id(node), [])
        if fields:
            return {"type": "struct", "fields": [_field(n, child, chosen) for n, child in fields]}
    if kind == "array" and not node.cut:
        element = node.element
        element_type = _type(element, chosen) if element is not None and element.seen else "string"
        return {"type": "array", "elementType": element_type, "containsNull": True}
    # string, only nulls, {} only, a field whose struct got no field within the budget, or a
    # container at the depth limit: the value's JSON text.
    return "string"
