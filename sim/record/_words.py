"""Counts said in words, singular or plural as the count asks: '1 message', '2 messages', '0 bytes'."""

from __future__ import annotations

_IRREGULAR = {"copy": "copies", "entry": "entries", "local copy": "local copies"}


def plural(n: int, noun: str) -> str:
    """`noun` as `n` of them are said: the noun for one, its plural for any other count.

    >>> plural(1, "row"), plural(0, "row"), plural(2, "local copy")
    ('row', 'rows', 'local copies')
    """
    if n == 1:
        return noun
    return _IRREGULAR.get(noun, noun + "s")


def counted(n: int, noun: str) -> str:
    """`n` and the noun in the right number.

    >>> counted(1, "message"), counted(3, "message"), counted(1, "byte")
    ('1 message', '3 messages', '1 byte')
    """
    return f"{n} {plural(n, noun)}"
