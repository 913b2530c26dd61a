"""The layout guide's example on the simulator: AUTO layouts, committed and uncommitted arguments.

A scenario file (TOML) describes one collective call, which cannot express an ahead-of-time compile
followed by calls; so this scenario is a Python script. It is the guide's code with `jax` replaced by the
simulator (`sim.jit`, `sim.device_put`, `sim.ShapeDtypeStruct`, `layouts.Layout`, `layouts.Format`):

    .venv/bin/python scenarios/library/layout_guide.py
    meshsim run --allow-code scenarios/library/layout_guide.py   # the same, through the command line

It prints the guide's four outcomes, then the relayout copy the first call made (the uncommitted,
row-major `y` had to become column-major), as the trace records it.
"""

from __future__ import annotations

import numpy as np

import sim
from layouts import Format, Layout

SHAPE = (4 * 128, 8 * 128)


def init_fn(x, y):
    return x * 2, y * 3


def apply_fn(x, y):
    return x[0, :], y[:, 0]


def compile_both() -> tuple[sim.Compiled, sim.Compiled]:
    """apply_fn compiled with AUTO layouts, and init_fn compiled to produce apply_fn's input formats."""
    duck = sim.ShapeDtypeStruct(SHAPE, np.float32)
    apply_exe = sim.jit(apply_fn, in_shardings=Format(Layout.AUTO),
                        out_shardings=Format(Layout.AUTO)).trace(duck, duck).lower().compile()
    arg_formats, kwarg_formats = apply_exe.input_formats
    assert len(kwarg_formats) == 0
    assert arg_formats[0].layout.major_to_minor == (0, 1)
    assert arg_formats[1].layout.major_to_minor == (1, 0)
    init_exe = sim.jit(init_fn, out_shardings=arg_formats).trace(duck, duck).lower().compile()
    assert init_exe.output_formats == arg_formats
    return apply_exe, init_exe


def test(apply_exe: sim.Compiled, x: sim.Array, y: sim.Array, msg: str) -> None:
    """The guide's `test`: show both layouts and whether the compiled apply_fn accepts them."""
    print(f"-- {msg}:")
    print("x major_to_minor =", x.format.layout.major_to_minor)
    print("y major_to_minor =", y.format.layout.major_to_minor)
    try:
        apply_exe(x, y)
        print("-> `apply` called successfully")
    except ValueError as e:
        assert "does not match" in str(e)
        print("-> error: mismatched input layouts")
    print()


def main() -> None:
    """Run the guide's four cases and show the copy the first one needed."""
    apply_exe, init_exe = compile_both()
    ones = np.ones(SHAPE, np.float32)
    dev = 0
    x1 = y1 = sim.device_put(ones)
    test(apply_exe, x1, y1, "uncommitted with mismatched layout")
    copies = list(apply_exe.last_run.trace)
    x2, y2 = init_exe(x1, y1)
    test(apply_exe, x2, y2, "uncommitted with matching layout")
    x3 = sim.device_put(ones)
    y3 = sim.device_put(ones, Format(Layout(major_to_minor=(1, 0)), sim.SingleDeviceSharding(dev)))
    test(apply_exe, x3, y3, "committed with matching layout")
    x4 = sim.device_put(ones)
    y4 = sim.device_put(ones, Format(Layout(major_to_minor=(0, 1)), sim.SingleDeviceSharding(dev)))
    test(apply_exe, x4, y4, "committed with mismatched layout")
    try:
        apply_exe(x4, y4)
    except ValueError as error:
        print(f"the error: {error}\n")
    for record in copies:
        print(f"trace of the first call: {record.kind} of {record.detail['what']} on device {record.src}, "
              f"{record.size_bytes} bytes in {record.detail['runs']} runs, "
              f"{(record.arrival_time_s - record.start_time_s) * 1e6:.1f} us simulated")


if __name__ == "__main__":
    main()
