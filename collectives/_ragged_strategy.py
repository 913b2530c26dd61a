"""The calls of ragged_all_to_all the generated tests draw (`Definition.strategy`): receive tables first, then the
senders' tables worked out from them (`sender_tables`), so every drawn call is valid."""

from __future__ import annotations

from typing import Any

import numpy as np

from collectives._strategy import Axes, Sample, small_dims

INDEX_ARGS = ("input_offsets", "send_sizes", "output_offsets", "recv_sizes")


def sender_tables(groups: Any, recv_sizes: list[list[int]],
                  recv_offsets: list[list[int]]) -> tuple[list[list[int]], list[list[int]]]:
    """`send_sizes` and `output_offsets` of every device: the tiled all_to_all of the receivers' tables.

    `groups` lists every group's device ids in group order. Receiver r's slice s * per + j comes from
    group member s, which sends it as its slice r * per + j.
    """
    n, k = len(recv_sizes), len(recv_sizes[0])
    send_sizes, output_offsets = [[0] * k for _ in range(n)], [[0] * k for _ in range(n)]
    for members in groups:
        per = k // len(members)
        for r, receiver in enumerate(members):
            for s, sender in enumerate(members):
                for j in range(per):
                    send_sizes[sender][r * per + j] = recv_sizes[receiver][s * per + j]
                    output_offsets[sender][r * per + j] = recv_offsets[receiver][s * per + j]
    return send_sizes, output_offsets


def strategy(st: Any, axes: Axes, *, transposable: bool = False, **options: Any) -> Any:
    """Valid calls: sizes agree, slices stay in bounds, no two receive slices overlap (send slices may,
    unless `transposable`: JAX's transpose writes the rows back to the send slices, so where two of them
    read one row it keeps one cotangent; meshsim's adds them, see FINDINGS.md).

    1 or 2 slices per peer of 0 to 3 rows; receive slices laid out in shuffled order with 0 to 2 padding
    rows before each, so slices end exactly at the last row now and then; operands of rank 1 to 3."""
    @st.composite
    def packed(draw: Any, sizes: list[int]) -> tuple[list[int], int]:
        offsets, cursor = [0] * len(sizes), 0
        for i in draw(st.permutations(range(len(sizes)))):
            offsets[i] = cursor + draw(st.integers(0, 2))
            cursor = offsets[i] + sizes[i]
        return offsets, cursor

    @st.composite
    def sample(draw: Any) -> Sample:
        n = int(np.prod(list(axes.mesh_shape.values())))
        k = axes.group_size * draw(st.integers(1, 2))
        recv_sizes = [draw(st.lists(st.integers(0, 3), min_size=k, max_size=k)) for _ in range(n)]
        recv_offsets, out_rows = zip(*(draw(packed(sizes)) for sizes in recv_sizes))
        send_sizes, output_offsets = sender_tables(axes.groups, recv_sizes, list(recv_offsets))
        input_offsets, in_rows = zip(*(draw(packed(sizes)) for sizes in send_sizes))
        out_rows, rows = max(1, max(out_rows) + draw(st.integers(0, 2))), max(1, max(in_rows) + draw(st.integers(0, 2)))
        if not transposable:
            input_offsets = [[draw(st.integers(0, rows - size)) if draw(st.booleans()) else offset
                              for offset, size in zip(offsets, sizes)]
                             for offsets, sizes in zip(input_offsets, send_sizes)]
        tables = zip(input_offsets, send_sizes, output_offsets, recv_sizes)
        index = tuple(dict(zip(INDEX_ARGS, device)) for device in tables)
        shapes = st.lists(small_dims(st), max_size=2).map(
            lambda trailing: {"operand": (rows, *trailing), "output": (out_rows, *trailing)})
        return Sample({}, shapes, index)
    return sample()
