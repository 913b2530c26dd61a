"""What the collectives pages show besides their own examples: the picture `meshsim draw` makes of a library
scenario, and the table of a collective's algorithms read from its `Definition`.

The pages import it by path (their cells run in a temporary directory):

    sys.path.insert(0, str(Path(collectives.__file__).parents[1] / "docs" / "collectives"))
"""

from __future__ import annotations

from html import escape
from pathlib import Path

from IPython.display import HTML, SVG

import collectives
import scenarios
from scenarios.cli.render import picture

LIBRARY = Path(scenarios.__file__).parent / "library"


def draw(scenario: str) -> SVG:
    """The SVG `meshsim draw scenarios/library/<scenario>.toml -o picture.svg` writes, shown inline."""
    return SVG(picture(scenarios.run(scenarios.load(LIBRARY / f"{scenario}.toml"))))


def _considered(algorithm: collectives.Algorithm) -> str:
    """When 'auto' weighs `algorithm` against the others (it then takes the cheapest by the cost model)."""
    if algorithm.auto:
        return "it is 'auto'"
    if algorithm.power_of_two:
        return "groups of a power-of-two size"
    if algorithm.grid:
        return "several named mesh axes"
    if algorithm.in_network:
        return "a switch that reduces"
    return "always"


def _messages(algorithm: collectives.Algorithm, size: int) -> str:
    """How many messages a member of a group of `size` sends, or who decides."""
    if algorithm.auto:
        return "those of its pick"
    if algorithm.messages is None:
        return "depends on the call"
    return str(algorithm.messages((size,)))


def algorithms(op: str, size: int = 8) -> HTML:
    """A table of `op`'s `Algorithm` records, in the order 'auto' weighs them: name, messages a member sends
    on a group of `size`, when 'auto' weighs it, and what it does (the paragraph `meshsim explain` prints)."""
    head = ("<code>algorithm=</code>", f"messages per member (group of {size})", "'auto' weighs it on",
            "what it does")
    rows = ["<tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>"]
    for a in collectives.definition(op).algorithms:
        text = a.text.split(": ", 1)[1] if ": " in a.text else a.text
        cells = (f"<code>{a.name}</code>", escape(_messages(a, size)), escape(_considered(a)), escape(text))
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return HTML("<table class='table'>" + "".join(rows) + "</table>")
