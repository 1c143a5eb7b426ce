"""Spark SQL type strings (``bigint``, ``decimal(12,2)``, ``struct<a:int>``), checked without Spark.

The catalog's type hints and pinned schemas are validated at DAG parse time, where no JVM runs.
"""

from __future__ import annotations

import re

_SIMPLE_TYPES = frozenset(
    "boolean tinyint byte smallint short int integer bigint long float real double"
    " string binary date timestamp timestamp_ntz variant".split()
)
_NESTED_TYPES = {"array": "array<string>", "map": "map<string,int>", "struct": "struct<a:int,b:string>"}
_PUNCTUATION = frozenset("<>(),:")
_TOKEN = re.compile(r"\s*(?:(`(?:[^`]|``)*`)|([A-Za-z0-9_]+)|([<>(),:])|(\S))")
MAX_DECIMAL_PRECISION = 38


def validate_spark_type(text: str) -> None:
    """Raise ValueError saying what is wrong unless `text` is a Spark SQL type (as in a DDL schema).

    Accepts, case-insensitively, the simple types, ``decimal[(p[,s])]``, ``array<T>``, ``map<K,V>``
    and ``struct<name:T, name2 T, `odd name`:T>``.
    """
    tokens = _tokenize(text)
    if not tokens:
        raise ValueError("empty type")
    position = _parse_type(tokens, 0)
    if position < len(tokens):
        extra = tokens[position]
        raise ValueError("unbalanced '>'" if extra == ">" else f"unexpected {extra!r} after a complete type")


def _tokenize(text: str) -> list[str]:
    tokens: list[str] = []
    for match in _TOKEN.finditer(text):
        quoted, word, punct, other = match.groups()
        if other is not None:
            if other == "`":
                raise ValueError("unterminated '`'")
            raise ValueError(f"unexpected character {other!r}")
        tokens.append(quoted or word or punct)
    return tokens


def _expect(tokens: list[str], position: int, wanted: str, opened: str) -> int:
    if position >= len(tokens):
        raise ValueError(f"unbalanced {opened!r}")
    if tokens[position] != wanted:
        raise ValueError(f"expected {wanted!r}, found {tokens[position]!r}")
    return position + 1


def _parse_type(tokens: list[str], position: int) -> int:
    """Parse one type starting at `position`; return the position after it."""
    if position >= len(tokens):
        raise ValueError("a type is missing")
    word = tokens[position]
    name = word.lower()
    position += 1
    following = tokens[position] if position < len(tokens) else None
    if name in _SIMPLE_TYPES:
        return position
    if name == "decimal":
        return _parse_decimal(tokens, position) if following == "(" else position
    if name in _NESTED_TYPES:
        if following != "<":
            raise ValueError(f"{name} needs its parts in '<…>', e.g. {_NESTED_TYPES[name]}")
        position += 1
        if name == "struct":
            return _parse_struct(tokens, position)
        position = _parse_type(tokens, position)
        if name == "map":
            position = _parse_type(tokens, _expect(tokens, position, ",", "<"))
        return _expect(tokens, position, ">", "<")
    if word in _PUNCTUATION:
        raise ValueError(f"expected a type, found {word!r}")
    raise ValueError(f"unknown type {word!r}")


def _parse_decimal(tokens: list[str], position: int) -> int:
    position += 1  # past '('
    numbers: list[int] = []
    while True:
        if position >= len(tokens):
            raise ValueError("unbalanced '('")
        if not tokens[position].isdigit():
            raise ValueError(
                f"decimal takes whole numbers: decimal(precision[, scale]), found {tokens[position]!r}"
            )
        numbers.append(int(tokens[position]))
        position += 1
        if position < len(tokens) and tokens[position] == "," and len(numbers) == 1:
            position += 1
            continue
        position = _expect(tokens, position, ")", "(")
        break
    precision, scale = numbers[0], numbers[1] if len(numbers) > 1 else 0
    if not 1 <= precision <= MAX_DECIMAL_PRECISION:
        raise ValueError(f"decimal precision must be from 1 to {MAX_DECIMAL_PRECISION}, not {precision}")
    if scale > precision:
        raise ValueError(f"decimal scale ({scale}) cannot exceed its precision ({precision})")
    return position


def _parse_struct(tokens: list[str], position: int) -> int:
    if position < len(tokens) and tokens[position] == ">":
        return position + 1  # struct<>
    names: set[str] = set()
    while True:
        if position >= len(tokens):
            raise ValueError("unbalanced '<'")
        name = tokens[position]
        if name in _PUNCTUATION:
            raise ValueError(f"expected a struct field name, found {name!r}")
        bare = name[1:-1].replace("``", "`") if name.startswith("`") else name
        if not bare:
            raise ValueError("a struct field name is empty")
        if bare.lower() in names:
            raise ValueError(f"struct field {bare!r} is given twice")
        names.add(bare.lower())
        position += 1
        if position < len(tokens) and tokens[position] == ":":
            position += 1
        position = _parse_type(tokens, position)
        if position < len(tokens) and tokens[position] == ",":
            position += 1
            continue
        return _expect(tokens, position, ">", "<")


def type_depth(text: str) -> int:
    """Nesting levels of a valid type string: ``bigint`` 0, ``array<struct<a:int>>`` 2."""
    depth = deepest = 0
    for token in _tokenize(text):
        if token == "<":
            depth += 1
            deepest = max(deepest, depth)
        elif token == ">":
            depth -= 1
    return deepest
