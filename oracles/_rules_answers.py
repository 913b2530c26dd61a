"""JAX's own answers on one call of the rules campaign, as a digest: what a fix must leave alone.

`transposed(case, check_vma)` is what `transpose_problem` asks JAX (the forward program, `jax.vjp`,
`jax.grad` and `jax.linear_transpose` at the campaign's cotangent), `vmapped(case, check_vma, size, axes)`
what `vmap_problem` asks (`jax.vmap` of the program on its batch); `digest` hashes either (shapes, dtypes,
bytes, or the text of the error JAX raised). `scenarios.campaign._rules_answers` draws the calls. Like
`oracles._rules`, this imports jax: only a process made for it imports it.

    >>> digest(transposed(case, check_vma=True))               # doctest: +SKIP
    '3f1c0b9e4d2a7c61'
"""

from __future__ import annotations

import hashlib
from typing import Any

import jax
import numpy as np

from oracles._rules import Case, Program, _jax_transposes, small_ints


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
