"""The trust model: a scenario's code runs only with consent, specs are parsed, and a run can be bounded in time."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import scenarios
import sim
from scenarios import CodeNotAllowedError, ScenarioError
from scenarios._errors import Source
from scenarios._specs import parse_specs
from scenarios.cli import main

ROOT = Path(__file__).resolve().parents[1]
_PROGRAM = """[mesh]
axes = {{i = 2}}

[program]
source = '''
{source}
'''
in_specs = "{in_specs}"
out_specs = "P('i')"
transpose = false

[[args]]
shape = [4]
"""


def program(tmp_path: Path, source: str, in_specs: str = "P('i')", name: str = "program.toml") -> str:
    """A `[program]` scenario file with `source` over a 2-device mesh, taking one argument of 4 rows."""
    path = tmp_path / name
    path.write_text(_PROGRAM.format(source=source, in_specs=in_specs))
    return str(path)


def touching(marker: Path) -> str:
    """A program source that creates `marker` through a shell command when it is loaded, then defines f."""
    return f"import os; os.system('touch {marker}')\ndef f(x):\n    return x * 2.0"


def meshsim(*args: str, timeout: float = 120) -> tuple[subprocess.CompletedProcess, float]:
    """`meshsim ARGS` as its own process, and how many seconds it took."""
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "scenarios.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)
    return done, time.monotonic() - start


@pytest.mark.parametrize("command", [["run"], ["explain"], ["trace", "-o", "trace.json"], ["draw", "-o", "out.svg"]])
def test_a_program_source_does_not_run_without_consent(tmp_path, capsys, monkeypatch, command):
    """Without --allow-code, a `[program]` whose source runs a shell command exits 2, the command does not run
    (no marker file), and the message shows the source, its file and line, and how to allow it."""
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "marker"
    path = program(tmp_path, touching(marker))
    assert main([*command, path]) == 2
    assert not marker.exists()
    err = capsys.readouterr().err
    assert err.startswith(f"meshsim: error: {path}:5: [program] source is Python code, and a scenario's code runs "
                          f"only with consent: it was not run. It would run:\n")
    assert f"    import os; os.system('touch {marker}')\n    def f(x):\n        return x * 2.0\n" in err
    assert err.endswith("If you trust this file, add --allow-code to the command.\n")


@pytest.mark.parametrize("command", [["run"], ["explain"], ["trace", "-o", "trace.json"], ["draw", "-o", "out.svg"]])
def test_with_consent_the_program_runs(tmp_path, capsys, monkeypatch, command):
    """With --allow-code the same file runs: its source's command runs and the command exits 0."""
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "marker"
    assert main([*command, "--allow-code", program(tmp_path, touching(marker))]) == 0
    assert marker.exists()


@pytest.mark.parametrize("command, message", [
    (["check", "--no-jax"], r"a \[program\] has no independent answer"),
])
def test_check_refuses_a_program_before_its_source_runs(tmp_path, capsys, monkeypatch, command, message):
    """`check` takes no program: it refuses one with exit 2 and its own reason, without running it."""
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "marker"
    assert main([*command, program(tmp_path, touching(marker))]) == 2
    assert not marker.exists()
    err = capsys.readouterr().err
    assert err.count("meshsim: error:") == 1 and re.search(message, err)


def test_the_python_api_is_consent(tmp_path):
    """`scenarios.load(path)` called from Python runs the source; `allow_code=False` refuses it, running nothing."""
    marker = tmp_path / "marker"
    path = program(tmp_path, touching(marker))
    with pytest.raises(CodeNotAllowedError, match=r"program\.toml:5: \[program\] source is Python code"):
        scenarios.load(path, allow_code=False)
    assert not marker.exists()
    assert isinstance(scenarios.load(path), scenarios.ProgramScenario)
    assert marker.exists()


def test_a_python_scenario_does_not_run_without_consent(tmp_path, capsys):
    """A `.py` scenario without --allow-code exits 2 unrun, showing its path and first twenty lines; with
    --allow-code it runs."""
    marker = tmp_path / "marker"
    script = tmp_path / "script.py"
    script.write_text(f"import os\nos.system('touch {marker}')\n" + "".join(f"# line {n}\n" for n in range(3, 31)))
    assert main(["run", str(script)]) == 2
    assert not marker.exists()
    err = capsys.readouterr().err
    assert err.startswith(f"meshsim: error: {script}: a Python scenario is code, and a scenario's code runs only "
                          f"with consent: it was not run. Its first lines:\n    import os\n    os.system(")
    assert "    # line 20\n    ... (10 more lines)\nIf you trust this file, add --allow-code to the command.\n" in err
    assert "# line 21" not in err
    assert main(["run", "--allow-code", str(script)]) == 0
    assert marker.exists()


