"""The label of a collective the bridge runs: the user's source line and JAX's name stack (`sim.labelled`)."""

from __future__ import annotations

from typing import Any

from oracles._bridge_diagnostics import source_line


def call_label(eqn: Any, where: str = "") -> str:
    """'file:line:column (function)', then JAX's name stack in brackets when it has one
    (`jax.named_scope`, `jvp(...)`, `transpose(...)`): e.g. 'moe.py:57:8 (layer) [moe/dispatch]'.
    `where` is the line used when JAX kept none of the user's (the enclosing shard_map's)."""
    line = source_line(eqn, where)
    stack = str(getattr(eqn.source_info, "name_stack", "") or "")
    return f"{line} [{stack}]" if stack else line
