"""Reading the catalog's YAML: UTF-8 whatever the locale, and no reading a person would not see.

YAML keeps the last of a key given twice silently, and YAML 1.1 (PyYAML) reads ``010`` as 8 and
``1:30`` as 90 where YAML 1.2 tools and people read 10 and a time: both fail the load, naming the
topic and the field.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from kafkalake.core.errors import CatalogError


def read_yaml(file: Path) -> Any:
    """The catalog file's YAML, read as UTF-8; a hidden reading (a key given twice, a number YAML
    1.1 reads unlike its reader) is refused.

    Raises:
        CatalogError: the file is missing, unreadable, not UTF-8 or not valid YAML, or has a hidden
            reading; naming the file (and the topic and field where there is one).
    """
    try:
        # UTF-8 whatever the locale: YAML files are, and another locale would misread them silently.
        text = file.read_text(encoding="utf-8")
        raw = yaml.safe_load(text)
    except FileNotFoundError:
        raise CatalogError(file, "file not found (set KAFKALAKE_CATALOG to another file?)") from None
    except UnicodeDecodeError as err:
        byte, line = err.object[err.start], err.object[: err.start].count(b"\n") + 1
        raise CatalogError(file, f"not UTF-8 text: byte {byte:#04x} on line {line}") from None
    except OSError as err:
        raise CatalogError(file, f"cannot be read: {err.strerror or err}") from None
    except yaml.YAMLError as err:
        raise CatalogError(file, f"not valid YAML: {err}") from None
    refuse_hidden_readings(file, text)
    return raw


_INT_TAG, _FLOAT_TAG = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"
# YAML 1.1 (PyYAML, so the catalog) reads 010 as 8 and 1:30 as 90; YAML 1.2 tools, editors and
# the people reading the file take them as 10 and a time.
_OCTAL = re.compile(r"[-+]?0[0-7_]+")


def refuse_hidden_readings(file: Path, text: str) -> None:
    """A key given twice in one mapping, or a number YAML 1.1 reads unlike its reader, fails the
    load, naming the topic and the field.

    YAML keeps the last key silently, so a second ``freshness_sla`` further down a topic would win
    unseen; ``max_offsets_per_trigger: 010`` would be 8 and ``spark.…: 1:30`` would reach Spark
    as "90". The file is composed into nodes (it parsed already) and walked with the path to each
    mapping; merge keys (``<<``) are YAML's own way to combine mappings and are left alone. An
    alias is the node of its anchor: each node is walked once, so an alias inside its own anchor
    (``&t [*t]``) or aliases of aliases cannot make the walk endless or exponential.
    """
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    stack: list[tuple[yaml.Node, str, str | None]] = [(root, "", None)] if root is not None else []
    seen: set[int] = set()
    while stack:
        node, path, topic = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                item_topic = topic
                if path == "topics" and isinstance(item, yaml.MappingNode):
                    names = [
                        v.value for k, v in item.value if k.value == "name" and isinstance(v, yaml.ScalarNode)
                    ]
                    item_topic = names[-1] if names else f"#{index + 1}"
                stack.append((item, "" if path == "topics" else f"{path}[{index}]", item_topic))
            continue
        if isinstance(node, yaml.ScalarNode):
            _refuse_hidden_number(file, node, path, topic)
            continue
        if not isinstance(node, yaml.MappingNode):
            continue
        first: dict[str, int] = {}
        for key, value in node.value:
            name = str(key.value)
            if name == "<<":
                continue
            field = f"{path}.{name}" if path else name
            line = key.start_mark.line + 1
            if name in first:
                raise CatalogError(
                    file,
                    f"key {name!r} is given twice in one mapping (lines {first[name]} and {line}); "
                    "YAML would keep the last one silently: keep one",
                    topic,
                    field,
                )
            first[name] = line
            stack.append((value, field, topic))


def _refuse_hidden_number(file: Path, node: yaml.ScalarNode, path: str, topic: str | None) -> None:
    if node.style is not None or node.tag not in (_INT_TAG, _FLOAT_TAG):
        return  # quoted, or not a number
    text = node.value
    if ":" in text:
        reading = "a base-60 number"
    elif node.tag == _INT_TAG and _OCTAL.fullmatch(text):
        reading = "an octal number"
    else:
        return
    value = yaml.safe_load(text)
    raise CatalogError(
        file,
        f"{text} (line {node.start_mark.line + 1}) is read by YAML as {reading}, {value}: write the "
        f"number without a leading zero or a colon, or quote it ('{text}') to keep it as text",
        topic,
        path or None,
    )
