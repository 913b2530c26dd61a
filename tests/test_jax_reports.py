"""The findings' upstream reports: every folder of `oracles/jax_fixes/findings/` and what `meshsim report` renders
from it. Each reproducer runs in a new process as a user runs it: on stock JAX it fails (exit 1 on its assertion,
`stock_failure` in its output), with its fix installed it passes; each `fix.diff` applies cleanly to a copy of
the installed JAX package; the site's pages (docs/findings/) and FINDINGS.md's column are what the command
renders now. The format itself is checked on a fixture finding of known content (`tests/report_fixture/`)."""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from oracles import jax_fixes
from oracles.jax_fixes import report
from scenarios.cli import main

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "report_fixture"
FIXTURE_FINDINGS = FIXTURE / "findings"
FIXTURE_ID = "fixture-pmax-one-member"
DOCS = ROOT / "docs" / "findings"
FINDINGS_MD = ROOT / "FINDINGS.md"
# FINDINGS.md's entries without a bracketed id, and the ids they go by
UNBRACKETED = {4: "argsort-typed-invariant", 5: "ragged-typed-from-output", 12: "pbroadcast-typed-varying"}
WRITTEN = [finding.id for finding in report.load_all() if isinstance(finding, report.Finding)]


def _findings_md_ids() -> dict[int, list[str]]:
    """FINDINGS.md's entries, number -> the ids of its findings: the heading's bracketed id (else UNBRACKETED's),
    then any other bracketed id in the entry's text (a related slip written up on its own)."""
    found = {}
    sections = re.split(r"^## (?=\d+\. )", FINDINGS_MD.read_text(), flags=re.M)[1:]
    for section in sections:
        heading, _, text = section.partition("\n")
        number = int(heading.split(".")[0])
        bracketed = re.findall(r"\[([a-z0-9]+(?:-[a-z0-9]+)+)\]", heading)
        ids = bracketed[:1] or [UNBRACKETED[number]]
        found[number] = ids + [i for i in re.findall(r"\[([a-z0-9]+(?:-[a-z0-9]+)+)\]", text) if i not in ids]
    return found


def run_repro(folder: Path, fix_from: str | None, pythonpath: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """Run `folder/repro.py` in a new process from its folder: as it is (`fix_from=None`, stock JAX), or after
    `<fix_from>.install_jax_fixes([<folder's name>])`, as the reports tell a user to."""
    if fix_from is None:
        command = [sys.executable, "repro.py"]
    else:
        command = [sys.executable, "-c", f"import runpy, {fix_from}; {fix_from}.install_jax_fixes([{folder.name!r}]); "
                                         "runpy.run_path('repro.py', run_name='__main__')"]
    env = {**os.environ, "PYTHONPATH": str(pythonpath)}
    env.pop("XLA_FLAGS", None)
    return subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=600)


def fails_as_pinned(finding: report.Finding, ran: subprocess.CompletedProcess[str]) -> list[str]:
    """What is wrong with a stock run of `finding`'s reproducer: it must exit 1 on an AssertionError (its last
    line) with `stock_failure` in what it printed or raised. Empty when it failed as pinned."""
    problems = []
    lines = ran.stderr.strip().splitlines()
    if ran.returncode != 1 or not lines or not lines[-1].startswith("AssertionError"):
        problems.append(f"exit {ran.returncode}, last line {lines[-1] if lines else ''!r}: the reproducer must "
                        "end in a failing assert on stock JAX")
    if finding.stock_failure not in ran.stdout + ran.stderr:
        problems.append(f"stock_failure={finding.stock_failure!r} is not in its output")
    return problems


def patch_problems(diff: Path, tree: Path) -> str:
    """`patch -p1 --dry-run` of `diff` in `tree`: empty when it applies cleanly (no offset, no fuzz), else what
    patch said."""
    ran = subprocess.run(["patch", "-p1", "--dry-run", "--batch", "-d", str(tree), "-i", str(diff)],
                         capture_output=True, text=True)
    said = ran.stdout + ran.stderr
    clean = ran.returncode == 0 and not re.search(r"offset|fuzz|FAILED|Reversed", said)
    return "" if clean else said.strip() or f"exit {ran.returncode}"


