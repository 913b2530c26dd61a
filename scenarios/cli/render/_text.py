"""Text from files, made safe for a terminal: `printable` replaces every character that could steer it.

A scenario's title, a sweep's labels, a results file's keys are the file author's text; printed raw, an
escape sequence in them could set the terminal's title, clear the screen or hide what follows, and a bidi
override could show text in another order than it runs. `printable` turns each such character into its
visible escape, so the text reads as what the file holds. `terminal_console` is a rich console that passes
everything it prints through `printable` (its own colours are not text, so they stay); rich markup in file
text is escaped where the text is put in a renderable, by printing it as a `Text`, never as markup.

SVG and HTML output (`scenarios.picture`, `sim.record`) put text through `xml_text`: `printable`, then XML's own
escapes, so a file's text neither breaks the document (XML allows no ESC) nor adds markup to it. Both live in
`sim.record`, which writes the HTML of a run.
"""

from __future__ import annotations

import errno
from typing import Any

from rich.console import Console, ConsoleOptions, RenderHook, RenderResult
from rich.segment import Segment

from sim.record import printable, xml_text

__all__ = ["printable", "terminal_console", "xml_text"]


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


class _Console(Console):
    """A rich console that leaves a closed pipe to the command line: rich's own exits with status 1, which
    `meshsim` keeps for a disagreement."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError(errno.EPIPE, "the reader of the output went away")


def terminal_console(**options: Any) -> Console:
    """A rich `Console(**options)` whose every printed character is `printable` (multi-line): text from a
    file cannot steer the terminal whatever renderable carries it. Markup is still the caller's to avoid for
    file text (print it as a `Text`). A reader that goes away (`meshsim run ... | head`) raises
    `BrokenPipeError`, which `main` ends quietly with exit 0."""
    console = _Console(**options)
    console.push_render_hook(_PrintableHook())
    return console
