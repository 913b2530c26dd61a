"""A small pytree: tuples, lists and dicts (keys sorted, as in JAX) of leaves; None is an empty node."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sim._errors import InvalidArgumentError


def _never(_: Any) -> bool:
    return False


_NODES = (tuple, list, dict)


def leaves(tree: Any, is_leaf: Callable[[Any], bool] = _never) -> list[Any]:
    """The leaves of `tree`, left to right; `is_leaf` marks nodes to treat as leaves.

    >>> leaves((1, [2, None], {'b': 4, 'a': 3}))
    [1, 2, 3, 4]
    """
    if tree is None:
        return []
    if is_leaf is not _never and is_leaf(tree):
        return [tree]
    if isinstance(tree, (tuple, list)):
        found: list[Any] = []
        for child in tree:  # a child that is a leaf is taken here, without a call
            if child is None:
                continue
            if isinstance(child, _NODES) and (is_leaf is _never or not is_leaf(child)):
                found += leaves(child, is_leaf)
            else:
                found.append(child)
        return found
    if isinstance(tree, dict):
        return [leaf for key in sorted(tree) for leaf in leaves(tree[key], is_leaf)]
    return [tree]


def tree_map(fn: Callable, tree: Any, *rest: Any) -> Any:
    """Apply `fn` leaf by leaf to `tree` and trees of the same structure `rest`."""
    if tree is None:
        return None
    if isinstance(tree, (tuple, list)):
        if any(not isinstance(r, (tuple, list)) or len(r) != len(tree) for r in rest):
            raise InvalidArgumentError(f"tree structures differ: {tree!r} vs {rest!r}")
        # a child that is a leaf goes to `fn` here, without a call of tree_map
        mapped = [tree_map(fn, *children) if children[0] is None or isinstance(children[0], _NODES)
                  else fn(*children) for children in zip(tree, *rest)]
        return type(tree)(mapped) if not hasattr(tree, "_fields") else type(tree)(*mapped)
    if isinstance(tree, dict):
        if any(not isinstance(r, dict) or set(r) != set(tree) for r in rest):
            raise InvalidArgumentError(f"tree structures differ: {tree!r} vs {rest!r}")
        return {key: tree_map(fn, tree[key], *(r[key] for r in rest)) for key in tree}
    return fn(tree, *rest)


def broadcast_prefix(prefix: Any, tree: Any, is_leaf: Callable[[Any], bool]) -> Any:
    """Expand `prefix` (a tree prefix of `tree`, whose leaves satisfy `is_leaf`) to `tree`'s structure."""
    if is_leaf(prefix) or prefix is None:
        return tree_map(lambda _: prefix, tree)
    if isinstance(prefix, (tuple, list)) and isinstance(tree, (tuple, list)) and len(prefix) == len(tree):
        return type(tree)(broadcast_prefix(p, t, is_leaf) for p, t in zip(prefix, tree))
    if isinstance(prefix, dict) and isinstance(tree, dict) and set(prefix) == set(tree):
        return {k: broadcast_prefix(prefix[k], tree[k], is_leaf) for k in tree}
    structure = tree_map(lambda _: "*", tree)
    raise InvalidArgumentError(f"{prefix!r} is not a tree prefix of a value with structure {structure!r}")