@pytest.fixture(scope="module")
def jax_tree(tmp_path_factory) -> Path:
    """A copy of the installed JAX package (`<copy>/jax/...`), found without importing jax."""
    spec = importlib.util.find_spec("jax")
    assert spec is not None and spec.submodule_search_locations, "jax is not installed"
    tree = tmp_path_factory.mktemp("installed")
    shutil.copytree(spec.submodule_search_locations[0], tree / "jax",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return tree


@pytest.fixture
def fixture_folder(monkeypatch) -> Path:
    """`meshsim report` reading the fixture's findings instead of the real ones."""
    monkeypatch.setattr("oracles.jax_fixes._folder.FOLDER", FIXTURE_FINDINGS)
    return FIXTURE_FINDINGS


def _copy_fixture(tmp_path: Path) -> Path:
    """A copy of the fixture's findings folder, to break."""
    shutil.copytree(FIXTURE_FINDINGS, tmp_path / "findings")
    return tmp_path / "findings"


# --- the format, on the fixture ---------------------------------------------------------------------------------

def test_a_finding_folder_reads_back_every_key():
    """`load` gives each key of finding.toml, the two texts and the upstream status, as the files hold them."""
    finding = report.load(FIXTURE_ID, FIXTURE_FINDINGS)
    folder = FIXTURE_FINDINGS / FIXTURE_ID
    assert isinstance(finding, report.Finding)
    assert (finding.id, finding.number, finding.devices) == (FIXTURE_ID, 1, 2)
    assert finding.source_lines == ("jax/_src/lax/parallel.py:1059-1065 pmax_p",)
    assert finding.repro == (folder / "repro.py").read_text() and finding.diff == (folder / "fix.diff").read_text()
    assert finding.upstream == report.Upstream("unknown", "A fixture: no JAX source was read for it.",
                                               "not found: a fixture is not searched for")


def test_the_report_fills_jax_bug_form_in_order():
    """The page is the title, JAX's two fields (Description with every part of the report, System info), then
    the upstream status; the reproducer and the patch are quoted whole, the source lines link the release tag."""
    finding = report.load(FIXTURE_ID, FIXTURE_FINDINGS)
    text = report.render(finding)
    headings = [line for line in text.splitlines() if line.startswith("#")]
    assert headings == [f"# {finding.title}", "## Description", "### Reproducer", "### Expected and actual",
                        "### How the expected answer is known", "### Where the fault is", "### Proposed fix",
                        "### GPU and TPU", "## System info (python version, jaxlib version, accelerator, etc.)",
                        "## Upstream status"]
    assert f"```python\n{finding.repro.rstrip()}\n```" in text
    assert f"```diff\n{finding.diff.rstrip()}\n```" in text
    assert f"```text\n{finding.stock_failure}\n```" in text
    assert "blob/jax-v0.10.2/jax/_src/lax/parallel.py#L1059-L1065" in text
    assert "on CPU, 2 devices the script sets up itself" in text
    assert "jax:    0.10.2\njaxlib: 0.10.2\ndevices: CPU, 2 devices (XLA_FLAGS" in text
    for part in (finding.summary, finding.expected, finding.actual, finding.known_by, finding.gpu_tpu):
        assert part.strip() in text


def test_a_quoted_text_holding_backticks_gets_a_longer_fence():
    """A reproducer or diff that holds a fence of its own cannot close the page's block early."""
    assert report._fenced("a\n````\nb", "text") == "`````text\na\n````\nb\n`````"
    assert report._fenced("plain", "diff") == "```diff\nplain\n```"


def test_a_folder_with_only_its_upstream_status_is_pending(tmp_path):
    """A finding checked upstream but not written up is listed and has a page saying so, with its status."""
    folder = tmp_path / "only-upstream"
    folder.mkdir()
    shutil.copy(FIXTURE_FINDINGS / FIXTURE_ID / "upstream.toml", folder)
    pending = report.load("only-upstream", tmp_path)
    assert isinstance(pending, report.Pending)
    page = report.render(pending)
    assert "not written yet" in page and "**Not checked against the newest JAX source; not reported upstream.**" in page
    assert "| | not written up yet | `only-upstream` | unknown | none found |" in \
        report.render_index(report.load_all(tmp_path), site=False).replace("|  |", "| |")


BAD = [
    ("finding.toml", 'gpu_tpu = "The same', 'other = "The same', r"keys \['gpu_tpu'\] are missing or empty"),
    ("finding.toml", "number = 1", "number = 0", r"number=0 must be a positive integer"),
    ("finding.toml", "number = 1", 'number = "one"', r"number='one' must be a positive integer"),
    ("finding.toml", "parallel.py:1059-1065 pmax_p", "parallel.py line 1059", r"source_lines=.* must each read"),
    ("finding.toml", 'expected = "The', 'expected = 3\nx = "The', r"expected=3 must be text"),
    ("finding.toml", "number = 1", "number = ", r"not TOML"),
    ("upstream.toml", '"unknown"', '"maybe"', r"still_present='maybe' must be one of \['no', 'unknown', 'yes'\]"),
    ("upstream.toml", '"not found: a fixture', '"nowhere: a fixture', r"reported='nowhere: .*' must be an issue"),
    ("repro.py", None, None, r"repro.py is missing"),
    ("fix.diff", None, None, r"fix.diff is missing"),
]


@pytest.mark.parametrize(("name", "old", "new", "match"), BAD, ids=[f"{b[0]}: {b[3][:30]}" for b in BAD])
def test_a_folder_breaking_the_format_is_refused_naming_the_file_and_key(tmp_path, name, old, new, match):
    """Each broken file or key is a `ReportError` naming the file, the key and its value."""
    path = _copy_fixture(tmp_path) / FIXTURE_ID / name
    if old is None:
        path.unlink()
    else:
        assert old in path.read_text()
        path.write_text(path.read_text().replace(old, new, 1))
    with pytest.raises(report.ReportError, match=match):
        report.load(FIXTURE_ID, tmp_path / "findings")


# --- the command --------------------------------------------------------------------------------------------------

def test_report_prints_a_finding_as_rendered(fixture_folder, capsys):
    """`meshsim report ID` prints the page `render` makes, and nothing else."""
    assert main(["report", FIXTURE_ID]) == 0
    assert capsys.readouterr().out == report.render(report.load(FIXTURE_ID))


def test_report_without_an_id_lists_the_findings(fixture_folder, capsys):
    """With no id, a table of the findings: number, title, id and upstream status, without the site's markup."""
    assert main(["report"]) == 0
    out = capsys.readouterr().out
    assert f"| 1 | `jax.linear_transpose` of `lax.pmax` over a one-member axis has no transpose rule | " \
           f"`{FIXTURE_ID}` | unknown | none found |" in out
    assert "{doc}" not in out and "toctree" not in out


def test_report_all_writes_each_page_and_the_index(fixture_folder, tmp_path, capsys):
    """`--all --out DIR` writes DIR/<id>.md and DIR/index.md (the list, linking each page, with the toctree)."""
    assert main(["report", "--all", "--out", str(tmp_path / "out")]) == 0
    written = {path.name: path.read_text() for path in (tmp_path / "out").iterdir()}
    findings = report.load_all()
    assert written == {f"{FIXTURE_ID}.md": report.render(findings[0]), "index.md": report.render_index(findings)}
    assert f"]({FIXTURE_ID}.md)" in written["index.md"] and f"\n{FIXTURE_ID}\n```" in written["index.md"]
    assert capsys.readouterr().out.count("wrote ") == 2


@pytest.mark.parametrize(("argv", "match"), [
    (["report", FIXTURE_ID, "--all"], "give finding ids or --all, not both"),
    (["report", "--out", "somewhere"], "--out='somewhere' needs finding ids or --all"),
    (["report", "no-such-finding"], "finding='no-such-finding' has no folder findings/no-such-finding; the "
                                    f"findings are \\['{FIXTURE_ID}'\\]"),
    (["report", FIXTURE_ID, "--out", "/dev/null/x"], "cannot write into --out='/dev/null/x'"),
])
def test_report_bad_arguments_exit_2_with_one_line(fixture_folder, capsys, argv, match):
    """Ids with --all, --out with nothing to write, an unknown id, an unwritable --out: one line, exit 2."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert re.search(match, err) and err.count("\n") == 1, err


# --- the real findings -------------------------------------------------------------------------------------------

def test_every_finding_folder_is_an_entry_of_findings_md():
    """Each folder is named for a FINDINGS.md entry (a bracketed id in it), and a written-up finding's `number`
    is that entry's."""
    entries = _findings_md_ids()
    for finding in report.load_all():
        numbers = [number for number, ids in entries.items() if finding.id in ids]
        assert numbers, f"findings/{finding.id}: no FINDINGS.md entry has this id"
        if isinstance(finding, report.Finding):
            assert finding.number in numbers, (f"findings/{finding.id}/finding.toml: number={finding.number}, but "
                                               f"FINDINGS.md gives the id in entry {numbers[0]}")


def test_the_first_twelve_findings_are_checked_upstream():
    """Entries 1-12 of FINDINGS.md each have an `upstream.toml` that names the commit read and says whether
    and where the fault was reported."""
    entries = _findings_md_ids()
    assert set(range(1, 13)) <= set(entries), entries
    for number in range(1, 13):
        for finding_id in entries[number]:
            upstream = report.load(finding_id).upstream
            assert upstream is not None, f"findings/{finding_id}: upstream.toml is missing"
            assert re.search(r"commit [0-9a-f]{40}", upstream.checked), f"{finding_id}: checked names no commit"


def test_the_site_pages_are_what_meshsim_report_renders_now():
    """docs/findings/ holds exactly `meshsim report --all --out docs/findings`'s files, each as rendered now."""
    findings = report.load_all()
    expected = {f"{finding.id}.md": report.render(finding) for finding in findings}
    expected["index.md"] = report.render_index(findings)
    committed = {path.name: path.read_text() for path in DOCS.glob("*.md")}
    stale = sorted(name for name in expected.keys() | committed.keys() if expected.get(name) != committed.get(name))
    assert not stale, f"docs/findings: {stale} differ from the folders; run `meshsim report --all --out docs/findings`"


def test_findings_md_links_each_report_with_its_upstream_status():
    """Each entry's row of FINDINGS.md's table ends in the cells `findings_cell` makes for the entry's folders
    (the heading's id first, joined by '; '): each report page and its upstream status, as the folders say now."""
    rows = {int(m.group(1)): m.group(0) for m in re.finditer(r"^\| (\d+) \|.*$", FINDINGS_MD.read_text(), re.M)}
    folders = {finding.id: finding for finding in report.load_all()}
    for number, ids in _findings_md_ids().items():
        cells = "; ".join(report.findings_cell(folders[i]) for i in ids if i in folders)
        if cells:
            assert rows.get(number, "").endswith(f"| {cells} |"), \
                f"FINDINGS.md's row {number} must end in `| {cells} |`: {rows.get(number)!r}"


def test_one_folder_and_one_jax_release_throughout():
    """The fixes and the reports read the same folder; the installed jax and jaxlib are the release the
    reproducers and diffs are written against."""
    import importlib.metadata

    assert jax_fixes.FOLDER == report.FOLDER
    assert importlib.metadata.version("jax") == importlib.metadata.version("jaxlib") == report.JAX_VERSION


def _function_lines(source: str, qualified: str) -> tuple[int, int] | None:
    """The first and last line of the function `qualified` ('name', or 'outer.inner' for a nested one or a method) in
    `source`, or of the module-level assignment to it (a primitive such as `pmax_p`); None if there is none."""
    body: list[ast.stmt] = ast.parse(source).body
    found: ast.AST | None = None
    for name in qualified.split("."):
        found = next((node for node in body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
                      and node.name == name), None) or next(
            (node for node in body if isinstance(node, ast.Assign)
             and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)), None)
        if found is None:
            return None
        body = getattr(found, "body", [])
    return found.lineno, found.end_lineno


