"""A topic's JSON schema and its algebra: names, what a table can take, merging, diffing.

Schemas are Spark's own JSON form of a ``StructType`` (``{"type": "struct", "fields": [...]}``), so
this module needs no JVM, and every function here is pure. :func:`schema_problems` finds what a
table or another engine could not take, :func:`repaired` mends a schema recorded before that check
existed. The versions themselves are kept by :mod:`kafkalake.lake.schema_history`.

Evolution only adds. A field inferred with another type than the one persisted is a *conflict*:
the persisted type stays, and values that do not fit are kept in ``_rescued_data`` by the parser,
never turned into a silent null.

Names: the history keeps each field's JSON key, as the producers spell it; the table's column is
:func:`column_name` of it (Delta, without column mapping, refuses `` ,;{}()\n\t=`` in a name), with
the key in the column's metadata (``json_name``). Two keys whose column names differ at most in
case (``Name`` and ``name``, ``first name`` and ``first_name``) would be one column to Spark and
Delta: a schema holds the first of them, and the parser rescues the other's values.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from kafkalake.config.parsed import JSON_NAME, clash_key, column_name

Schema = dict[str, Any]

#: Columns of the parsed table itself; a JSON field with one of these names is always rescued.
RESCUED_COLUMN = "_rescued_data"
RESERVED_PREFIX = "_kafka"


def table_type(data_type: Any) -> Any:
    """A JSON-named type with every struct field renamed to its :func:`column_name`."""
    if not isinstance(data_type, dict):
        return data_type
    if data_type["type"] == "struct":
        return {**data_type, "fields": [_table_field(f) for f in data_type["fields"]]}
    if data_type["type"] == "array":
        return {**data_type, "elementType": table_type(data_type["elementType"])}
    if data_type["type"] == "map":
        return {**data_type, "valueType": table_type(data_type["valueType"])}
    return data_type


def _table_field(field: dict[str, Any]) -> dict[str, Any]:
    name = column_name(field["name"])
    metadata = dict(field.get("metadata") or {})
    if name != field["name"]:
        metadata[JSON_NAME] = field["name"]
    return {**field, "name": name, "type": table_type(field["type"]), "metadata": metadata}


def empty_schema() -> Schema:
    return {"type": "struct", "fields": []}


def is_unicode(name: str) -> bool:
    """Whether ``name`` is text Spark can take: a JSON key may hold a lone surrogate escape
    (``"\\ud800"``), which Python reads but no UTF-8 can carry to the JVM (py4j fails on it)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def is_reserved(name: str) -> bool:
    """Whether a top-level JSON key's column would be one of the table's own."""
    column = column_name(name).lower()
    return column == RESCUED_COLUMN or column.startswith(RESERVED_PREFIX)


#: serde_json's recursion limit is 128; delta-rs parses the schema with it (and a little nesting of
#: its own around it), so the schema's own JSON stays well below.
MAX_SCHEMA_JSON_NESTING = 110


def schema_problems(schema: Schema) -> list[str]:
    """What makes ``schema`` unfit for a parsed table that delta-rs must open too; empty when fit.

    Two keys whose column names differ at most in case clash in Spark and Delta; Parquet cannot
    store a struct without fields; delta-rs cannot parse a schema nested past its limit.
    """
    problems: list[str] = []

    def visit(data_type: Any, path: str) -> None:
        if not isinstance(data_type, dict):
            return
        if data_type["type"] == "struct":
            if not data_type["fields"] and path:
                # The table's own columns (_kafka, _rescued_data) fill a top level without fields.
                problems.append(f"{path!r}: a struct without fields")
            seen: dict[str, str] = {}
            for f in data_type["fields"]:
                name = f["name"]
                where = f"{path}.{name}" if path else name
                if not is_unicode(name):
                    problems.append(f"{where!r}: not Unicode text (a lone surrogate)")
                    continue
                if clash_key(name) in seen:
                    problems.append(f"{where!r}: would be the same column as {seen[clash_key(name)]!r}")
                seen[clash_key(name)] = name
                visit(f["type"], where)
        elif data_type["type"] == "array":
            visit(data_type["elementType"], f"{path}[]")
        elif data_type["type"] == "map":
            visit(data_type["keyType"], f"{path}{{key}}")
            visit(data_type["valueType"], f"{path}{{value}}")

    visit(schema, "")
    nesting = json_nesting(schema)
    if nesting > MAX_SCHEMA_JSON_NESTING:
        problems.append(
            f"nested {nesting} levels deep as JSON: delta-rs cannot open a table past "
            f"~{MAX_SCHEMA_JSON_NESTING}"
        )
    return problems


