"""FINDINGS.md 17-30 as one script: JAX 0.10.2's batching rules for collectives over a vmap axis, psend/precv's,
reverse mode of a nested shard_map, a reduction over a size-1 axis beside a nested shard_map, and the types and
numbering the bridge found slipping (nested unchecked shard_maps, spmd_axis_name, grouped extrema, ppermute's
order, rng_bit_generator's bits).

`python tests/jax_vmap_axis_child.py` (4 CPU devices) runs each finding's program and prints one JSON line,
`{finding id: what JAX gives}`: the values as lists, or `"raised <type>: <message>"`. tests/test_jax_coverage.py
compares them with JAX's pinned behaviour and with the correct answers.
"""

from __future__ import annotations

import json
import os
import sys

os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=4".strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as P


def outcome(f, *args) -> object:
    """The result as nested lists, or the exception's type and first line."""
    try:
        return np.asarray(f(*args)).tolist()
    except Exception as error:  # the pinned behaviour is an exception
        return f"raised {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"


def main() -> None:
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:2]), ("x",))
    x = jnp.array([1.0, 2.0])

    def psum_unbatched(check_vma: bool):
        body = jax.vmap(lambda v: lax.psum(v, "y"), in_axes=None, axis_size=3, axis_name="y")
        return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P(None, "x"), check_vma=check_vma))

    def ppermute_tuple(b):
        inner = jax.vmap(lambda v: lax.ppermute(v, ("x", "y"), [(0, 1), (1, 0)]), axis_name="y")
        return inner(b[0])[None]

    swapped = jax.jit(jax.shard_map(ppermute_tuple, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))
    on_mesh = jax.jit(jax.shard_map(lambda b: lax.ppermute(b, ("x", "y"), [(0, 1), (1, 0)]),
                                    mesh=jax.sharding.Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("x", "y")),
                                    in_specs=P("x", "y"), out_specs=P("x", "y"), check_vma=False))
    def pair(b):
        token = lax.psend(b, "x", [(0, 1), (1, 0)])
        return lax.precv(token, jax.ShapeDtypeStruct(b.shape, b.dtype), "x", [(0, 1), (1, 0)])

    piped = jax.shard_map(pair, mesh=mesh, in_specs=P("x"), out_specs=P("x"))
    copy = jax.shard_map(lambda v: v, mesh=mesh, in_specs=P("x"), out_specs=P("x"))
    results = {
        "eager-shard-map-zero-size": outcome(copy, jnp.zeros((2, 0))),
        "eager-shard-map-zero-size jit": outcome(jax.jit(copy), jnp.zeros((2, 0))),
        "vmap-psend-precv": outcome(lambda v: jax.eval_shape(jax.vmap(piped), v).shape, jnp.ones((3, 4))),
        "vmap-psend-precv per batch": outcome(lambda v: jax.eval_shape(piped, v).shape, jnp.ones(4)),
        "vmap-axis-typed-as-mesh-axis": outcome(psum_unbatched(True), x),
        "vmap-axis-typed-as-mesh-axis unchecked": outcome(psum_unbatched(False), x),
        "vmap-axis-ppermute-tuple": outcome(swapped, jnp.arange(4.0).reshape(2, 2)),
        "vmap-axis-ppermute-tuple on a mesh": outcome(on_mesh, jnp.arange(4.0).reshape(2, 2)),
        "vmap-axis-ppermute-partial-perm": outcome(
            jax.vmap(lambda v: lax.ppermute(v, "y", [(0, 1)]), axis_name="y"), x),
        "vmap-axis-pbroadcast-take": outcome(jax.vmap(lambda v: lax.pbroadcast(v, "y", 0), axis_name="y"), x),
        "vmap-axis-all-to-all-unbatched": outcome(
            jax.vmap(lambda v: lax.all_to_all(v, "y", 0, 0, tiled=True), in_axes=None, axis_size=2, axis_name="y"), x),
        "vmap-axis-all-to-all-unbatched batched": outcome(
            jax.vmap(lambda v: lax.all_to_all(v, "y", 0, 0, tiled=True), axis_name="y"), jnp.stack([x, x])),
    }
    for rows, cols in ((1, 2), (2, 2)):  # finding 24: the gradient of a nested shard_map, checked and not
        for check_vma in (True, False):
            b = jnp.arange(rows * cols * 2.0).reshape(rows, cols, 2)
            f = nested(rows, cols, check_vma)
            grad = jax.jit(jax.grad(lambda v, f=f, w=b + 1.0: jnp.sum(f(v, w))))
            results[f"nested-shard-map-grad-residuals {rows}x{cols} check_vma={check_vma}"] = outcome(grad, b)
    for rows in (1, 2):  # finding 25: a reduction over 'x' and then a shard_map over 'y'
        b = jnp.arange(1.0, 1.0 + 2 * rows).reshape(rows, 2)
        for name, reduce in (("psum", lax.psum), ("pmax", lax.pmax), ("pmean", lax.pmean)):
            results[f"size-one-axis-all-reduce {name} {rows}x2"] = outcome(jax.jit(reduced(rows, reduce, True)), b)
        results[f"size-one-axis-all-reduce psum {rows}x2 alone"] = outcome(jax.jit(reduced(rows, lax.psum, False)), b)
        nested_sum = nested_psum(rows)
        grad = jax.jit(jax.grad(lambda v, f=nested_sum: jnp.sum(f(v) ** 2)))
        results[f"size-one-axis-all-reduce grad {rows}x2"] = outcome(grad, b)
    results.update(unchecked_nested())
    results.update(spmd_partial())
    results.update(grouped_extrema())
    results.update(permute_order())
    results.update(rng_bits())
    print(json.dumps(results))


