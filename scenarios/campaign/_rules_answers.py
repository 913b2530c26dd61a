"""JAX's own answers on the rules campaign's calls that no finding explains, to show what a fix leaves alone.

`answers(op, kind, examples)` draws calls as `search` does (`drawn`, `batch_axes`; derandomized, so two
processes draw the same calls), skips every call a finding's predicate fits (`oracles._rules.classify`, the
`KNOWN` table), and returns a digest of what JAX answers on each of the others: for "transpose" the
forward program, `jax.vjp`, `jax.grad` and `jax.linear_transpose`; for "vmap" `jax.vmap` of the program. Run
once with stock JAX and once after `oracles.install_jax_fixes()` (`tests/campaign.py --answers [--fixes]`),
equal digests say the fixes change no answer outside the findings. Like `_rules_search`, this imports jax.

    >>> answers("psum", "transpose", 3)                         # doctest: +SKIP
    {'op': 'psum', 'kind': 'transpose', 'skipped': 0, 'digests': ['3f1c...', '9a07...', 'e2d4...']}
"""

from __future__ import annotations

import hashlib
from typing import Any

import jax
import numpy as np
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from oracles._rules import Program, _jax_transposes, classify, small_ints
from scenarios.campaign._answers import Case
from scenarios.campaign._rules_search import batch_axes, drawn


def digest(values: list[Any]) -> str:
    """The shapes, dtypes and bytes of `values` (arrays, or the text of an error), hashed."""
    h = hashlib.sha256()
    for v in values:
        if isinstance(v, str):
            h.update(v.encode())
            continue
        a = np.asarray(v)
        h.update(f"{a.shape}{a.dtype}".encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


def transposed(case: Case, check_vma: bool) -> list[Any]:
    """JAX's forward program and its three transposes at the campaign's cotangent (or the error raised)."""
    p = Program(case, check_vma)
    forward = np.asarray(p.jax(*p.globals))
    ct = small_ints(forward.shape, forward.dtype, 7)
    try:
        theirs = _jax_transposes(p, tuple(p.globals[k] for k in p.linear), ct)
    except Exception as error:  # an error is an answer: the same error with and without the fixes
        return [forward, f"{type(error).__name__}: {error}"]
    return [forward, *(x for kind in sorted(theirs) for x in theirs[kind])]


def vmapped(case: Case, check_vma: bool, size: int, axes: list[int | None]) -> list[Any]:
    """jax.vmap of the program over `axes` on the batch `vmap_problem` builds (or the error raised)."""
    p = Program(case, check_vma, whole=True)
    rng = np.random.default_rng(size)
    variants = [[g if a is None else (g + rng.integers(0, 3, g.shape).astype(g.dtype) if k in p.linear else g)
                 for k, (g, a) in enumerate(zip(p.globals, axes))] for _ in range(size)]
    stacked = [p.globals[k] if a is None else np.stack([v[k] for v in variants], axis=a) for k, a in enumerate(axes)]
    try:
        return [jax.vmap(p.jax, in_axes=tuple(axes))(*stacked)]
    except Exception as error:  # an error is an answer: the same error with and without the fixes
        return [f"{type(error).__name__}: {error}"]


def answers(op: str, kind: str, examples: int) -> dict[str, Any]:
    """Digests of JAX's answers on the derandomized calls of (`op`, `kind`) that no finding's predicate fits.

    Returns:
        `{"op", "kind", "skipped", "digests"}`: how many calls a predicate fitted, one digest per other call.
    """
    digests: list[str] = []
    skipped = [0]
    rest = st.tuples(st.integers(1, 3), st.data()) if kind == "vmap" else st.just(None)

    @settings(max_examples=examples, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate])
    @given(drawn(op, floats=kind == "transpose"), rest)
    def prop(call: tuple[Case, bool], extra: Any) -> None:
        case, check_vma = call
        if kind == "vmap":
            size, data = extra
            axes = data.draw(batch_axes(case), label="in_axes")
            known, values = classify(kind, case, axes), lambda: vmapped(case, check_vma, size, axes)
        else:
            known, values = classify(kind, case, check_vma), lambda: transposed(case, check_vma)
        if known is not None:
            skipped[0] += 1
            return
        digests.append(digest(values()))

    prop()
    return {"op": op, "kind": kind, "skipped": skipped[0], "digests": digests}
