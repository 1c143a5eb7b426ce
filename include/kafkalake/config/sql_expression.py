"""A syntax check of Spark SQL boolean expressions (the catalog's expectation rules), without Spark.

The catalog is validated at DAG parse time, where no JVM runs; a rule that does not parse would
otherwise fail the topic's every run, in its Spark job. The check is a recursive-descent parser of
the expression grammar Spark SQL shares with ANSI SQL: literals (numbers, strings, typed literals
such as ``DATE '2026-01-01'``, ``INTERVAL``), identifiers (plain or in backticks, dotted), function
calls (any name, ``DISTINCT``, lambdas ``x -> x > 0``), ``CASE``, ``CAST``/``TRY_CAST``, subscripts
``a[0]``, ``::`` casts, arithmetic, string and bitwise operators, comparisons, ``IS [NOT] NULL``,
``[NOT] IN``, ``[NOT] BETWEEN``, ``[NOT] LIKE``/``RLIKE``/``ILIKE`` and ``AND``/``OR``/``NOT``.

It is conservative in one direction: it refuses what is surely broken (unbalanced brackets or
quotes, a missing operand, two expressions side by side, a statement separator) and does not
resolve names, types or functions: Spark still does that when the rule first runs.
"""

from __future__ import annotations

import re

_TOKEN = re.compile(
    r"""\s*(?:
      (?P<comment>--[^\n]*|/\*.*?\*/)
    | (?P<string>[xX]?'(?:[^'\\]|\\.|'')*'|"(?:[^"\\]|\\.|"")*")
    | (?P<quoted>`(?:[^`]|``)*`)
    | (?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?[a-zA-Z]*)
    | (?P<word>[A-Za-z_][A-Za-z0-9_]*)
    | (?P<op><=>|==|!=|<>|<=|>=|\|\||::|->|[-+*/%&|^~!<>=(),.\[\]:])
    | (?P<bad>\S)
    )""",
    re.VERBOSE | re.DOTALL,
)
_COMPARISONS = frozenset({"=", "==", "!=", "<>", "<", "<=", ">", ">=", "<=>"})
_ADDITIVE = frozenset({"+", "-", "||", "&", "|", "^"})
_MULTIPLICATIVE = frozenset({"*", "/", "%", "div"})
_PATTERN_OPERATORS = frozenset({"like", "rlike", "ilike", "regexp"})
_TYPED_LITERALS = frozenset({"date", "timestamp", "timestamp_ntz", "timestamp_ltz", "x"})
_CONSTANTS = frozenset({"null", "true", "false"})
#: Words that end or continue an expression: never an identifier where an operand is expected.
_RESERVED = frozenset(
    "and or not is in between like rlike ilike regexp escape case when then else end as distinct "
    "from div".split()
)


class _Token:
    __slots__ = ("kind", "text")

    def __init__(self, kind: str, text: str) -> None:
        self.kind = kind
        self.text = text

    @property
    def word(self) -> str:
        return self.text.lower() if self.kind == "word" else ""


