"""Text from files never steers the terminal: a scenario's, sweep file's or results file's free text (titles,
descriptions, axis names, program sources, finding names) reaches the screen with every control character
shown as its escape (`scenarios.cli.render.printable`), and rich markup in it prints literally."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from rich.console import Console
from rich.table import Table
from rich.text import Text

from scenarios.cli import main
from scenarios.cli.render import printable, terminal_console

# An OSC that sets the window title (ended by BEL), a CSI that clears the screen, a colour, 8-bit CSI (C1),
# DEL, backspace, the bidi override and isolate, and rich markup that must print as written.
EVIL = "\x1b]0;owned\x07\x1b[2J\x1b[31m[red]x[/red] \u202eevil\u2066 \x9b31m \x7f \x08 \x00 [bold]b"
MARKUP = "[red]x[/red]"
# Every character a terminal could act on, but newline and tab.
STEERING = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def steering(text: str) -> list[str]:
    """The characters of `text` that could steer a terminal (newline and tab are text)."""
    return STEERING.findall(text)


def test_the_pattern_finds_what_it_looks_for():
    """The check below can fail: EVIL holds steering characters, and escaped it holds none."""
    assert len(steering(EVIL)) >= 10
    assert steering(printable(EVIL)) == []


@pytest.mark.parametrize("char", ["\x00", "\x07", "\x08", "\x0b", "\x0c", "\r", "\x1b", "\x1f", "\x7f", "\x80",
                                  "\x9b", "\x9f", "\u202a", "\u202e", "\u2066", "\u2069", "\u2028"])
def test_every_steering_character_is_shown_as_its_escape(char):
    """Each control, bidi and separator character becomes its visible escape, the text around it kept."""
    shown = printable(f"a{char}b")
    assert shown == f"a\\x{ord(char):02x}b" if ord(char) < 0x100 else f"a\\u{ord(char):04x}b"


def test_newlines_and_tabs_stay_only_where_lines_are_expected():
    """Multi-line text keeps its newlines and tabs; a single line shows them as escapes."""
    assert printable("a\nb\tc", multiline=True) == "a\nb\tc"
    assert printable("a\nb\tc") == "a\\x0ab\\x09c"
    assert printable("é ü 中 → ok") == "é ü 中 → ok"


def test_the_terminal_console_cleans_every_renderable():
    """A table cell, a rule's title and plain text printed through `terminal_console` hold no steering
    character, keep their markup literal, and a plain console (the control) would have passed them on."""
    for make, dirty in ((terminal_console, False), (Console, True)):
        out = io.StringIO()
        console = make(file=out, width=200, color_system=None)
        table = Table(title=Text(EVIL))
        table.add_column("x")
        table.add_row(Text(EVIL))
        console.print(table)
        console.rule(Text(EVIL))
        console.print(Text(EVIL))
        assert bool(steering(out.getvalue())) == dirty
        assert out.getvalue().count(MARKUP) == 4


def _toml(text: str) -> str:
    """`text` as a TOML basic string (JSON's escapes are TOML's)."""
    return json.dumps(text)


def collective_file(folder: Path, axis: str = "i") -> Path:
    """A psum scenario whose title and description (and, when asked, axis name) are EVIL."""
    path = folder / f"evil_{len(axis)}.toml"
    path.write_text(f"title = {_toml(EVIL)}\ndescription = {_toml('first ' + EVIL + chr(10) + 'second')}\n\n"
                    f"[mesh]\naxes = {{{_toml(axis)} = 2}}\n\n[collective]\nop = \"psum\"\n"
                    f"axis_name = {_toml(axis)}\n\n[inputs]\nseed = 0\nshape = [4]\n", encoding="utf-8")
    return path


def program_file(folder: Path) -> Path:
    """A `[program]` scenario whose title, description and source comment are EVIL (no NUL in the source:
    Python refuses it)."""
    source = f"# {EVIL.replace(chr(0), '')}\ndef f(x):\n    return psum(x, 'i')\n"
    path = folder / "evil_program.toml"
    path.write_text(f"title = {_toml(EVIL)}\ndescription = {_toml(EVIL)}\n\n[mesh]\naxes = {{i = 2}}\n\n"
                    f"[program]\nsource = {_toml(source)}\nin_specs = \"P('i')\"\nout_specs = \"P()\"\n"
                    "transpose = false\n\n[[args]]\nshape = [4]\n", encoding="utf-8")
    return path


def sweep_file(folder: Path) -> Path:
    """A two-point psum sweep whose title and description are EVIL."""
    path = folder / "evil_sweep.toml"
    path.write_text(f"title = {_toml(EVIL)}\ndescription = {_toml(EVIL)}\ncollective = \"psum\"\n"
                    "mesh = {x = 2}\nsize = {from = \"1KiB\", to = \"2KiB\", factor = 2}\ndtype = \"float32\"\n",
                    encoding="utf-8")
    return path


def _printed(capsys, argv: list[str]) -> tuple[int, str]:
    """The exit code of `meshsim ARGV` and what it printed on stdout and stderr together."""
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out + err


@pytest.mark.parametrize("argv", [
    ["run", "{collective}"], ["run", "--json", "{collective}"], ["run", "--sanitize", "{collective}"],
    ["run", "--explore-orders", "2", "{collective}"], ["explain", "{collective}"],
    ["trace", "-o", "{tmp}/t.json", "{collective}"], ["draw", "-o", "{tmp}/d.svg", "{collective}"],
    ["run", "{evil_axis}"], ["explain", "{evil_axis}"], ["run", "--sanitize", "{evil_axis}"],
    ["run", "--allow-code", "{program}"], ["explain", "--allow-code", "{program}"],
    ["trace", "--allow-code", "-o", "{tmp}/p.json", "{program}"], ["run", "{program}"],
], ids=lambda argv: " ".join(argv))
def test_scenario_text_reaches_the_terminal_escaped(tmp_path, capsys, argv):
    """Every command that shows a scenario's text shows it without a steering character, whatever it
    printed (a run, a walkthrough, a refusal), and the title's markup literally where the title shows."""
    files = {"collective": collective_file(tmp_path), "evil_axis": collective_file(tmp_path, "i" + EVIL),
             "program": program_file(tmp_path), "tmp": tmp_path}
    code, printed = _printed(capsys, [arg.format(**files) for arg in argv])
    assert steering(printed) == [], printed
    assert code in (0, 2)
    if code == 0 and argv[0] in ("run", "explain") and "--json" not in argv and "--explore-orders" not in argv:
        assert MARKUP in printed


