"""Corrected rules for the findings of FINDINGS.md, installed on request, with what an upstream report needs.

    import oracles
    oracles.install_jax_fixes()                                    # every fix
    oracles.install_jax_fixes(["untiled-all-to-all-transpose"])    # one

Each confirmed finding has an id (FINDINGS.md gives it in brackets), a function that installs its corrected
rule through the registries JAX itself reads (`ad.primitive_transposes`, `batching.fancy_primitive_batchers`
and `batching.primitive_batchers`, a primitive's abstract evaluation): no file of JAX is edited, and the
process that calls it is the only one changed. Its folder `findings/<id>/` holds what a report upstream needs:

- `repro.py`: a reproducer runnable with stock JAX 0.10.2 (plus `oracles.install_cpu_lowerings()` where
  XLA:CPU lacks the collective); it prints JAX's answer and the correct one and ends in an assertion that
  holds only when JAX is right, so it fails on stock JAX and passes with the fix installed;
- `fix.diff`: the same change as a unified diff against JAX 0.10.2's source (`a/jax/_src/...`);
- `finding.toml`: the report's text (`title`, `summary`, `expected`, `actual`, `known_by`, `source_lines`,
  `stock_failure`, `gpu_tpu`);
- `upstream.toml`: whether the finding is still in the newest JAX source seen, how that was checked, and
  whether it is reported upstream.

`report` reads a folder and renders it as an issue for JAX's tracker (`report.render(report.load(id))`; the
command line's `meshsim report`).

Importing this package does not import jax: a fix imports it when it is installed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from oracles.jax_fixes import (
    _nested,
    _partial,
    _permute_order,
    _ragged,
    _rules,
    _vma,
    _vmap_axes,
    _vmap_exchange,
    _vmap_permute,
)
from oracles.jax_fixes import _report as report

FOLDER = Path(__file__).resolve().parent / "findings"

# id -> the function that installs its fix (each imports jax and is idempotent)
FIXES: dict[str, Callable[[], None]] = {**_ragged.FIXES, **_rules.FIXES, **_vma.FIXES, **_vmap_axes.FIXES,
                                        **_vmap_permute.FIXES, **_vmap_exchange.FIXES, **_nested.FIXES,
                                        **_partial.FIXES, **_permute_order.FIXES}

_installed: list[str] = []


def install_jax_fixes(names: Iterable[str] | str | None = None) -> tuple[str, ...]:
    """Install the fixes of `names` (default: every finding's), once each; return the ids installed so far.

    Raises:
        ValueError: a name that is no finding's id, with the ids there are.
    """
    chosen = list(FIXES) if names is None else [names] if isinstance(names, str) else list(names)
    unknown = [name for name in chosen if name not in FIXES]
    if unknown:
        raise ValueError(f"install_jax_fixes: names={unknown!r} are not findings; the fixes are {sorted(FIXES)}")
    for name in chosen:
        if name not in _installed:
            FIXES[name]()
            _installed.append(name)
    return tuple(_installed)


def installed() -> tuple[str, ...]:
    """The ids whose fixes this process has installed."""
    return tuple(_installed)


__all__ = ["FIXES", "FOLDER", "install_jax_fixes", "installed", "report"]