def test_the_refusal_escapes_control_characters(tmp_path, capsys):
    """A terminal escape in the source is shown escaped, so it cannot hide or rewrite what would run."""
    path = tmp_path / "escape.toml"  # a basic string, where TOML writes the escape character as \u001b
    path.write_text(_PROGRAM.replace("'''", '"""').format(
        source="def f(x):\n    return x  # \\u001b[2K\\u001b[1Ahidden", in_specs="P('i')"))
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "return x  # \\x1b[2K\\x1b[1Ahidden" in err


@pytest.mark.parametrize("where, source", [
    ("a device program", "def f(x):\n    while True:\n        pass"),
    ("the source's top level", "while True:\n    pass\ndef f(x):\n    return x"),
])
def test_timeout_stops_a_program_that_never_ends(tmp_path, where, source):
    """`--timeout 1` ends a program looping forever (in a device program or at load) with exit 2 and one
    message, within a few seconds, without a traceback."""
    done, seconds = meshsim("run", "--allow-code", "--timeout", "1", program(tmp_path, source), timeout=60)
    assert done.returncode == 2 and seconds < 10, (where, seconds)
    assert "Traceback" not in done.stderr and done.stderr.count("meshsim: error:") == 1
    assert "program.toml: stopped after --timeout 1 s; the run had not finished" in done.stderr


def test_timeout_stops_a_python_scenario(tmp_path):
    """`--timeout` bounds a `.py` scenario that loops forever too: exit 2, one message, after what it printed."""
    script = tmp_path / "spin.py"
    script.write_text("print('started', flush=True)\nwhile True:\n    pass\n")
    done, seconds = meshsim("run", "--allow-code", "--timeout", "0.5", str(script), timeout=60)
    assert done.returncode == 2 and seconds < 10 and done.stdout == "started\n"
    assert done.stderr == (f"meshsim: error: {script}: stopped after --timeout 0.5 s; the run had not finished (a "
                           f"program that never ends, or a bigger run than the limit allows: raise --timeout)\n")


def test_timeout_is_cleared_after_the_command(tmp_path, capsys):
    """A command that finishes inside its --timeout exits 0 and leaves no alarm armed and SIGALRM's handler as
    it found it."""
    handler = signal.getsignal(signal.SIGALRM)
    assert main(["run", "--timeout", "30", str(ROOT / "scenarios" / "library" / "psum_ring.toml")]) == 0
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert signal.getsignal(signal.SIGALRM) is handler


@pytest.mark.parametrize("value", ["0", "-1", "soon", "nan", "inf"])
def test_timeout_must_be_a_positive_number(value, capsys):
    """`--timeout` takes a positive, finite number of seconds; anything else is argparse's exit 2 with the rule."""
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--timeout", value, "scenarios/library/psum_ring.toml"])
    assert exit_info.value.code == 2
    assert f"--timeout={value!r} must be a positive number of seconds" in capsys.readouterr().err


@pytest.mark.parametrize("source, message", [
    ("import sys; sys.exit(0)\ndef f(x):\n    return x", r"called sys\.exit\(0\); a scenario must not end meshsim"),
    ("def f(x):\n    import sys\n    sys.exit(0)", r"called sys\.exit\(0\); a scenario must not end meshsim"),
    ("def f(x):\n    raise SystemExit('bye')", r"called sys\.exit\('bye'\)"),
    ("def f(x):\n    raise KeyboardInterrupt", r"the scenario's code was interrupted \(KeyboardInterrupt\)"),
])
def test_exit_and_interrupts_in_a_source_are_reported(tmp_path, capsys, source, message):
    """`sys.exit(...)` or KeyboardInterrupt in a program source (at load or on a device) exits 2 with a message
    naming the file, instead of ending meshsim with the code's exit status."""
    path = program(tmp_path, source)
    assert main(["run", "--allow-code", path]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"meshsim: error: {path}: ") and err.count("\n") == 1
    assert re.search(message, err)


def test_exit_in_a_python_scenario_is_reported(tmp_path):
    """`sys.exit(0)` in a `.py` scenario exits 2 with one message, not 0 silently."""
    script = tmp_path / "leave.py"
    script.write_text("import sys\nprint('before')\nsys.exit(0)\n")
    done, _ = meshsim("run", "--allow-code", str(script))
    assert done.returncode == 2 and done.stdout == "before\n"
    assert done.stderr == (f"meshsim: error: {script}: the scenario's code called sys.exit(0); a scenario must not "
                           f"end meshsim: it finishes, or raises an error\n")