@pytest.mark.differential
def test_check_shows_the_title_escaped(tmp_path, capsys):
    """`meshsim check` prints the scenario's title as text: no steering character, markup literal."""
    code, printed = _printed(capsys, ["check", str(collective_file(tmp_path))])
    assert code == 0
    assert steering(printed) == []
    assert MARKUP in printed


def test_a_sweep_title_reaches_the_terminal_escaped(tmp_path, capsys):
    """`meshsim sweep` prints its file's title above the table as text, escaped, markup literal."""
    code, printed = _printed(capsys, ["sweep", str(sweep_file(tmp_path)), "-o", str(tmp_path / "out"),
                                      "--workers", "1"])
    assert code == 0
    assert steering(printed) == []
    assert MARKUP in printed


def test_a_campaign_report_shows_results_file_text_escaped(tmp_path, capsys):
    """A campaign's results file is text from a file too: a finding's name and a known id read back from it
    (every job done, so no cluster starts) print escaped, or the file is refused in one clean line."""
    from scenarios.campaign import plan

    folder = tmp_path / "campaign"
    folder.mkdir()
    (job,) = plan(["psum"], 1, 0, kinds=["forward"])
    record = {"key": job.key, "op": "psum", "kind": "forward", "cases": 1, "agree": 0, "known": {EVIL: 1},
              "findings": [{"name": EVIL, "replay": EVIL}]}
    (folder / "results.jsonl").write_text(json.dumps(record) + "\n", encoding="utf-8")
    code, printed = _printed(capsys, ["campaign", "--ops", "psum", "--cases", "1", "-o", str(folder), "--resume"])
    assert code in (1, 2)
    assert steering(printed) == [], printed


def test_a_sweep_plot_of_that_title_is_well_formed_svg(tmp_path, capsys):
    """The plot's title is the sweep file's too: the SVG holds it escaped and parses as XML (a raw ESC is
    not a character XML allows)."""
    import xml.etree.ElementTree as ElementTree

    picture = tmp_path / "p.svg"
    code, _ = _printed(capsys, ["sweep", str(sweep_file(tmp_path)), "-o", str(tmp_path / "out"), "--workers", "1",
                                "--plot", str(picture)])
    assert code == 0
    ElementTree.parse(picture)
    assert steering(picture.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("suffix", [".svg", ".html"])
def test_draw_writes_file_text_escaped_and_well_formed(tmp_path, capsys, suffix):
    """`meshsim draw`'s SVG and HTML hold the file's text XML-escaped and without a control character (a raw
    ESC is not a character XML allows): the SVG parses, markup and tags in the title stay text."""
    import xml.etree.ElementTree as ElementTree

    picture = tmp_path / f"d{suffix}"
    code, _ = _printed(capsys, ["draw", "-o", str(picture), str(collective_file(tmp_path, "i" + EVIL))])
    assert code == 0
    written = picture.read_text(encoding="utf-8")
    assert steering(written) == []
    assert MARKUP in written
    if suffix == ".svg":
        ElementTree.parse(picture)