def unchecked_nested() -> dict:
    """Finding 26: a check_vma=False shard_map over 'y' nested in a checked one over 'x' (2 x 2 mesh) that
    doubles its block: out_specs=P() of the checked one, and the gradient of sum(f(v) * v) with
    out_specs=P('x'), checked outside and (the reference) unchecked on both."""
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("x", "y"))
    inner = jax.shard_map(lambda c: c * 2.0, in_specs=P(None, "y"), out_specs=P(None, "y"), axis_names={"y"},
                          check_vma=False)
    x = jnp.arange(16.0).reshape(4, 4)
    found = {}
    for outer_check in (True, False):
        claim = jax.shard_map(inner, mesh=mesh, in_specs=P("x"), out_specs=P(), axis_names={"x"},
                              check_vma=outer_check)
        f = jax.shard_map(inner, mesh=mesh, in_specs=P("x"), out_specs=P("x"), axis_names={"x"},
                          check_vma=outer_check)
        found[f"unchecked-nested {outer_check} claim"] = outcome(jax.jit(claim), x)
        found[f"unchecked-nested {outer_check} grad"] = outcome(jax.jit(jax.grad(lambda v, f=f: jnp.sum(f(v) * v))),
                                                                 x)
    return found


def reduced(rows: int, reduce, then_nested: bool):
    """A shard_map manual over 'x' of a rows x 2 mesh: `reduce` over 'x', then (with `then_nested`) a shard_map
    manual over 'y' that doubles the value, else the doubling in the body itself."""
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:rows * 2]).reshape(rows, 2), ("x", "y"))
    double = jax.shard_map(lambda c: c * 2.0, in_specs=P(None, "y"), out_specs=P(None, "y"), axis_names={"y"})

    def body(b):
        total = reduce(b, "x")
        return double(total) if then_nested else total * 2.0

    return jax.shard_map(body, mesh=mesh, in_specs=P("x", None), out_specs=P("x", None), axis_names={"x"})


def nested_psum(rows: int):
    """psum over ('x', 'y') in a shard_map manual over 'y' inside one manual over 'x' (the campaign's form)."""
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:rows * 2]).reshape(rows, 2), ("x", "y"))

    def outer(b):
        return jax.shard_map(lambda c: lax.psum(c, ("x", "y")), in_specs=P(None, "y"), out_specs=P(None, "y"),
                             axis_names={"y"})(b)

    return jax.shard_map(outer, mesh=mesh, in_specs=P("x", None), out_specs=P("x", None), axis_names={"x"})


