"""`cpu_ragged_child.py` with fixes of `oracles.jax_fixes` installed, for tests/test_jax_fixes_ragged.py.

Started as `python tests/jax_fixes_ragged_child.py ID ...`: 8 CPU devices, the CPU ragged lowering installed
before jax is imported (as `cpu_ragged_child` does), `oracles.install_cpu_lowerings()`, then
`oracles.install_jax_fixes([ID, ...])`; it answers the same jobs as `cpu_ragged_child.py` ("run", "vjp",
"grad", "vmap", "vmap_data"), so a pinned program runs unchanged with the corrected rules.
"""

from __future__ import annotations

import sys

import cpu_ragged_child
import jax
from jax_child import serve

import oracles

oracles.install_cpu_lowerings()
FIXES = oracles.install_jax_fixes(sys.argv[1:])


def main() -> None:
    """Announce the fixes installed, then answer batches until stdin closes."""
    serve(cpu_ragged_child.answer, {"installed": cpu_ragged_child.INSTALLED, "fixes": list(FIXES),
                                    "devices": len(jax.devices())})


if __name__ == "__main__":
    main()
