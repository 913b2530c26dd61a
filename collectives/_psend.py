"""`psend` and `precv`: JAX's one-sided pipeline point-to-point, a send and a receive that pair up across devices.

`psend(x, axis_name, perm)` posts, on each device that is the source of a pair of `perm`, one message with its
`x` to the pair's destination, and returns a `Token` (JAX's compiler token: it carries no data, only the
order of the calls). `precv(token, out_shape, axis_name, perm)` on the destination of a pair waits for its
source's message and writes it into a fresh array of `out_shape`; a device that is no pair's destination gets
zeros, as `ppermute` gives. Unlike every other collective neither call is a rendezvous of the group: a device
makes its own calls when its program reaches them (a pipeline stage sends once it has computed, and receives
when it needs the input), so the two run as calls of the device alone, and their messages travel on a channel
both ends name: the k-th psend message from device s to device d over a group is the k-th precv message d takes
from s. A run that ends with a message no precv took, or a precv no message reached, is a ProtocolError naming
both devices (`sim.engine`'s transport keeps them); a precv whose perm, shape or dtype disagrees with the
psend that sent its message is an InvalidArgumentError naming both devices and the rule.

XLA:CPU has no Send/Recv (jax 0.10.2 lowers psend and precv only on GPU), so the JAX oracle runs JAX's own
equivalent, a `ppermute` with the same perm: a psend followed by its precv moves exactly ppermute's values.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

import numpy as np

import layouts
import sim
from collectives import _batch_rules as batch_rules
from collectives._algorithm import direct_only
from collectives._algorithms import check_algorithm
from collectives._common import group_of, map_tree, operand, out_layout_of, pack_slice, unpack_into
from collectives._definition import AXIS_NAME, PERM, Definition, JaxBinding, NotLinear, Param, Vma
from collectives._facts import WHOLE, Peers, Sizes
from collectives._ppermute import _strategy as ppermute_strategy
from collectives._ppermute import check_perm
from collectives._strategy import Sample
from collectives._vma import typed

Perm = tuple[tuple[int, int], ...]
_NODES = (tuple, list, dict)  # the pytree nodes of `sim.tree_map`


@dataclass(frozen=True)
class Token:
    """What `psend` returns and `precv` takes (JAX's `Tok`): it orders the calls and carries no data.

    A token made by `psend` records the call it came from: the device, its axes, its perm, and the shape and
    dtype it sent, so that the `precv` handed it checks that it pairs with that call. `create_token()` makes
    one that records nothing (JAX's `lax.create_token()`); a precv given it pairs with the psend made with
    the same perm on its source device.
    """

    device: int | None = None
    axis_name: Any = None
    perm: Perm | None = None
    shape: tuple[int, ...] | None = None
    dtype: np.dtype | None = None

    def __repr__(self) -> str:
        if self.perm is None:
            return "Token()"
        return f"Token(psend on device {self.device}, axis_name={self.axis_name!r}, perm={list(self.perm)})"


def create_token() -> Token:
    """A token from no psend, as `jax.lax.create_token()` makes: a precv given it pairs by its own perm."""
    return Token()


@dataclass(frozen=True)
class _Sent:
    buffer: sim.Buffer
    axis_name: Any
    perm: Perm
    members: tuple[int, ...]
    channels: tuple


@dataclass(frozen=True)
class _Wanted:
    shape: tuple[int, ...]
    dtype: np.dtype
    axis_name: Any
    perm: Perm
    token: Token
    members: tuple[int, ...]
    channels: tuple
    out_layout: Any = None


def psend(x: Any, axis_name: Any, perm: Any, *, algorithm: str = "direct") -> Any:
    """Send `x` from axis index `source` to axis index `destination` for every pair of `perm`; return a `Token`.

    Only the device that is a pair's source sends (one message, to its destination); the call does not wait
    for the receiver, which takes the message with `precv` given the same `axis_name` and `perm`. Indices as
    in `ppermute` (negative ones count from the end; no index a source or a destination twice). `x` may be a
    pytree: one send per leaf, in the order JAX flattens it (a dict's keys sorted), and a pytree of tokens
    back; `precv` takes the same pytree of shapes. `algorithm` is 'direct' (or 'auto', which picks it).

    Example on a 4-device mesh {'i': 4}, a pipeline: device d holds [d + 1];
    `t = psend(x, 'i', [(0, 1), (1, 2), (2, 3)])` then `precv(t, x_shape, 'i', [(0, 1), (1, 2), (2, 3)])`
    gives [0], [1], [2], [3] (device 0 is no destination: zeros).

    Raises:
        InvalidTypeError: `perm` not a sequence of pairs of ints; a non-numeric x.
        InvalidArgumentError: unknown axis name, an index out of range, a repeated source or destination,
            an unknown algorithm.
    """
    return _leafwise(lambda leaf: _send_leaf(leaf, axis_name, perm, algorithm), x)


def _send_leaf(x: Any, axis_name: Any, perm: Any, algorithm: str) -> Token:
    context, group = group_of("psend", axis_name, None)
    x = operand("psend", context.device, "x", x)
    check_algorithm("psend", context.device, algorithm, group.size, ALGORITHMS)
    pairs = check_perm(context.device, perm, group.size, axis_name, "psend")
    args = _Sent(context.memory.resident(x), axis_name, pairs, group.members,
                 _channels(context, group.members, pairs, "psend"))
    params = (("axis_name", axis_name), ("perm", pairs), ("algorithm", algorithm))
    alone = sim.Group((context.device,), 0)
    context.collective(sim.Collective("psend", alone, params, args, _send_protocol))
    return Token(context.device, axis_name, pairs, x.shape, x.dtype)


def precv(token: Any, out_shape: Any, axis_name: Any, perm: Any, *, algorithm: str = "direct",
          out_layout: Any = None) -> Any:
    """Receive, on the destination of each pair of `perm`, the `x` its source sent with `psend`.

    `token` is the token of a psend (which must then have the same `axis_name` and `perm`) or one from
    `create_token()`. `out_shape` (anything with `.shape` and `.dtype`, e.g. `sim.ShapeDtypeStruct`) is what
    arrives: the sender's shape and dtype must equal it (a dtype in another byte order stands for the native
    one, which every array a device holds has). A device that is no pair's destination gets zeros of
    `out_shape`, without waiting. The result is written in `out_layout` (a `layouts.Layout`, default
    row-major). It is typed invariant, as JAX types it (its abstract evaluation returns `out_shape` with no
    varying axes; see FINDINGS.md), though the values differ between devices.

    `out_shape` may be a pytree of such shapes (tuples, lists, dicts), as psend's `x` may be a pytree of
    arrays: one receive per leaf, in the order psend sends them (a dict's keys sorted), and the pytree of
    arrays back. `token` is then the pytree of tokens that psend returned (out_shape's structure), or one
    token for every leaf.

    Example on a 2-device mesh {'i': 2}: device d holds [d + 1]; `precv(psend(x, 'i', [(0, 1)]),
    ShapeDtypeStruct((1,), x.dtype), 'i', [(0, 1)])` gives [0] on device 0 and [1] on device 1; with
    `{'a': x, 'b': 2 * x}` sent, `precv(tokens, {'a': s, 'b': s}, 'i', [(0, 1)])` (s that ShapeDtypeStruct)
    gives {'a': [1], 'b': [2]} on device 1.

    Raises:
        InvalidTypeError: `token` not a `Token`; `out_shape` (or a leaf of it) without a shape and a dtype;
            `perm` as psend's.
        InvalidArgumentError: a pytree of tokens whose structure is not out_shape's; a token from a psend with
            another perm or axis_name; a message whose sender used another perm, axis_name, shape or dtype
            (naming both devices); as psend otherwise.
        ProtocolError: (at the end of the run) no psend sent the message this precv waits for.
    """
    tree = out_shape if isinstance(out_shape, _NODES) else None

    def receive(leaf_token: Any, leaf_shape: Any) -> Any:
        params = {"out_shape": leaf_shape, "axis_name": axis_name, "perm": perm}
        return typed(PRECV, axis_name, [], lambda: _recv(leaf_token, leaf_shape, axis_name, perm, algorithm,
                                                         out_layout, tree), params)

    if tree is None:
        return receive(token, out_shape)
    return _leafwise(lambda leaf_shape, leaf_token: receive(leaf_token, leaf_shape), out_shape,
                     _tokens_for(token, out_shape))


def _recv(token: Any, out_shape: Any, axis_name: Any, perm: Any, algorithm: str, out_layout: Any,
          tree: Any = None) -> np.ndarray:
    context, group = group_of("precv", axis_name, None)
    device = context.device
    check_algorithm("precv", device, algorithm, group.size, ALGORITHMS)
    pairs = check_perm(device, perm, group.size, axis_name, "precv")
    shape, dtype = _shape_of(device, out_shape, tree)
    if not isinstance(token, Token):
        raise sim.InvalidTypeError(f"device {device}: precv: token={token!r} must be a Token (from psend or "
                                   "create_token())")
    if token.perm is not None and (token.perm != pairs or token.axis_name != axis_name):
        raise sim.InvalidArgumentError(
            f"device {device}: precv: perm={list(pairs)}, axis_name={axis_name!r} differ from those of the psend "
            f"whose token it was given ({token!r}): a precv pairs with the psend of the same perm and axis")
    args = _Wanted(shape, dtype, axis_name, pairs, token, group.members,
                   _channels(context, group.members, pairs, "precv"),
                   out_layout_of("precv", device, out_layout, len(shape)))
    params = (("axis_name", axis_name), ("perm", pairs), ("algorithm", algorithm))
    alone = sim.Group((device,), 0)
    return context.collective(sim.Collective("precv", alone, params, args, _recv_protocol))


def _tokens_for(token: Any, out_shape: Any) -> Any:
    """One token for each leaf of the pytree `out_shape`: `token` itself for every leaf, or its leaves when it
    is a pytree of out_shape's structure (what psend of a pytree returns)."""
    if isinstance(token, Token):
        return sim.tree_map(lambda _: token, out_shape)
    try:
        sim.tree_map(lambda *_: None, out_shape, token)
    except sim.InvalidArgumentError:
        raise sim.InvalidArgumentError(
            f"device {sim.current().device}: precv: token={token!r} must be one Token or a pytree of Tokens of "
            f"the structure of out_shape={out_shape!r} (psend of a pytree returns one token per leaf)") from None
    return token


def _leafwise(fn: Callable[..., Any], tree: Any, *rest: Any) -> Any:
    """`fn` mapped over the leaves of `tree` (and of `rest`, of its structure) as `sim.tree_map` maps it, but
    called in the order JAX flattens a pytree (`sim.leaves`: a dict's keys sorted), whatever order a dict was
    built in: the k-th psend of a pytree pairs with the k-th precv of one with the same keys."""
    if not isinstance(tree, _NODES):
        return fn(tree, *rest)
    calls = sim.tree_map(lambda *args: _Call(args), tree, *rest)
    for call in sim.leaves(calls):
        call.result = fn(*call.args)
    return sim.tree_map(lambda call: call.result, calls)


class _Call:
    """One leaf's arguments and, once made, its result (a leaf to `sim.tree_map`, where a tuple is a node)."""

    __slots__ = ("args", "result")

    def __init__(self, args: tuple) -> None:
        self.args, self.result = args, None


def _shape_of(device: int, out_shape: Any, tree: Any = None) -> tuple[tuple[int, ...], np.dtype]:
    """The shape and (native) dtype `out_shape` asks for, a leaf of the pytree `tree` when it is one."""
    try:
        return tuple(int(n) for n in out_shape.shape), layouts.native_dtype(out_shape.dtype)
    except (AttributeError, TypeError) as error:
        what = f"out_shape={out_shape!r}" if tree is None else f"out_shape={tree!r}: its leaf {out_shape!r}"
        raise sim.InvalidTypeError(f"device {device}: precv: {what} must have a shape and a dtype (a "
                                   f"ShapeDtypeStruct; out_shape may be a pytree of them): {error}") from None


# ---------------------------------------------------------------------------------------------- protocol


def _channels(context: sim.DeviceContext, members: tuple[int, ...], perm: Perm, role: str) -> tuple:
    """(pair, channel) for each pair of `perm` this device is the source (role 'psend') or the destination
    ('precv') of: the k-th message from device s to device d over `members` is the k-th that d takes from s,
    each end counting its own calls."""
    me = members.index(context.device)
    found = []
    for src, dst in perm:
        if (src if role == "psend" else dst) == me:
            counts = context.shared.setdefault((role, members, members[src], members[dst]), [0])
            found.append(((src, dst), f"psend #{counts[0]} from device {members[src]} to device {members[dst]}"
                                      f" over devices {list(members)}"))
            counts[0] += 1
    return tuple(found)


def _send_protocol(port: sim.Port, args: _Sent) -> Generator:
    """The source of a pair packs its `x` and posts it on the pair's channel; nobody waits for the receiver."""
    members, view = args.members, port.memory.view(args.buffer)
    for (src, dst), channel in args.channels:
        payload, header = yield from pack_slice(port, view, args.buffer.layout, pair=(src, dst))
        header = {**header, "call": f"psend(perm={list(args.perm)}, axis_name={args.axis_name!r})",
                  "perm": args.perm, "axis_name": args.axis_name, "shape": view.shape, "dtype": view.dtype}
        port.send(members[dst], payload, header=header, channel=channel, pair=(src, dst))
    return None


def _recv_protocol(port: sim.Port, args: _Wanted) -> Generator:
    """The destination of a pair waits for its source's message, checks it pairs, and writes it; others keep
    zeros."""
    members = args.members
    out = port.memory.view(port.memory.alloc(args.dtype, args.shape, args.out_layout))
    out[...] = 0
    for (src, dst), channel in args.channels:
        message = yield port.recv(members[src], channel=channel)
        _check_pairs(port.device, members[src], message.header, args)
        if sim.memory.is_abstract(message.payload) and not sim.memory.is_abstract(out):  # abstract payloads
            out = port.memory.view(port.memory.alloc(message.payload.dtype, args.shape, args.out_layout))
        yield from unpack_into(port, message, out, pair=(src, dst))
    return out


def _check_pairs(device: int, sender: int, sent: dict, wanted: _Wanted) -> None:
    """The message's psend and this precv agree on perm, axis, shape and dtype, or an error naming both."""
    broken = [f"{name}={mine!r} but the psend sent with {name}={theirs!r}"
              for name, mine, theirs in (("perm", list(wanted.perm), list(sent["perm"])),
                                         ("axis_name", wanted.axis_name, sent["axis_name"]),
                                         ("out_shape.shape", wanted.shape, sent["shape"]),
                                         ("out_shape.dtype", str(sim.memory.logical_dtype(wanted.dtype)),
                                          str(sim.memory.logical_dtype(sent["dtype"]))))
              if mine != theirs]
    if broken:
        raise sim.InvalidArgumentError(
            f"precv on device {device} (receiver) does not pair with the psend on device {sender} (sender): "
            + "; ".join(broken) + ". A psend and its precv must give the same perm and axis_name, and out_shape "
            "must be the shape and dtype sent")


# ---------------------------------------------------------------------------------------------- definitions


def _pair(x: Any, axis_name: Any, perm: Any, *, algorithm: str = "direct", out_layout: Any = None,
          out_shape: Any = None) -> Any:
    """A call alone, as a program runs it: the psend and the precv that takes its messages (expecting
    `out_shape`, by default the shape and dtype sent)."""
    def leaf(value: Any) -> Any:
        array = np.asarray(value)
        token = psend(value, axis_name, perm, algorithm=algorithm)
        wanted = out_shape if out_shape is not None else sim.ShapeDtypeStruct(array.shape, array.dtype)
        return precv(token, wanted, axis_name, perm, algorithm=algorithm, out_layout=out_layout)
    return map_tree(leaf, x)


def _teach(params: dict[str, Any], n: int) -> list[str]:
    pairs = ", ".join(f"{s} -> {d}" for s, d in params.get("perm", ()))
    return [f"Protocol: one-sided. psend is not a meeting of the group: the device at axis index source of each "
            f"pair of perm ({pairs}) posts its whole x to the device at axis index destination and goes on. The "
            f"destination's precv (same perm and axis_name) waits for that message, checks it pairs (the shape "
            f"and dtype sent are out_shape), and writes it; a device that is no pair's destination gets zeros "
            f"without waiting. The k-th message from one device to another is the k-th precv there takes from it."]


def _recv_alone(token: Any, out_shape: Any = None, axis_name: Any = None, perm: Any = (), **options: Any) -> Any:
    """precv alone: the drawn `token` array stands for what the partner psend sends, and the pair runs (its
    out_shape, when given, is checked against what arrives by the precv as ever)."""
    return _pair(token, axis_name, perm, out_shape=out_shape, **options)


def _recv_strategy(st: Any, axes: Any, **options: Any) -> Any:
    """psend's calls (ppermute's), the drawn array named `token`: what the partner psend sends."""
    return ppermute_strategy(st, axes, **options).map(
        lambda sample: Sample(sample.params, sample.shapes.map(lambda shapes: {"token": shapes["x"]})))


def _is_out_shape(value: Any) -> bool:
    """A table of a shape (at most 64 non-negative sizes, fewer than 2**48 elements) and a numeric dtype's name
    (an identifier: numpy's parser of dtype strings is never handed field lists or comma formats)."""
    if not (isinstance(value, dict) and set(value) == {"shape", "dtype"} and isinstance(value["shape"], list)):
        return False
    shape, name = value["shape"], value["dtype"]
    if len(shape) > 64 or not all(type(n) is int and 0 <= n < 1 << 48 for n in shape) or math.prod(shape) >= 1 << 48:
        return False
    try:
        return isinstance(name, str) and name.isidentifier() and layouts.is_numeric(np.dtype(name))
    except (TypeError, ValueError):
        return False


OUT_SHAPE = Param("out_shape", _is_out_shape, "a table {shape = [...], dtype = \"...\"}: what arrives",
                  from_toml=lambda v: sim.ShapeDtypeStruct(tuple(v["shape"]), v["dtype"]))

ALGORITHMS = direct_only("direct: the source of each pair sends its whole operand to the destination in one "
                         "message, without waiting for it; the destination takes it when it calls precv.")
_REASON = ("{}: JAX registers no transpose for it (a token carries no cotangent, and the send and the receive "
           "are separate calls)")
_EQUIVALENT = ("a ppermute with the same perm, since a psend followed by its precv moves exactly ppermute's "
               "values; XLA:CPU has no Send/Recv")


def _bind_equivalent(jax: Any, p: dict[str, Any]) -> Any:
    return lambda x: jax.lax.ppermute(x, p["axis_name"], p["perm"])


PSEND = Definition(
    name="psend", function=psend, arrays=("x",), params=(AXIS_NAME, PERM), vma=Vma.INVARIANT,
    transpose=NotLinear(_REASON.format("psend")),
    # XLA:CPU cannot run psend; the worker runs JAX's equivalent, a ppermute, against the pair
    jax=JaxBinding("psend", ("psend",), _bind_equivalent, on_cpu="equivalent", cpu_note=_EQUIVALENT),
    strategy=ppermute_strategy, alone=_pair, teach=_teach,
    batch=batch_rules.elementwise, algorithms=ALGORITHMS, reduction=None,
    sizes=Sizes(gathered=False, peers=Peers.ONE), sweep=None, drawing=WHOLE,
)
PRECV = Definition(
    name="precv", function=precv, arrays=("token",), params=(OUT_SHAPE, AXIS_NAME, PERM), vma=Vma.INVARIANT,
    transpose=NotLinear(_REASON.format("precv")),
    jax=JaxBinding("precv", ("precv",), _bind_equivalent, on_cpu="equivalent", cpu_note=_EQUIVALENT),
    strategy=_recv_strategy, alone=_recv_alone, partner="psend", teach=_teach,
    batch=batch_rules.elementwise, algorithms=ALGORITHMS, reduction=None,
    sizes=Sizes(gathered=False, peers=Peers.ONE), sweep=None, drawing=WHOLE,
)