@pytest.mark.parametrize("folder", [FIXTURE_FINDINGS / FIXTURE_ID] + [report.FOLDER / name for name in WRITTEN],
                         ids=lambda folder: folder.name)
def test_source_lines_lie_in_the_function_they_name_in_the_installed_jax(folder):
    """Each `source_lines` entry's range lies inside the function it names (or, for a primitive, starts at the
    line that makes it) in the installed JAX file."""
    spec = importlib.util.find_spec("jax")
    assert spec is not None and spec.submodule_search_locations
    site = Path(spec.submodule_search_locations[0]).parent
    for line in report.load(folder.name, folder.parent).source_lines:
        place, function = line.split(" ")
        path, span = place.split(":")
        first, _, last = span.partition("-")
        lines = _function_lines((site / path).read_text(), function)
        assert lines, f"{folder.name}: {path} of the installed JAX has no {function}"
        inside = lines[0] <= int(first) <= int(last or first) and (int(last or first) <= lines[1] or
                                                                     int(first) == lines[0])
        assert inside, f"{folder.name}: {line} is not inside {function}, lines {lines[0]}-{lines[1]}"


@pytest.mark.parametrize("folder", [FIXTURE_FINDINGS / FIXTURE_ID] + [report.FOLDER / name for name in WRITTEN],
                         ids=lambda folder: folder.name)
