"""JAX's own answers on the rules campaign's calls that no finding explains, to show what a fix leaves alone.

`answers(op, kind, examples)` draws calls as `search` does (`drawn`, `batch_axes`; derandomized, so two
processes draw the same calls), skips every call a finding's predicate fits (`oracles._rules.classify`, the
`KNOWN` table), and returns a digest of what JAX answers on each of the others (`oracles._rules_answers`):
for "transpose" the forward program, `jax.vjp`, `jax.grad` and `jax.linear_transpose`; for "vmap"
`jax.vmap` of the program. Run once with stock JAX and once after `oracles.install_jax_fixes()`
(`tests/campaign.py --answers [--fixes]`), equal digests say the fixes change no answer outside the
findings. Like `_rules_search`, this imports jax (through oracles): only a process made for it imports it.

    >>> answers("psum", "transpose", 3)                         # doctest: +SKIP
    {'op': 'psum', 'kind': 'transpose', 'skipped': 0, 'digests': ['3f1c...', '9a07...', 'e2d4...']}
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from oracles._rules import classify
from oracles._rules_answers import digest, transposed, vmapped
from scenarios.campaign._answers import Case
from scenarios.campaign._rules_search import batch_axes, drawn


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
