"""Text from files, made safe to show: `printable` replaces every character that could steer a terminal,
`xml_text` also escapes XML's own characters.

A scenario's title or a results file's keys are the file author's text; printed raw, an escape sequence in
them could set a terminal's title or clear its screen, a bidi override could show text in another order than
it runs, and XML allows no ESC at all. Each such character becomes its visible escape, so the text reads as
what the file holds.
"""

from __future__ import annotations

import re
from xml.sax.saxutils import escape

# C0 controls (ESC among them), DEL, C1 controls, the bidi embeddings, overrides and isolates, and the
# line and paragraph separators, which some terminals treat as line breaks.
_BEYOND_C0 = "\x7f-\x9f\u202a-\u202e\u2066-\u2069\u2028\u2029"
_ANY = re.compile(f"[\x00-\x1f{_BEYOND_C0}]")
_BUT_LINES = re.compile(f"[\x00-\x08\x0b-\x1f{_BEYOND_C0}]")  # keeps \t and \n


def printable(text: object, multiline: bool = False) -> str:
    """`text` (as `str`) with every terminal control character written as its escape: `\\x1b` for ESC,
    `\\u202e` for RIGHT-TO-LEFT OVERRIDE. With `multiline`, newlines and tabs stay as they are.

    >>> printable("title\\x1b]0;owned\\x07")
    'title\\\\x1b]0;owned\\\\x07'
    """
    pattern = _BUT_LINES if multiline else _ANY
    return pattern.sub(_escape, str(text))


def xml_text(text: object) -> str:
    """`text` for an XML or HTML document: `printable` (lines kept), then `&`, `<` and `>` escaped.

    >>> xml_text("<b>\\x1b[2J")
    '&lt;b&gt;\\\\x1b[2J'
    """
    return escape(printable(text, multiline=True))


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
