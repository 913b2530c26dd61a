"""Text from files, made safe for a terminal: `printable` replaces every character that could steer it.

A scenario's title, a sweep's labels, a results file's keys are the file author's text; printed raw, an
escape sequence in them could set the terminal's title, clear the screen or hide what follows, and a bidi
override could show text in another order than it runs. `printable` turns each such character into its
visible escape, so the text reads as what the file holds. `terminal_console` is a rich console that passes
everything it prints through `printable` (its own colours are not text, so they stay); rich markup in file
text is escaped where the text is put in a renderable, by printing it as a `Text`, never as markup.

SVG and HTML output (`_svg`, `_page`) put text through `xml_text`: `printable`, then XML's own escapes, so
a file's text neither breaks the document (XML allows no ESC) nor adds markup to it.
"""

from __future__ import annotations

import re
from typing import Any
from xml.sax.saxutils import escape

from rich.console import Console, ConsoleOptions, RenderHook, RenderResult
from rich.segment import Segment

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


class _Printable:
    """A renderable that renders `inner` and makes every text segment `printable` (multi-line)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for segment in console.render(self.inner, options):
            if segment.control:
                yield segment
            else:
                yield Segment(printable(segment.text, multiline=True), segment.style)


class _PrintableHook(RenderHook):
    """The render hook of `terminal_console`: wraps everything printed in `_Printable`."""

    def process_renderables(self, renderables: list[Any]) -> list[Any]:
        return [_Printable(renderable) for renderable in renderables]


def terminal_console(**options: Any) -> Console:
    """A rich `Console(**options)` whose every printed character is `printable` (multi-line): text from a
    file cannot steer the terminal whatever renderable carries it. Markup is still the caller's to avoid for
    file text (print it as a `Text`)."""
    console = Console(**options)
    console.push_render_hook(_PrintableHook())
    return console
