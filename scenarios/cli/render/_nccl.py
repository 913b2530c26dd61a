"""`nccl_table`: a sweep's rows as text in the layout of nccl-tests' output, one block per collective x mesh.

nccl-tests prints, for each size, `size count type redop root time algbw busbw #wrong` under a two-line
`#` header (src/common.cu). A sweep varies more than the size, so each block (a collective on a mesh and
axis) holds one table per network x algorithm, its `#` line naming them; `root` (always -1 for these
collectives) and `#wrong` (the simulator's bytes are checked elsewhere) give way to the algorithm that ran,
which is what 'auto' picked. A point the simulator rejected shows its size and the simulator's message.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from scenarios.sweep import OPERATIONS

_TYPES = {"float32": "float", "float16": "half", "float64": "double"}  # nccl-tests' type names
_HEADER = ("#{:>11}  {:>12}  {:>8}  {:>6}  {:>10}  {:>8}  {:>8}  {}")
_ROW = "{:>12}  {:>12}  {:>8}  {:>6}  {:>10}  {:>8}  {:>8}  {}"


def nccl_table(rows: Iterable[dict[str, Any]]) -> list[str]:
    """The lines of the table of `rows` (the sweep's `COLUMNS`), blocks and tables in order of first appearance,
    each table's rows by dtype, then size."""
    blocks: dict[tuple, dict[tuple, list[dict]]] = {}
    for row in rows:
        block = blocks.setdefault((row["collective"], row["mesh"], row["axis_name"] or ""), {})
        block.setdefault((row["network"], row["algorithm"]), []).append(row)
    lines: list[str] = []
    for (collective, mesh, axis_name), tables in blocks.items():
        lines += _block_header(collective, mesh, axis_name, tables)
        for (network, algorithm), table_rows in tables.items():
            lines += [f"# network {network}, algorithm {algorithm}", *_column_header()]
            lines += [_line(row) for row in sorted(table_rows, key=lambda r: (r["dtype"], r["size_bytes"]))]
            lines.append("")
    return lines


def _block_header(collective: str, mesh: str, axis_name: str, tables: dict[tuple, list[dict]]) -> list[str]:
    """The `#` lines opening a block: what runs where, and how busbw is derived."""
    operation = OPERATIONS[collective]
    devices = next((r["devices"] for rows in tables.values() for r in rows if r["devices"]), None)
    over = f", axis_name {axis_name} ({devices} devices)" if devices else ""
    return [f"# {collective} on mesh {mesh}{over}: nccl-tests {operation.nccl}, "
            f"busbw = algbw x {operation.factor}", "#"]


def _column_header() -> list[str]:
    """nccl-tests' two header lines: the names, then the units."""
    return [_HEADER.format("size", "count", "type", "redop", "time", "algbw", "busbw", "algorithm"),
            _HEADER.format("(B)", "(elements)", "", "", "(us)", "(GB/s)", "(GB/s)", "(ran)")]


def _line(row: dict[str, Any]) -> str:
    """One size: its figures, or the simulator's message for a rejected point."""
    kind, redop = _TYPES.get(row["dtype"], row["dtype"]), OPERATIONS[row["collective"]].redop
    if row["error"]:
        return f"{row['size_bytes']:>12}  {'-':>12}  {kind:>8}  {redop:>6}  rejected: {row['error']}"
    return _ROW.format(row["size_bytes"], row["count"], kind, redop, _number(row["time_s"], 1e6),
                       _number(row["algbw_GB_per_s"]), _number(row["busbw_GB_per_s"]), row["algorithm_run"])


def _number(value: float | None, scale: float = 1.0) -> str:
    """Two decimals, as nccl-tests prints times and bandwidths; '-' when there is none (a zero time)."""
    return "-" if value is None else f"{value * scale:.2f}"