def nested(rows: int, cols: int, check_vma: bool):
    """A shard_map manual over 'x' inside one manual over 'y' whose body multiplies an element of b by one of w."""
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:rows * cols]).reshape(rows, cols), ("x", "y"))

    def inner(b, w):
        return (b[0, 0] * w[0, 0])[None, None]

    def outer(b, w):
        return jax.shard_map(inner, in_specs=P("x", None), out_specs=P("x", None), axis_names={"x"},
                             check_vma=check_vma)(b, w)

    return jax.shard_map(outer, mesh=mesh, in_specs=P(None, "y"), out_specs=P(None, "y"), axis_names={"y"},
                         check_vma=check_vma)


def spmd_partial() -> dict:
    """Finding 27: jax.vmap with spmd_axis_name='x' of a shard_map over 'y' alone of a 2 x 2 mesh, checked and
    not; and the same vmap without spmd_axis_name, and of a shard_map over both axes."""
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("x", "y"))
    xs = jnp.arange(32.0).reshape(2, 4, 4)
    found = {}
    for check in (True, False):
        f = jax.shard_map(lambda a: a * 2.0, mesh=mesh, in_specs=P("y"), out_specs=P("y"), axis_names={"y"},
                          check_vma=check)
        found[f"spmd-partial {check}"] = outcome(lambda v, f=f: jnp.sum(jax.jit(jax.vmap(f, spmd_axis_name="x"))(v)),
                                                 xs)
        found[f"spmd-partial {check} plain"] = outcome(lambda v, f=f: jnp.sum(jax.jit(jax.vmap(f))(v)), xs)
    whole = jax.shard_map(lambda a: a * 2.0, mesh=mesh, in_specs=P("y"), out_specs=P("y"))
    found["spmd-partial whole mesh"] = outcome(lambda v: jnp.sum(jax.jit(jax.vmap(whole, spmd_axis_name="x"))(v)), xs)
    return found


def grouped_extrema() -> dict:
    """Finding 28: pmax and pmin over axis_index_groups [[0, 1], [2, 3]] of [0, 1, 2, 3] on 4 devices: out_specs=P()
    under check_vma=True, and each device's value unchecked."""
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:4]), ("x",))
    x = jnp.arange(4.0)
    found = {}
    for name, op in (("pmax", lax.pmax), ("pmin", lax.pmin)):
        body = lambda a, op=op: op(a, "x", axis_index_groups=[[0, 1], [2, 3]])
        found[f"grouped {name} claim"] = outcome(jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("x"),
                                                                       out_specs=P())), x)
        found[f"grouped {name} each"] = outcome(jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("x"),
                                                                      out_specs=P("x"), check_vma=False)), x)
    return found


def permute_order() -> dict:
    """Finding 29: on a 2 x 2 mesh ('a', 'c'), whether each device receives from its ring predecessor over
    ('c', 'a') as axis_index(('c', 'a')) numbers them."""
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("a", "c"))

    def body(_):
        me = lax.axis_index(("c", "a"))
        return (lax.ppermute(me, ("c", "a"), [(i, (i + 1) % 4) for i in range(4)]) == (me - 1) % 4)[None]

    f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P(("a", "c")), out_specs=P(("a", "c"))))
    return {"ppermute-tuple-axis-order": outcome(f, jnp.zeros(4))}


def rng_bits() -> dict:
    """Finding 30: lax.rng_bit_generator of device 0's key [0, 1, 2, 3] and device 1's [4, 5, 6, 7] on 2 devices:
    its bits under out_specs=P() (check_vma=True), and each device's unchecked."""
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:2]), ("i",))
    keys = jnp.arange(8, dtype=jnp.uint32).reshape(2, 4)
    bits = lambda k: lax.rng_bit_generator(k[0], (2, 3))[1]
    claim = jax.jit(jax.shard_map(bits, mesh=mesh, in_specs=P("i"), out_specs=P()))
    each = jax.jit(jax.shard_map(lambda k: bits(k)[None], mesh=mesh, in_specs=P("i"), out_specs=P("i"),
                                 check_vma=False))
    return {"rng bits claim": outcome(claim, keys), "rng bits each": outcome(each, keys)}


if __name__ == "__main__":
    sys.exit(main())
