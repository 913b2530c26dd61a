"""The fix of the fixture finding (`findings/fixture-pmax-one-member/`), installed as a real fix is: through
JAX's registry of transpose rules, in the process that calls it only. `install_jax_fixes` takes the same
names; `tests/test_jax_reports.py` runs the fixture's reproducer after it."""

from __future__ import annotations

from collections.abc import Callable, Iterable


def _pmax_one_member() -> None:
    """Transpose `pmax` where it is linear: over axes of one member it is the identity."""
    from jax._src.interpreters import ad
    from jax._src.lax import parallel

    def transpose(ct, arg, *, axes, axis_index_groups):
        if parallel.axis_size(axes) != 1:
            raise NotImplementedError("pmax is linear only over an axis of one member")
        return [ct]

    ad.primitive_transposes[parallel.pmax_p] = transpose


FIXES: dict[str, Callable[[], None]] = {"fixture-pmax-one-member": _pmax_one_member}


def install_jax_fixes(names: Iterable[str]) -> None:
    """Install the fixture's fixes named in `names`."""
    for name in names:
        FIXES[name]()