def test_specs_are_parsed_never_evaluated(tmp_path):
    """An in_specs expression that would run a command is refused by the parser, naming file, line and field,
    with --allow-code or from Python: nothing runs."""
    marker = tmp_path / "marker"
    path = program(tmp_path, "def f(x):\n    return x", in_specs=f"__import__('os').system('touch {marker}')")
    with pytest.raises(ScenarioError, match=r"program\.toml:9: \[program\] in_specs=\"__import__\('os'\)\.system"
                                            r".*must be P\(\.\.\.\) or a tuple of them.*unexpected '__import__' "
                                            r"at column 1"):
        scenarios.load(path)
    assert not marker.exists()


GOOD_SPECS = [
    ("P()", sim.P()),
    ("P('i')", sim.P("i")),
    ('P("i")', sim.P("i")),
    ("P(None, 'i')", sim.P(None, "i")),
    ("P(('i', 'j'))", sim.P(("i", "j"))),
    ("P(('i',), None,)", sim.P(("i",), None)),
    ("(P('i'), P())", (sim.P("i"), sim.P())),
    ("(P('i'),)", (sim.P("i"),)),
    ("(P('i'))", sim.P("i")),
    ("()", ()),
    ("((P('i'), P()), P(None))", ((sim.P("i"), sim.P()), sim.P(None))),
    ("  ( P( 'i' ) ,P ( ) )  ", (sim.P("i"), sim.P())),
]


@pytest.mark.parametrize("text, expected", GOOD_SPECS, ids=[t for t, _ in GOOD_SPECS])
def test_good_specs(text, expected):
    """Each spec text parses to the value the same Python expression has, type included."""
    value = parse_specs(Source("s.toml", ""), "in_specs", text)
    assert value == expected and _types(value) == _types(expected)


def _types(value: object) -> object:
    """The type of `value` and, inside plain tuples, of each item: P(...) and a tuple of P are told apart."""
    if type(value) is tuple:
        return (tuple, *map(_types, value))
    return type(value)


BAD_SPECS = [
    ("__import__('os').system('x')", r"unexpected '__import__' at column 1"),
    ("P('i') + P()", r"unexpected '\+' at column 8"),
    ("P('i'", r"the text ends early, at column 6"),
    ("P(1)", r"unexpected '1' at column 3"),
    ("P(i)", r"unexpected 'i' at column 3"),
    ("P(,)", r"unexpected ',' at column 3"),
    ("[P()]", r"unexpected '\[' at column 1"),
    ("P('i') P()", r"unexpected 'P' at column 8"),
    ("PartitionSpec('i')", r"unexpected 'PartitionSpec' at column 1"),
    ("P('a\\'b')", r"unexpected \"'\" at column 3"),
    ("P(('i', None))", r"unexpected 'None' at column 9"),
    ("P('i'.upper())", r"unexpected '\.' at column 6"),
    ("", r"the text ends early, at column 1"),
    (5, r"in_specs=5 must be P"),
]


@pytest.mark.parametrize("text, message", BAD_SPECS, ids=[str(t) for t, _ in BAD_SPECS])
def test_bad_specs(text, message):
    """Anything outside the P grammar is a ScenarioError with `field=text`, the rule, and where it went wrong."""
    source = Source("s.toml", "[program]\nsource = ''\nin_specs = 'x'\n")
    with pytest.raises(ScenarioError, match=r"^s\.toml:3: \[program\] in_specs=.* must be P\(\.\.\.\) or a tuple "
                                            r"of them, each P entry None, an axis name in quotes or a tuple of names"):
        parse_specs(source, "in_specs", text)
    with pytest.raises(ScenarioError, match=message):
        parse_specs(source, "in_specs", text)


def test_exploring_orders_asks_for_consent_too(tmp_path, capsys):
    """`meshsim run --explore-orders N` on a program scenario runs its code only with --allow-code."""
    marker = tmp_path / "ran"
    program = tmp_path / "p.toml"
    program.write_text(f'[mesh]\naxes = {{i = 2}}\n[program]\nsource = """\nimport pathlib\n'
                       f'pathlib.Path({str(marker)!r}).touch()\ndef f(x):\n    return psum(x, "i")\n"""\n'
                       'in_specs = "P(\'i\')"\nout_specs = "P()"\n[[args]]\nvalue = [1.0, 2.0]\n')
    assert main(["run", str(program), "--explore-orders", "2"]) == 2
    assert not marker.exists() and "--allow-code" in capsys.readouterr().err
    assert main(["run", str(program), "--explore-orders", "2", "--allow-code"]) == 0
    assert marker.exists()
