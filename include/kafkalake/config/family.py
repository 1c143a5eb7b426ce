"""A family entry: several Kafka topics (a list, or a Java regex over the cluster's topics) in one table.

Which topics a family reads is decided when a run starts, from the topics Kafka has then: the
pre-flight (librdkafka, no JVM) and the ingest job (the driver's Java client) both ask
:func:`resolve_members`, so they never disagree on the members. A pattern matches a topic's whole
name, as Spark's ``subscribePattern`` (``Pattern.matcher(name).matches()``) does; it is matched with
Python's ``re.fullmatch``, so the catalog accepts only patterns both languages read (checked when it
loads: :func:`pattern_problem`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

#: Kafka's own topics, which a consumer's pattern subscription leaves out
#: (``exclude.internal.topics``): ``__consumer_offsets``, ``__transaction_state``, ...
INTERNAL_PREFIX = "__"
#: Syntax only one of Java and Python reads (or reads otherwise): refused rather than matched
#: differently. Java's ``\p{..}``, ``\Q..\E``, ``\G``, ``\Z``, ``\h``, ``\R``, ``\v``, ``\X``,
#: named groups ``(?<n>..)``, class unions and intersections; Python's ``(?P..)``, ``(?#..)``.
_ONE_LANGUAGE = re.compile(r"\\[pPQEGZhHRvVX]|\(\?<[A-Za-z]|\(\?P|\(\?#|\[\[|&&")


@dataclass(frozen=True)
class Members:
    """The members of a family as Kafka has them now."""

    #: Members Kafka has: the job reads these, in this order.
    present: tuple[str, ...]
    #: Members the entry names (or the table holds rows of, for a pattern) that Kafka does not have:
    #: deleted, or never created. Reported; their rows stay in the table.
    missing: tuple[str, ...]


def pattern_problem(pattern: object) -> str | None:
    """Why ``pattern`` cannot be a family's ``topic_pattern``; None when it can."""
    if not isinstance(pattern, str) or not pattern:
        return "must be a non-empty regular expression (Java syntax, matched against whole topic names)"
    if _ONE_LANGUAGE.search(pattern):
        return (
            f"{pattern!r} uses syntax Java and Python read differently (\\p{{..}}, \\Q..\\E, named "
            "groups, class intersections, (?P..)): write it with plain classes, groups and alternations"
        )
    try:
        re.compile(pattern)
    except re.error as err:
        return f"{pattern!r} is not a valid regular expression: {err}"
    return None


def matches(pattern: str, topic: str) -> bool:
    """Whether ``topic`` is a member of the family of ``pattern``: the whole name matches."""
    return not topic.startswith(INTERNAL_PREFIX) and re.fullmatch(pattern, topic) is not None


def resolve_members(
    listed: Iterable[str], pattern: str | None, existing: Iterable[str], known: Iterable[str] = ()
) -> Members:
    """The family's members from Kafka's topics now (``existing``).

    Args:
        listed: the entry's ``topics`` (empty for a pattern).
        pattern: the entry's ``topic_pattern``, or None.
        existing: every topic the cluster has.
        known: members the table or its checkpoint already holds offsets of: a pattern's member that
            is gone from Kafka is missing, not forgotten.
    """
    have = set(existing)
    if pattern is None:
        names = list(dict.fromkeys(listed))
        return Members(tuple(t for t in names if t in have), tuple(t for t in names if t not in have))
    present = tuple(sorted(t for t in have if matches(pattern, t)))
    missing = tuple(sorted(t for t in set(known) - have if matches(pattern, t)))
    return Members(present, missing)