def repaired(schema: Schema) -> Schema:
    """``schema`` without what no table could take: of fields sharing a column, the first; a nested
    struct without fields as a string (its JSON text); a field whose name is no Unicode text.

    For versions recorded before :func:`schema_problems` guarded the history (Spark's inference made
    ``Name`` and ``name`` two fields, and the table could never be created): the table never had
    those columns, so dropping them changes no column it has. A schema nested too deep cannot be
    repaired this way: its table exists with the deep column (see RUNBOOK, "Awkward JSON").
    """

    def fix(data_type: Any) -> Any:
        if not isinstance(data_type, dict):
            return data_type
        if data_type["type"] == "struct":
            seen: set[str] = set()
            fields = []
            for f in data_type["fields"]:
                if clash_key(f["name"]) in seen or not is_unicode(f["name"]):
                    continue
                seen.add(clash_key(f["name"]))
                inner = fix(f["type"])
                if isinstance(inner, dict) and inner["type"] == "struct" and not inner["fields"]:
                    inner = "string"
                fields.append({**f, "type": inner})
            return {**data_type, "fields": fields}
        if data_type["type"] == "array":
            return {**data_type, "elementType": fix(data_type["elementType"])}
        return data_type

    result: Schema = fix(schema)
    return result


def json_nesting(value: Any) -> int:
    """How deep ``value`` nests as JSON (a scalar is 0, ``{"a": []}`` is 2), without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
            deepest = max(deepest, depth + 1)
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)
            deepest = max(deepest, depth + 1)
    return deepest


def count_fields(data_type: Any) -> int:
    """Fields at every depth (what ``parsed.max_columns`` counts)."""
    if not isinstance(data_type, dict):
        return 0
    if data_type["type"] == "struct":
        return sum(1 + count_fields(f["type"]) for f in data_type["fields"])
    if data_type["type"] == "array":
        return count_fields(data_type["elementType"])
    if data_type["type"] == "map":
        return count_fields(data_type["keyType"]) + count_fields(data_type["valueType"])
    return 0


def without_reserved(schema: Schema) -> Schema:
    """Drop top-level fields whose names the parsed table keeps for its own columns."""
    return {**schema, "fields": [f for f in schema["fields"] if not is_reserved(f["name"])]}


#: Spark's JSON names of types whose SQL spelling differs.
_SQL_NAMES = {"long": "bigint", "integer": "int", "short": "smallint", "byte": "tinyint"}


def type_string(data_type: Any) -> str:
    """A readable Spark SQL spelling of a JSON-form data type: ``array<struct<a:bigint>>``."""
    if isinstance(data_type, str):
        return _SQL_NAMES.get(data_type, data_type)
    kind = data_type["type"]
    if kind == "struct":
        inner = ",".join(f"{f['name']}:{type_string(f['type'])}" for f in data_type["fields"])
        return f"struct<{inner}>"
    if kind == "array":
        return f"array<{type_string(data_type['elementType'])}>"
    if kind == "map":
        return f"map<{type_string(data_type['keyType'])},{type_string(data_type['valueType'])}>"
    return str(kind)


@dataclass(frozen=True)
class Change:
    """One difference between two schema versions, at a dotted field path."""

    kind: str  # "added" | "conflict" | "removed" | "skipped"
    path: str
    old: str | None = None
    new: str | None = None

    def __str__(self) -> str:
        if self.kind == "added":
            return f"+ {self.path}: {self.new}"
        if self.kind == "removed":
            return f"- {self.path}: {self.old}"
        if self.kind == "skipped":
            return f"~ {self.path}: {self.new} not added: over parsed.max_columns (its values are rescued)"
        return f"! {self.path}: kept {self.old}, data also has {self.new} (those values are rescued)"


@dataclass(frozen=True)
class Merge:
    schema: Schema
    changes: tuple[Change, ...]

    @property
    def added(self) -> tuple[Change, ...]:
        return tuple(c for c in self.changes if c.kind == "added")

    @property
    def conflicts(self) -> tuple[Change, ...]:
        return tuple(c for c in self.changes if c.kind == "conflict")


def merge(current: Schema, inferred: Schema, max_columns: int | None = None) -> Merge:
    """``current`` plus the fields only ``inferred`` has; types of existing fields never change.

    New fields are appended in inferred order and are nullable, so older rows read null. A key
    whose column would be an existing field's (``Name`` beside ``name``) is that field: the parser
    rescues the other spelling's values. With ``max_columns``, new
    fields that would take the schema past that many fields (at every depth) are not added: they
    are listed as ``skipped`` and their values stay in ``_rescued_data``.
    """
    budget = [max_columns - count_fields(current) if max_columns is not None else None]
    return _merge_struct(current, inferred, "", budget)


def _merge_struct(current: Schema, inferred: Schema, prefix: str, budget: list[int | None]) -> Merge:
    fields = [dict(f) for f in current["fields"]]
    by_name = {clash_key(f["name"]): i for i, f in enumerate(fields)}
    changes: list[Change] = []
    for new in inferred["fields"]:
        path = f"{prefix}{new['name']}"
        if not prefix and is_reserved(new["name"]):
            continue
        index = by_name.get(clash_key(new["name"]))
        if index is None:
            cost = 1 + count_fields(new["type"])
            if budget[0] is not None:
                if cost > budget[0]:
                    changes.append(Change("skipped", path, new=type_string(new["type"])))
                    continue
                budget[0] -= cost
            fields.append({**new, "nullable": True})
            by_name[clash_key(new["name"])] = len(fields) - 1
            changes.append(Change("added", path, new=type_string(new["type"])))
            continue
        old = fields[index]
        merged_type, sub = _merge_type(old["type"], new["type"], path, budget)
        fields[index] = {**old, "type": merged_type}
        changes.extend(sub)
    return Merge({**current, "fields": fields}, tuple(changes))


def _merge_type(old: Any, new: Any, path: str, budget: list[int | None]) -> tuple[Any, list[Change]]:
    if old == new:
        return old, []
    if isinstance(old, dict) and isinstance(new, dict) and old["type"] == new["type"] == "struct":
        merged = _merge_struct(old, new, f"{path}.", budget)
        return merged.schema, list(merged.changes)
    if isinstance(old, dict) and isinstance(new, dict) and old["type"] == new["type"] == "array":
        element, sub = _merge_type(old["elementType"], new["elementType"], f"{path}[]", budget)
        return {**old, "elementType": element}, sub
    if new == "null":
        # Inference saw only nulls there: nothing to learn.
        return old, []
    if old == "null":
        return new, [Change("added", path, new=type_string(new))]
    return old, [Change("conflict", path, old=type_string(old), new=type_string(new))]


def diff(old: Schema | None, new: Schema) -> list[Change]:
    """What changed from ``old`` to ``new``, field by field (``old`` None: everything is new)."""
    return list(_diff_fields(old["fields"] if old else [], new["fields"], ""))


def _diff_fields(old: list[Any], new: list[Any], prefix: str) -> Iterator[Change]:
    old_by_name = {f["name"]: f for f in old}
    new_names = {f["name"] for f in new}
    for field in new:
        path = f"{prefix}{field['name']}"
        before = old_by_name.get(field["name"])
        if before is None:
            yield Change("added", path, new=type_string(field["type"]))
        elif before["type"] != field["type"]:
            if _is_struct(before["type"]) and _is_struct(field["type"]):
                yield from _diff_fields(before["type"]["fields"], field["type"]["fields"], f"{path}.")
            else:
                yield Change(
                    "conflict", path, old=type_string(before["type"]), new=type_string(field["type"])
                )
    for field in old:
        if field["name"] not in new_names:
            yield Change("removed", f"{prefix}{field['name']}", old=type_string(field["type"]))


def _is_struct(data_type: Any) -> bool:
    return isinstance(data_type, dict) and data_type.get("type") == "struct"


def with_type_hints(
    schema: Schema, hints: Iterable[tuple[str, Any]], persisted: Schema | None = None
) -> Schema:
    """Force the type at each dotted path (adding the field when missing): the catalog wins.

    A path's names match fields as their columns would (regardless of case, as Spark resolves
    them): a hint never adds a second spelling of a field the data has. With ``persisted`` (the
    current version, whose fields the parsed table has as columns), a field it has keeps its type:
    Delta cannot change a column's type, so a hint changed in the catalog for an existing column
    would make every later write of the parsed table fail; it applies to new fields only.
    """
    result: Schema = json.loads(json.dumps(schema))
    for path, data_type in hints:
        *parents, leaf = path.split(".")
        node = result
        for name in parents:
            parent = next((f for f in node["fields"] if clash_key(f["name"]) == clash_key(name)), None)
            if parent is None:
                parent = {"name": name, "type": empty_schema(), "nullable": True, "metadata": {}}
                node["fields"].append(parent)
            elif not _is_struct(parent["type"]):
                parent["type"] = empty_schema()
            node = parent["type"]
        field = next((f for f in node["fields"] if clash_key(f["name"]) == clash_key(leaf)), None)
        if field is None:
            node["fields"].append({"name": leaf, "type": data_type, "nullable": True, "metadata": {}})
        else:
            field["type"] = data_type
    if persisted is not None:
        return merge(persisted, result).schema
    return result


def top_level_names(schema: Schema) -> list[str]:
    return [f["name"] for f in schema["fields"]]
