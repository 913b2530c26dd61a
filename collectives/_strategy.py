"""What a collective's strategy is given (`Axes`) and returns (`Sample`), and the shape helpers they share.

A definition's `strategy(st, axes, **options)` gets hypothesis's `strategies` module from the tests (this
package never imports hypothesis) and the mesh, axis name and groups the tests drew, and returns a
strategy of `Sample`s: the call's own parameters, the shapes of its data arrays and its index arrays. The
tests fill the arrays with values and dtypes of their choosing, so one strategy serves the simulator,
the executable spec and real JAX alike; every sample is a call the docs define and JAX 0.10.2 accepts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collectives._algorithm import Algorithm



@dataclass(frozen=True)
class Axes:
    """Where a drawn call runs: the mesh, the axis name, the groups, and every group's device ids in order."""

    mesh_shape: dict[str, int]
    axis_name: Any
    axis_index_groups: list[list[int]] | None
    group_size: int
    groups: tuple[tuple[int, ...], ...]


@dataclass(frozen=True, eq=False)
class Sample:
    """One drawn call without its values.

    `params` join (and may replace) the drawn `axis_name` and `axis_index_groups`; `shapes` is a strategy
    of {data array: shape}, drawn once per leaf when the tests build a pytree; `index[d]` holds device d's
    index arrays (offsets and sizes) by name, as lists of ints.
    """

    params: dict[str, Any]
    shapes: Any
    index: tuple[dict[str, list[int]], ...] = ()


def small_dims(st: Any) -> Any:
    """A dimension of 1 to 3 (shrinking to 1), or now and then 0."""
    return st.integers(0, 6).map(lambda v: 0 if v == 6 else 1 + v % 3)


def dims(st: Any, rank: int) -> Any:
    """A list of `rank` small dimensions."""
    return st.lists(small_dims(st), min_size=rank, max_size=rank)


def any_shape(st: Any, axes: Axes, **options: Any) -> Any:
    """The strategy of an elementwise collective: one array `x` of rank 0 to 3, no parameters of its own."""
    shape = st.integers(0, 3).flatmap(lambda rank: dims(st, rank)).map(lambda s: {"x": tuple(s)})
    return st.just(Sample({}, shape))


def split_shape(st: Any, axes: Axes, key: str, negative: bool) -> Any:
    """A rank 1 to 3 `x` cut into one chunk per group member along `key` (psum_scatter, pscatter): that
    dimension is the group size untiled, a non-zero multiple of it tiled; `negative` axes allowed or not."""
    @st.composite
    def sample(draw: Any) -> Sample:
        rank, tiled = draw(st.integers(1, 3)), draw(st.booleans())
        axis = draw(st.integers(-rank if negative else 0, rank - 1))

        @st.composite
        def shape(draw_shape: Any) -> dict[str, tuple[int, ...]]:
            chosen = draw_shape(dims(st, rank))
            chosen[axis] = axes.group_size * (draw_shape(st.integers(1, 2)) if tiled else 1)
            return {"x": tuple(chosen)}

        return Sample({key: axis, "tiled": tiled}, shape())
    return sample()


def algorithms(st: Any, axes: Axes, records: tuple[Algorithm, ...]) -> Any:
    """The name of one of a collective's algorithm `records` that runs on the drawn group (powers of two where
    an algorithm needs them), 'auto' included: the generated tests run every algorithm on the same calls.
    'in_network' is left out: it needs a switch that reduces, and generated calls run on the default network."""
    return st.sampled_from([a.name for a in records if a.fits(axes.group_size) and not a.in_network])


def axes_only(st: Any, axes: Axes, **options: Any) -> Any:
    """The strategy of a collective with no arrays and no parameters of its own: only the axes vary."""
    return st.just(Sample({}, st.just({})))
