"""Each finding's upstream report, rendered from its folder as JAX's bug tracker takes it.

JAX's bug-report form has a title and two fields, "Description" and "System info". `render` fills them from
`findings/<id>/`: the summary, the reproducer (`repro.py`, runnable with stock JAX), what it prints there
(`stock_failure`), expected against actual, how the expected answer is known, the faulty source lines, the
patch (`fix.diff`) and the GPU/TPU note; then, outside the issue text, whether the fault is still in the
newest JAX source read and whether it is already reported (`upstream.toml`). `render_index` lists them.

    >>> finding = load("untiled-all-to-all-transpose")           # doctest: +SKIP
    >>> print(render(finding).splitlines()[0])                   # doctest: +SKIP
    # `jax.grad` of an untiled all_to_all with split_axis != concat_axis fails

Nothing here imports jax: the text is read from the folder, never computed by running it.
"""

from __future__ import annotations

import re

from oracles.jax_fixes._folder import (
    FINDING_KEYS,
    FOLDER,
    JAX_VERSION,
    STILL_PRESENT,
    UPSTREAM_KEYS,
    Finding,
    Pending,
    ReportError,
    Upstream,
    ids,
    load,
    load_all,
    load_upstream,
)


def render(finding: Finding | Pending) -> str:
    """The issue text of `finding` (markdown): its title, JAX's two fields, then the upstream status. A
    `Pending` finding's page says so and gives its upstream status."""
    if isinstance(finding, Pending):
        return "\n\n".join([f"# `{finding.id}`", _PENDING_TEXT.format(id=finding.id), "## Upstream status",
                             *_status(finding.upstream)]) + "\n"
    parts = [f"# {finding.title}", _preface(finding), "## Description", finding.summary.strip(),
             *_reproducer(finding), "### Expected and actual", f"**Expected.** {finding.expected.strip()}",
             f"**Actual.** {finding.actual.strip()}", "### How the expected answer is known",
             finding.known_by.strip(), "### Where the fault is", _sources(finding.source_lines),
             "### Proposed fix", f"The same change as a patch against JAX {JAX_VERSION} (`patch -p1` from the "
             "folder that holds `jax/`):", _fenced(finding.diff, "diff"), "### GPU and TPU",
             finding.gpu_tpu.strip(), "## System info (python version, jaxlib version, accelerator, etc.)",
             _fenced(_system(finding), "text"), "## Upstream status", *_status(finding.upstream)]
    return "\n\n".join(parts) + "\n"


def render_index(findings: tuple[Finding | Pending, ...], site: bool = True) -> str:
    """The list of `findings` (markdown): number, title, id, JAX today, upstream report. For the `site`, each
    title links its page and the pages are the table of contents; otherwise the list says how to print one."""
    parts = ["# Reports for JAX's tracker", _INDEX_TEXT if site else _LIST_TEXT]
    if not findings:
        return "\n\n".join([*parts, "No finding is checked or written up yet."]) + "\n"
    rows = [_row(finding, site) for finding in findings]
    parts.append("\n".join(["| # | finding | id | JAX today | upstream |", "|---|---|---|---|---|", *rows]))
    if site:
        parts.append("\n".join(["```{toctree}", ":hidden:", "", *(f.id for f in findings), "```"]))
    return "\n\n".join(parts) + "\n"


def _row(finding: Finding | Pending, site: bool) -> str:
    """The index's row of `finding`."""
    if isinstance(finding, Pending):
        number, title = "", "not written up yet"
    else:
        number, title = str(finding.number), _cell(finding.title)
    linked = f"[{title}]({finding.id}.md)" if site else title
    return f"| {number} | {linked} | `{finding.id}` | {' | '.join(_upstream_cells(finding.upstream))} |"


def findings_cell(finding: Finding | Pending) -> str:
    """The cell of FINDINGS.md's table for `finding`: a link to its report page and, in a few words, whether
    the fault is still in JAX's newest source and whether it is reported upstream."""
    if finding.upstream is None:
        return f"[report](docs/findings/{finding.id}.md): upstream not checked"
    seen, reported = _upstream_cells(finding.upstream)
    told = f"reported: {reported}" if finding.upstream.reported.startswith("https://") else "not reported"
    return f"[report](docs/findings/{finding.id}.md): {seen}, {told}"