def test_fix_diff_applies_cleanly_to_the_installed_jax(folder, jax_tree):
    """`patch -p1 --dry-run` of the finding's fix.diff in a copy of the installed JAX: no offset, no fuzz."""
    assert patch_problems(folder / "fix.diff", jax_tree) == ""


def test_a_diff_that_does_not_apply_is_caught(tmp_path, jax_tree):
    """The patch check refuses a diff whose context is not in the installed file."""
    broken = tmp_path / "fix.diff"
    text = (FIXTURE_FINDINGS / FIXTURE_ID / "fix.diff").read_text()
    broken.write_text(text.replace(" pmin_p = core.Primitive('pmin')", " pmin_p = core.Primitive('pmin2')"))
    assert "with fuzz 2" in patch_problems(broken, jax_tree)


@pytest.mark.differential
@pytest.mark.parametrize("folder", [FIXTURE_FINDINGS / FIXTURE_ID] + [report.FOLDER / name for name in WRITTEN],
                         ids=lambda folder: folder.name)
def test_reproducer_fails_on_stock_jax_and_passes_with_its_fix(folder):
    """On stock JAX the reproducer exits 1 on its assertion with `stock_failure` in its output; after
    `install_jax_fixes([id])` it exits 0."""
    finding = report.load(folder.name, folder.parent)
    fixture = folder.parent == FIXTURE_FINDINGS
    stock = run_repro(folder, None)
    assert not fails_as_pinned(finding, stock), (fails_as_pinned(finding, stock), stock.stdout, stock.stderr[-2000:])
    fixed = run_repro(folder, "fixes" if fixture else "oracles", FIXTURE if fixture else ROOT)
    assert fixed.returncode == 0, (fixed.stdout, fixed.stderr[-2000:])


@pytest.mark.differential
def test_a_reproducer_that_passes_on_stock_jax_is_caught(tmp_path):
    """The stock check refuses a reproducer that does not fail: the fixture's with its assertion made to hold."""
    folder = _copy_fixture(tmp_path) / FIXTURE_ID
    repro = folder / "repro.py"
    repro.write_text(repro.read_text().replace("assert isinstance(answer, jax.Array) and", "assert True or"))
    problems = fails_as_pinned(report.load(FIXTURE_ID, folder.parent), run_repro(folder, None))
    assert problems and "must end in a failing assert" in problems[0]
