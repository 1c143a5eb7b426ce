"""Avro schema references: a registry schema that names types defined in other subjects' schemas,
made one self-contained schema for Spark's ``from_avro``.

Confluent's Avro serializer lets a schema use a named type (a record, enum or fixed) that another
subject's schema defines: the registry entry lists it under ``references`` (``name``: the type's full
name, ``subject`` and ``version``: where it is defined). Avro itself has no imports: a parser must
already know every named type it meets, and ``from_avro`` takes one schema text. So each referenced
definition is put in place of the first use of its name (depth first, in field order, as Avro
parses), and later uses stay names: the schema Avro's own ``Schema.Parser`` builds from the
serializer's ``named_schemas``, written out as one JSON text. A type two references both define (a
diamond: A uses B and C, which both use D) is defined once, where it is first met. Namespaces follow
Avro's rules: a name without dots is read in its enclosing namespace; an inlined definition gets an
explicit ``namespace`` (``""`` for none), so it keeps its full name wherever it lands.

Pure functions of JSON texts; the registry look-ups are
:class:`kafkalake.kafka.schema_registry.WriterSchemas`'.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

from kafkalake.core.errors import UnusableSchemaError

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
NAMED = frozenset({"record", "error", "enum", "fixed"})


def full_name(definition: Mapping[str, Any], namespace: str = "") -> tuple[str, str]:
    """A named type's full name and the namespace its own nested names are read in."""
    name = str(definition["name"])
    if "." in name:
        return name, name.rsplit(".", 1)[0]
    space = definition.get("namespace")
    space = namespace if space is None else str(space)
    return (f"{space}.{name}" if space else name), space


def inline(schema: str, references: Mapping[str, str]) -> str:
    """``schema`` (Avro JSON) with each referenced named type defined at its first use.

    ``references``: the reference's name (the type's full name, as Confluent's serializer names it)
    to the referenced subject version's schema text, itself self-contained already.

    Raises:
        UnusableSchemaError: a referenced schema is not JSON, or not a named type.
    """
    available: dict[str, Any] = {}
    for name, text in references.items():
        try:
            definition = json.loads(text)
        except ValueError as err:
            raise UnusableSchemaError(f"its reference {name!r} is not an Avro schema ({err})") from None
        if (
            not isinstance(definition, dict)
            or definition.get("type") not in NAMED
            or "name" not in definition
        ):
            raise UnusableSchemaError(
                f"its reference {name!r} is not a named Avro type (a record, enum or fixed): nothing to "
                "define it by"
            )
        own, space = full_name(definition)
        if "." not in str(definition["name"]):
            # Its full name is fixed here, wherever it is put.
            definition = {**definition, "namespace": space}
        available[own] = definition
        available.setdefault(name, definition)
    if not available:
        return schema
    try:
        root = json.loads(schema)
    except ValueError as err:
        raise UnusableSchemaError(f"the schema is not Avro JSON ({err})") from None
    return json.dumps(_Inliner(available).walk(root, ""), separators=(",", ":"))


class _Inliner:
    def __init__(self, available: Mapping[str, Any]) -> None:
        self.available = available
        self.defined: set[str] = set()

    def walk(self, node: Any, namespace: str) -> Any:
        if isinstance(node, str):
            return self._named(node, namespace)
        if isinstance(node, list):  # a union
            return [self.walk(branch, namespace) for branch in node]
        if not isinstance(node, dict):
            return node
        kind = node.get("type")
        if kind in NAMED and "name" in node:
            own, space = full_name(node, namespace)
            if own in self.defined:
                return own  # defined once already (a diamond of references): a use of it here
            self.defined.add(own)
            if kind in ("record", "error"):
                node = {
                    **node,
                    "fields": [
                        {**f, "type": self.walk(f.get("type"), space)} for f in node.get("fields", [])
                    ],
                }
            return node
        if kind == "array":
            return {**node, "items": self.walk(node.get("items"), namespace)}
        if kind == "map":
            return {**node, "values": self.walk(node.get("values"), namespace)}
        return {**node, "type": self.walk(kind, namespace)}  # {"type": ..., "logicalType": ...}

    def _named(self, name: str, namespace: str) -> Any:
        if name in PRIMITIVES:
            return name
        full = name if "." in name or not namespace else f"{namespace}.{name}"
        if full in self.defined or name in self.defined:
            return name
        definition = self.available.get(full, self.available.get(name))
        if definition is None:
            return name  # neither defined nor referenced: Avro's parser names it
        return self.walk(copy.deepcopy(definition), namespace)
