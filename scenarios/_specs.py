"""`parse_specs`: a `[program]`'s `in_specs` / `out_specs` text read as `P(...)` values, never evaluated.

The grammar is the part of Python that writes partition specs, and nothing else:

    specs  := spec | "(" ")" | "(" specs ("," specs)* [","] ")"     a tuple needs a comma: (P('i'),)
    spec   := "P" "(" [entry ("," entry)* [","]] ")"
    entry  := "None" | name | "(" name ("," name)* [","] ")"
    name   := '...' or "..." (no backslash, no newline)
"""

from __future__ import annotations

import re
from typing import Any

import sim
from scenarios._errors import Source
from scenarios._fields import shown

RULE = ("must be P(...) or a tuple of them, each P entry None, an axis name in quotes or a tuple of names, "
        "e.g. \"(P('i'), P(None, 'j'), P(('i', 'j')))\"")

MAX_DEPTH = 32
_TOKEN = re.compile(r"""\s*(?:(?P<name>'[^'\\\n]*'|"[^"\\\n]*")|(?P<word>[A-Za-z_]\w*)|(?P<mark>[(),])|(?P<bad>\S))""")


class _Unexpected(sim.MeshError):
    """The text breaks the grammar at `column` (1-based): `found` is the token there, '' at the end."""

    def __init__(self, found: str, column: int) -> None:
        super().__init__(f"unexpected {found!r} at column {column}" if found else
                         f"the text ends early, at column {column}")


class _TooDeep(_Unexpected):
    """Tuples of specs nested more than `MAX_DEPTH` deep (a program's arguments are never nested so far)."""

    def __init__(self, column: int) -> None:
        sim.MeshError.__init__(self, f"tuples nested more than {MAX_DEPTH} deep at column {column}")


class _Tokens:
    """The tokens of one spec text as (kind, text, column), with one token of look-ahead."""

    def __init__(self, text: str) -> None:
        self.items = [(m.lastgroup or "", m.group(m.lastgroup or 0), m.start(m.lastgroup or 0) + 1)
                      for m in _TOKEN.finditer(text) if m.lastgroup]
        self.at = 0
        self.end = len(text) + 1

    def peek(self) -> tuple[str, str, int]:
        return self.items[self.at] if self.at < len(self.items) else ("end", "", self.end)

    def take(self, *texts: str) -> tuple[str, str, int]:
        """The next token, which must read as one of `texts` (any when none is given)."""
        kind, text, column = self.peek()
        if kind in ("end", "bad") or (texts and text not in texts):
            raise _Unexpected(text, column)
        self.at += 1
        return kind, text, column

    def comma_list(self, item: Any) -> tuple[list[Any], bool]:
        """Items read by `item` up to the closing ')' (taken), and whether a comma followed the last."""
        items, comma = [], False
        while self.peek()[1] != ")":
            items.append(item())
            comma = self.peek()[1] == ","
            if not comma:
                break
            self.take(",")
        self.take(")")
        return items, comma


def parse_specs(source: Source, key: str, text: Any) -> Any:
    """The `P` value (or tuple of them) that `text`, the `[program]` field `key`, writes.

    Raises:
        ScenarioError: `text` is not a string or breaks the grammar; the message names the file, the
            field's line, `key=text`, the rule and where the text went wrong.
    """
    if not isinstance(text, str):
        raise source.error("program", key, f"[program] {key}={shown(text)} {RULE}")
    tokens = _Tokens(text)
    try:
        value = _specs(tokens)
        kind, found, column = tokens.peek()
        if kind != "end":
            raise _Unexpected(found, column)
    except _Unexpected as error:
        raise source.error("program", key, f"[program] {key}={shown(text)} {RULE}: {error}") from None
    return value


def _specs(tokens: _Tokens, depth: int = 0) -> Any:
    if tokens.peek()[1] != "(":
        return _spec(tokens)
    if depth == MAX_DEPTH:
        raise _TooDeep(tokens.peek()[2])
    tokens.take("(")
    items, comma = tokens.comma_list(lambda: _specs(tokens, depth + 1))
    return items[0] if len(items) == 1 and not comma else tuple(items)


def _spec(tokens: _Tokens) -> sim.PartitionSpec:
    tokens.take("P")
    tokens.take("(")
    entries, _ = tokens.comma_list(lambda: _entry(tokens))
    return sim.P(*entries)


def _entry(tokens: _Tokens) -> str | tuple[str, ...] | None:
    text = tokens.peek()[1]
    if text == "None":
        tokens.take()
        return None
    if text == "(":
        tokens.take("(")
        names, _ = tokens.comma_list(lambda: _name(tokens))
        return tuple(names)
    return _name(tokens)


def _name(tokens: _Tokens) -> str:
    kind, text, column = tokens.peek()
    if kind != "name":
        raise _Unexpected(text, column)
    tokens.take()
    return text[1:-1]