def _tokens(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    position = 0
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None or match.end() == position:
            break
        position = match.end()
        kind = match.lastgroup
        if kind is None:
            break
        value = match.group(kind)
        if kind == "comment":
            continue
        if kind == "bad":
            if value in "'\"`":
                raise ValueError(f"unterminated {value}")
            if value == ";":
                raise ValueError("';': one expression, not statements")
            raise ValueError(f"unexpected character {value!r}")
        tokens.append(_Token(kind, value))
    if text[position:].strip():
        rest = text[position:].strip()
        raise ValueError(f"unterminated {rest[0]}" if rest[0] in "'\"`" else f"cannot read {rest[:20]!r}")
    return tokens


class _Parser:
    def __init__(self, tokens: list[_Token]) -> None:
        self.tokens = tokens
        self.position = 0

    # -- helpers
    def peek(self, ahead: int = 0) -> _Token | None:
        index = self.position + ahead
        return self.tokens[index] if index < len(self.tokens) else None

    def at(self, *texts: str) -> bool:
        token = self.peek()
        return token is not None and (token.word in texts or (token.kind == "op" and token.text in texts))

    def take(self) -> _Token:
        token = self.peek()
        if token is None:
            raise ValueError("the expression ends too early")
        self.position += 1
        return token

    def expect(self, text: str, context: str) -> None:
        token = self.peek()
        if token is None:
            raise ValueError(f"expected {text!r} {context}, found the end")
        if not self.at(text):
            raise ValueError(f"expected {text!r} {context}, found {token.text!r}")
        self.position += 1

    # -- grammar
    def expression(self) -> None:
        self.conjunction()
        while self.at("or"):
            self.take()
            self.conjunction()

    def conjunction(self) -> None:
        self.negation()
        while self.at("and"):
            self.take()
            self.negation()

    def negation(self) -> None:
        if self.at("not", "!"):
            self.take()
            self.negation()
            return
        self.predicate()

    def predicate(self) -> None:
        self.additive()
        while True:
            if self.at(*_COMPARISONS):
                self.take()
                self.additive()
                continue
            if self.at("is"):
                self.take()
                if self.at("not"):
                    self.take()
                if self.at("distinct"):
                    self.take()
                    self.expect("from", "after IS DISTINCT")
                    self.additive()
                elif self.at("null", "true", "false", "unknown"):
                    self.take()
                else:
                    raise ValueError("IS must be followed by [NOT] NULL, TRUE, FALSE or DISTINCT FROM")
                continue
            negated = self.at("not") and (self.peek(1) is not None)
            if negated:
                following = self.peek(1)
                assert following is not None
                if following.word not in {"in", "between", *_PATTERN_OPERATORS}:
                    return
                self.take()
            if self.at("in"):
                self.take()
                self.expect("(", "after IN")
                self.list_until(")", "IN")
            elif self.at("between"):
                self.take()
                self.additive()
                self.expect("and", "in BETWEEN … AND …")
                self.additive()
            elif self.at(*_PATTERN_OPERATORS):
                self.take()
                if self.at("any", "all", "some"):
                    self.take()
                self.additive()
                if self.at("escape"):
                    self.take()
                    self.additive()
            else:
                return

    def additive(self) -> None:
        self.multiplicative()
        while self.at(*_ADDITIVE):
            self.take()
            self.multiplicative()

    def multiplicative(self) -> None:
        self.unary()
        while self.at(*_MULTIPLICATIVE):
            self.take()
            self.unary()

    def unary(self) -> None:
        if self.at("-", "+", "~"):
            self.take()
            self.unary()
            return
        self.postfix()

    def postfix(self) -> None:
        self.primary()
        while True:
            if self.at("."):
                self.take()
                token = self.take()
                if token.kind not in ("word", "quoted") and token.text != "*":
                    raise ValueError(f"expected a field name after '.', found {token.text!r}")
            elif self.at("["):
                self.take()
                self.expression()
                self.expect("]", "to close '['")
            elif self.at("::"):
                self.take()
                self.data_type()
            elif self.at(":") and self.peek(1) is not None:
                # Variant path extraction: v:a.b, v:['k'].
                self.take()
                token = self.take()
                if token.kind not in ("word", "quoted") and token.text != "[":
                    raise ValueError(f"expected a path after ':', found {token.text!r}")
                if token.text == "[":
                    self.expression()
                    self.expect("]", "to close '['")
            else:
                return

    def primary(self) -> None:
        token = self.peek()
        if token is None:
            raise ValueError("an operand is missing at the end")
        word = token.word
        if token.kind in ("number", "string"):
            self.take()
            # Adjacent string literals concatenate in Spark SQL ('a' 'b').
            while token.kind == "string" and (nxt := self.peek()) is not None and nxt.kind == "string":
                self.take()
            return
        if token.kind == "op" and token.text == "(":
            self.take()
            self.list_until(")", "(")
            if self.at("->"):
                self.take()
                self.expression()
            return
        if token.kind == "op" and token.text == "*":
            self.take()  # count(*)
            return
        if word == "case":
            self.case()
            return
        if word in ("cast", "try_cast") and self.next_is("("):
            self.take()
            self.take()
            self.expression()
            self.expect("as", f"in {word.upper()}(… AS type)")
            self.data_type()
            self.expect(")", f"to close {word.upper()}(")
            return
        if word == "interval":
            self.take()
            self.interval()
            return
        if word in _TYPED_LITERALS and (nxt := self.peek(1)) is not None and nxt.kind == "string":
            self.take()
            self.take()
            return
        if token.kind == "quoted" or (token.kind == "word" and word not in _RESERVED):
            self.take()
            if self.at("("):
                self.take()
                if self.at("distinct", "all"):
                    self.take()
                self.list_until(")", f"{token.text}(", allow_empty=True)
                if self.at("filter") and self.next_is("("):
                    self.take()
                    self.take()
                    self.expect("where", "in FILTER (WHERE …)")
                    self.expression()
                    self.expect(")", "to close FILTER (")
            elif self.at("->"):
                self.take()
                self.expression()
            return
        if token.kind == "op":
            raise ValueError(f"an operand is missing before {token.text!r}")
        raise ValueError(f"an operand is missing before {token.text.upper()!r}")

    def next_is(self, text: str) -> bool:
        token = self.peek(1)
        return token is not None and token.kind == "op" and token.text == text

    def list_until(self, close: str, opened: str, allow_empty: bool = False) -> None:
        if self.at(close):
            if not allow_empty:
                raise ValueError(f"nothing between {opened!r} and {close!r}")
            self.take()
            return
        while True:
            self.expression()
            if self.at(","):
                self.take()
                continue
            if self.peek() is None:
                raise ValueError(f"unbalanced {opened[-1]!r}: {close!r} is missing")
            self.expect(close, f"to close {opened!r}")
            return

    def case(self) -> None:
        self.take()
        if not self.at("when"):
            self.expression()
        if not self.at("when"):
            raise ValueError("CASE needs at least one WHEN … THEN …")
        while self.at("when"):
            self.take()
            self.expression()
            self.expect("then", "after CASE … WHEN …")
            self.expression()
        if self.at("else"):
            self.take()
            self.expression()
        self.expect("end", "to close CASE")

    def data_type(self) -> None:
        """A type name with its parameters: decimal(10, 2), array<struct<a:int>>."""
        token = self.take()
        if token.kind != "word":
            raise ValueError(f"expected a type, found {token.text!r}")
        depth = 0
        while (nxt := self.peek()) is not None:
            if nxt.text in ("<", "("):
                depth += 1
            elif nxt.text in (">", ")"):
                if depth == 0:
                    return
                depth -= 1
            elif depth == 0:
                return
            self.take()
        if depth:
            raise ValueError("a type's '<' or '(' is not closed")

    def interval(self) -> None:
        token = self.take()
        if token.kind == "string":
            while self.peek() is not None and self.peek_word_is_unit():
                self.take()
            return
        if token.kind != "number" and token.text not in ("-", "+"):
            raise ValueError(f"expected an interval value, found {token.text!r}")
        if token.text in ("-", "+"):
            self.take()
        if not self.peek_word_is_unit():
            raise ValueError("INTERVAL needs a unit, e.g. INTERVAL 1 DAY")
        while self.peek_word_is_unit():
            self.take()
            if (nxt := self.peek()) is not None and nxt.kind == "number" and self.peek(1) is not None:
                self.take()

    def peek_word_is_unit(self) -> bool:
        token = self.peek()
        return token is not None and token.kind == "word" and token.word.rstrip("s") in _UNITS


_UNITS = frozenset("year month week day hour minute second millisecond microsecond nanosecond to".split())


def check_boolean_expression(text: str) -> None:
    """Raise ValueError saying what is wrong when ``text`` is surely not a Spark SQL expression."""
    tokens = _tokens(text)
    if not tokens:
        raise ValueError("empty")
    opened: list[str] = []
    for token in tokens:
        if token.kind == "op" and token.text in ("(", "["):
            opened.append(token.text)
        elif token.kind == "op" and token.text in (")", "]"):
            wanted = "(" if token.text == ")" else "["
            if not opened or opened.pop() != wanted:
                raise ValueError(f"unbalanced {token.text!r}: no {wanted!r} opens it")
    if opened:
        closer = ")" if opened[-1] == "(" else "]"
        raise ValueError(f"unbalanced {opened[-1]!r}: a closing {closer!r} is missing")
    parser = _Parser(tokens)
    parser.expression()
    extra = parser.peek()
    if extra is not None:
        raise ValueError(f"unexpected {extra.text!r} after a complete expression")