_INDEX_TEXT = ("One page per finding of {doc}`../reference/findings`, written as an issue for JAX's bug tracker: "
               "a reproducer that runs with stock JAX, expected against actual, how the expected answer is known, "
               "the faulty source lines and the patch. The pages are `meshsim report --all --out docs/findings` "
               "({doc}`../reference/report`); `tests/test_jax_reports.py` checks that they are what the command "
               "renders now, that each reproducer fails on stock JAX as its page says and passes with the fix "
               "installed, and that each patch applies to the installed JAX.")


_PENDING_TEXT = ("The report of this finding is not written yet: its folder, `oracles/jax_fixes/findings/{id}/`, "
                 "holds its upstream status but not yet the text, the reproducer and the patch (`finding.toml`, "
                 "`repro.py`, `fix.diff`). FINDINGS.md describes the finding.")
_LIST_TEXT = ("The findings of FINDINGS.md written up as issues for JAX's tracker. `meshsim report ID` prints one, "
              "`meshsim report --all --out DIR` writes them all.")


def _preface(finding: Finding) -> str:
    return (f"Finding {finding.number} of meshsim's FINDINGS.md (`{finding.id}`), rendered by `meshsim report "
            f"{finding.id}` from `oracles/jax_fixes/findings/{finding.id}/`. To file it, give the title above "
            "as the issue's title and the sections *Description* and *System info* as the bug-report form's two "
            "fields.")


def _reproducer(finding: Finding) -> list[str]:
    """The reproducer's heading, the script and what it ends with on stock JAX."""
    devices = f", {_devices(finding.devices)} the script sets up itself (virtual)" if finding.devices else ""
    return ["### Reproducer", f"A standalone script for stock JAX {JAX_VERSION} on CPU{devices}:",
            _fenced(finding.repro, "python"), f"On stock JAX {JAX_VERSION} it fails with:",
            _fenced(finding.stock_failure, "text")]


def _sources(lines: tuple[str, ...]) -> str:
    """One bullet per 'jax/_src/<file>.py:<first>-<last> <function>': the function, linked at the release tag."""
    bullets = []
    for line in lines:
        place, function = line.split(" ")
        path, span = place.split(":")
        first, _, last = span.partition("-")
        anchor = f"L{first}-L{last}" if last else f"L{first}"
        bullets.append(f"- `{function}` in `{path}`, lines {span} ([source at jax-v{JAX_VERSION}]"
                       f"(https://github.com/jax-ml/jax/blob/jax-v{JAX_VERSION}/{path}#{anchor}))")
    return "\n".join(bullets)


def _system(finding: Finding) -> str:
    devices = (f"CPU, {_devices(finding.devices)} (XLA_FLAGS=--xla_force_host_platform_device_count={finding.devices})"
               if finding.devices else "CPU")
    return f"jax:    {JAX_VERSION}\njaxlib: {JAX_VERSION}\ndevices: {devices}"


def _devices(count: int) -> str:
    return f"{count} device{'' if count == 1 else 's'}"


def _status(upstream: Upstream | None) -> list[str]:
    """The upstream status, marked as no part of the issue text."""
    if upstream is None:
        return ["Not part of the issue text. Not checked yet: the folder has no `upstream.toml`."]
    return [f"Not part of the issue text. **{upstream.status[0].upper()}{upstream.status[1:]}.**",
            f"*Checked:* {upstream.checked.strip()}", f"*Reported:* {_link(upstream.reported.strip())}"]


def _upstream_cells(upstream: Upstream | None) -> tuple[str, str]:
    """The index's two cells: is the fault in the newest JAX read, and the upstream issue (or 'none found')."""
    if upstream is None:
        return "not checked", "not checked"
    reported = _link(upstream.reported) if upstream.reported.startswith("https://") else "none found"
    return STILL_PRESENT[upstream.still_present], reported


def _link(text: str) -> str:
    return f"<{text}>" if text.startswith("https://") else text


def _cell(text: str) -> str:
    """`text` inside a markdown table cell: one line, its pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def _fenced(text: str, info: str) -> str:
    """`text` in a fenced code block whose fence is longer than any run of backticks inside it."""
    runs = [len(run) for run in re.findall(r"`+", text)]
    fence = "`" * max(3, max(runs, default=0) + 1)
    return f"{fence}{info}\n{text.rstrip()}\n{fence}"


__all__ = ["FINDING_KEYS", "FOLDER", "JAX_VERSION", "STILL_PRESENT", "UPSTREAM_KEYS", "Finding", "Pending",
           "ReportError", "Upstream", "findings_cell", "ids", "load", "load_all", "load_upstream", "render",
           "render_index"]
