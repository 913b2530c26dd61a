"""`Format`: a layout paired with a sharding, the whole picture of where an array's bytes live."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from layouts._errors import InvalidArgumentError, InvalidTypeError
from layouts._layout import AUTO, AutoLayout, Layout


@dataclass(frozen=True)
class Format:
    """A `Layout` (or `Layout.AUTO`, or None for the default) with a sharding (or None for the default).

    The sharding says which devices hold which block (`sim.NamedSharding`, `sim.SingleDeviceSharding`);
    the layout says how each block sits in its device's memory. As in JAX, a concrete layout needs a
    concrete sharding: a block's layout means nothing before it is known where the block lives.

    >>> Format(Layout.AUTO)
    Format(layout=AUTO, sharding=None)
    >>> Format(Layout((1, 0)))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    layouts._errors.InvalidArgumentError: Format(layout=Layout(major_to_minor=(1, 0)), sharding=None): a concrete ...

    Raises:
        InvalidTypeError: `layout` is not a Layout, Layout.AUTO or None.
        InvalidArgumentError: a concrete `layout` without a `sharding`.
    """

    layout: Layout | AutoLayout | None = None
    sharding: Any = None

    def __post_init__(self) -> None:
        if self.layout is not None and not isinstance(self.layout, (Layout, AutoLayout)):
            raise InvalidTypeError(f"layout={self.layout!r} must be a layouts.Layout, Layout.AUTO or None")
        if isinstance(self.layout, Layout) and self.sharding is None:
            raise InvalidArgumentError(
                f"Format(layout={self.layout!r}, sharding=None): a concrete layout needs a sharding; pass one, "
                f"e.g. Format(layout, sim.SingleDeviceSharding(0)) or Format(layout, sim.NamedSharding(mesh, P('x')))"
            )

    @property
    def is_auto(self) -> bool:
        """Whether the layout is left to the compiler."""
        return self.layout is AUTO
