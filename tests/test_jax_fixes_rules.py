"""With `oracles.install_jax_fixes` the programs FINDINGS.md pins for findings 4, 6, 7, 10, 11 and 12 give
the correct answer in JAX.

Each pinning test (tests/test_bridge.py, tests/test_campaign.py, tests/bridge_programs.py) expects JAX 0.10.2's
wrong behaviour; here the same programs run in a child process with 8 CPU devices, the CPU lowerings and the
fixes of `oracles.jax_fixes._rules` installed (`jax_fixes_rules_child.py`), and this process, which never
imports jax, judges JAX's answers against ones worked out here with numpy and the spec (`oracles.spec`).
"""

from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from jax_fixes_children import KEYS, child_report, ok
from test_campaign import campaign, known_ids

from oracles import spec
from oracles.jax_fixes import FIXES, FOLDER
from oracles.jax_fixes import _rules as rules

pytestmark = [
    pytest.mark.differential,
    pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="needs the jax extra"),
]

CHILD = Path(__file__).resolve().parent / "jax_fixes_rules_child.py"
ROOT = CHILD.parent.parent


@pytest.fixture(scope="module")
def fixed() -> dict[str, Any]:
    """The child's report: the fixes it installed and JAX's answer to every program."""
    return child_report(CHILD)



def refused(fixed: dict[str, Any], name: str) -> str:
    """The message of JAX's refusal of program `name`, which must have been refused at out_specs."""
    status, *rest = fixed["answers"][name]
    assert status == "error", f"{name} ran: {rest}"
    kind, message = rest
    assert kind == "ValueError" and "out_specs" in message and "replication" in message, message
    return message




def test_every_rules_fix_is_installed_and_has_its_folder(fixed):
    """The child installed every fix of `_rules.FIXES`; each has a folder with its reproducer, its diff against
    JAX's source and its report's text (every key, the number of its FINDINGS.md entry)."""
    assert fixed["installed"] == list(rules.FIXES)
    findings = (ROOT / "FINDINGS.md").read_text()
    for name in rules.FIXES:
        folder = FOLDER / name
        assert {"finding.toml", "fix.diff", "repro.py"} <= {p.name for p in folder.iterdir()}, name
        text = tomllib.loads((folder / "finding.toml").read_text())
        assert set(text) == KEYS and text["stock_failure"], name
        assert f"## {text['number']}. " in findings and f"[{name}]" in findings, name
        assert (folder / "fix.diff").read_text().startswith("--- a/jax/_src/"), name


def test_fixed_argsort_of_a_varying_array_is_typed_varying(fixed):
    """Finding 4 (pinned by test_bridge.py's `jax: argsort ...` rows): with the fix, out_specs=P() is refused,
    sort's results (keys and indices) are typed varying along `i`, the mapped program gives each device's
    own order, the bridge's type check (meshsim: varying) now agrees with JAX's jaxpr, and the gradient of
    invariant values sorted by varying keys (stock JAX: [7, 3, 5]) is right."""
    refused(fixed, "argsort: replicated")
    x = np.array([3, 1, 2, 0, 1, 2], np.float32)
    orders = np.concatenate([np.argsort(block, kind="stable") for block in x.reshape(2, 3)])
    assert ok(fixed, "argsort: mapped") == orders.tolist() == [1, 2, 0, 0, 1, 2]
    assert ok(fixed, "argsort: mapped type") == [["i"], ["i"]]
    assert ok(fixed, "argsort: bridge") == orders.tolist()
    # the gradient of sum(w * sort_key_val(keys, v)[1]), v invariant: each weight goes to the value it multiplies
    grad = np.zeros(3)
    np.add.at(grad, orders, np.arange(6.0))
    assert ok(fixed, "argsort: sort_key_val grad") == grad.tolist() == [5.0, 4.0, 6.0]


def moved_back(shape: tuple[int, ...], split: int, concat: int) -> np.ndarray:
    """The gradient of sum(w * f(x)), f the untiled all_to_all over 4 devices, w = 1, 2, ... over f's
    output: the spec moves the numbered elements of x; each weight goes back to the element it multiplies."""
    x = np.arange(np.prod(shape)).reshape(shape)
    out = np.concatenate(spec.all_to_all(list(x.reshape(4, -1, *shape[1:])), {"i": 4}, "i", split, concat,
                                         tiled=False))
    grad = np.zeros(x.size)
    grad[out.ravel()] = 1 + np.arange(out.size)
    return grad.reshape(shape)


@pytest.mark.parametrize(("split", "concat", "shape"), [(0, 1, (16, 3)), (1, 0, (12, 4))])
def test_fixed_grad_of_an_untiled_all_to_all(fixed, split, concat, shape):
    """Finding 6 (pinned by test_bridge.py's `jax: grad of an untiled all_to_all`): with the fix, jax.grad
    of an untiled all_to_all with split_axis != concat_axis traces and moves each weight back to the
    element it multiplied."""
    got = np.array(ok(fixed, f"all_to_all: grad {split} {concat}"))
    assert np.array_equal(got, moved_back(shape, split, concat))


def scattered(x: np.ndarray, tiled: bool) -> np.ndarray:
    """psum_scatter over 4 devices of x's row blocks along dimension 1: device d keeps column d of the sum."""
    total = x.reshape(4, -1, x.shape[1]).sum(axis=0)
    return np.concatenate([total[:, d:d + 1] if tiled else total[:, d] for d in range(4)])


def test_fixed_vmap_of_an_untiled_psum_scatter(fixed):
    """Finding 7 (pinned by test_bridge.py's `jax: vmap of an untiled psum_scatter`): with the fix, vmap over
    axis 2, after scatter_dimension 1, gives each batch element's scatter; the batch axis before it and the
    tiled form (both right before) are unchanged."""
    x = np.arange(96, dtype=np.float32).reshape(8, 4, 3)
    untiled = np.stack([scattered(x[:, :, b], tiled=False) for b in range(3)])
    assert np.array_equal(ok(fixed, "psum_scatter: vmap untiled 2"), untiled)
    assert np.array_equal(ok(fixed, "psum_scatter: vmap untiled 0"), untiled)
    tiled = np.stack([scattered(x[:, :, b], tiled=True) for b in range(3)])
    assert np.array_equal(ok(fixed, "psum_scatter: vmap tiled 2"), tiled)


def test_fixed_unchecked_all_gather_invariant_transpose(fixed):
    """Finding 10 (pinned by test_campaign.py's test_jax_unchecked_all_gather_invariant_transpose_is_pinned):
    with the fix, the untyped transpose sums the devices' cotangents ([1 + 3, 2 + 4], the adjoint identity
    with f(x) = [x0, x1, x0, x1]); the typed one, right before, still slices the one cotangent."""
    x, ct = np.array([1.0, 2.0]), np.array([1.0, 2.0, 3.0, 4.0])
    got = np.array(ok(fixed, "all_gather_invariant: untyped"))
    assert np.vdot(got, x) == np.vdot(ct, np.tile(x, 2))
    assert got.tolist() == [4.0, 6.0]
    assert ok(fixed, "all_gather_invariant: typed") == [1.0, 2.0]


@pytest.mark.parametrize("check_vma", [True, False])
def test_fixed_grad_of_a_non_scalar_pbroadcast(fixed, check_vma):
    """Finding 11 (pinned by bridge_programs.py's `jax: grad of pbroadcast` row): with the fix, the gradient of
    sum(w * pbroadcast(x, source=2)) is the sum of every member's weights on the source's block, zero
    elsewhere, with the output mapped or replicated, typed or not; the forward program is unchanged."""
    x = np.arange(16, dtype=np.float32).reshape(8, 2)
    mapped, replicated = np.zeros_like(x), np.zeros_like(x)
    mapped[4:6] = (1 + np.arange(16, dtype=np.float32)).reshape(4, 2, 2).sum(axis=0)
    replicated[4:6] = (1 + np.arange(4, dtype=np.float32)).reshape(2, 2)
    assert np.array_equal(ok(fixed, f"pbroadcast: grad mapped {check_vma}"), mapped)
    assert np.array_equal(ok(fixed, f"pbroadcast: grad replicated {check_vma}"), replicated)
    assert np.array_equal(ok(fixed, f"pbroadcast: forward mapped {check_vma}"), np.tile(x[4:6], (4, 1)))
    assert np.array_equal(ok(fixed, f"pbroadcast: forward replicated {check_vma}"), x[4:6])


def test_fixed_pbroadcast_is_typed_invariant(fixed):
    """Finding 12 (meshsim types pbroadcast as JAX 0.10.2 does: test_registry.py's vma test): with the fix,
    the result is typed invariant along `i` (so out_specs=P() is valid, the replicated rows above), an
    invariant operand is broadcast (every member already holds it) and its gradient sums every member's
    weights."""
    assert ok(fixed, "pbroadcast: type") == [[]]
    assert ok(fixed, "pbroadcast: invariant operand") == np.tile([0.0, 1.0], 4).tolist()
    assert ok(fixed, "pbroadcast: invariant operand grad") == np.arange(8.0).reshape(4, 2).sum(axis=0).tolist()


def test_fixed_precv_is_typed_varying(fixed):
    """Entry 12's precv slip (pinned by bridge_programs.py's `_pipeline`): with the fix, precv's result is
    typed varying along `i` in the pipeline's jaxpr, with no pvary after it, and out_specs=P() is refused."""
    jaxpr = ok(fixed, "precv: pipeline jaxpr")
    assert "f32[2,2]{V:i} = precv" in jaxpr and "pvary[axes=('i',)] e" not in jaxpr, jaxpr
    assert ok(fixed, "precv: type") == [["i"]]
    refused(fixed, "precv: pipeline replicated")


# ---------------------------------------------------------------------------------------------- the campaign


def test_with_every_fix_the_default_campaign_meets_no_fixed_finding_and_nothing_new():
    """`campaign.py --fixes` installs every fix of `oracles.jax_fixes.FIXES` before the search: the default
    profile then meets no finding that has a fix (stock JAX meets eight there: five of ragged_all_to_all,
    the untyped all_gather_invariant transpose, pbroadcast's transpose and psum_scatter's vmap) and nothing
    new, with every collective's transposes and vmaps still run. Only those two kinds run: every fix is a
    transpose or batching rule, and `test_the_fixes_change_no_answer_outside_the_findings` shows that the
    fixes change no answer of any kind outside the findings."""
    report = campaign("--fixes", "--kinds", "transpose", "vmap")
    assert report["fixes"] == list(FIXES)
    rows = report["rows"]
    new = [f"{r['op']} {r['kind']}: {text}" for r in rows for text in r["new"]]
    assert new == [], "\n\n".join(new)
    met = {name for r in rows for name in r["known"]}
    assert met <= known_ids() - set(FIXES), met & set(FIXES)
    ran = {(r["op"], r["kind"]) for r in rows if r["examples"] >= 6}
    assert {("pbroadcast", "transpose"), ("all_gather_invariant", "transpose"), ("psum_scatter", "vmap"),
            ("all_to_all", "transpose")} <= ran


@pytest.fixture(scope="module")
def stock_answers() -> dict[str, Any]:
    return campaign("--answers")


def test_the_fixes_change_no_answer_outside_the_findings(stock_answers):
    """On every call of the default profile that no finding's predicate fits (the `KNOWN` table), JAX's
    answers (forward, vjp, grad and linear_transpose; vmap) are bit for bit the same with every fix
    installed as without: the fixes change nothing but the findings."""
    fixed = campaign("--answers", "--fixes")
    assert stock_answers["fixes"] == [] and fixed["fixes"] == list(FIXES)
    pairs = list(zip(stock_answers["rows"], fixed["rows"], strict=True))
    assert sum(len(s["digests"]) for s, _ in pairs) >= 250
    changed = [f"{s['op']} {s['kind']}" for s, f in pairs
               if (s["op"], s["kind"], s["skipped"], s["digests"]) != (f["op"], f["kind"], f["skipped"], f["digests"])]
    assert changed == []


def test_a_changed_answer_is_caught(stock_answers):
    """With JAX's all_gather batching rule deliberately reversing the batch (campaign.py's mutant), the
    answers of all_gather's vmaps differ from stock JAX's, so the comparison above can fail."""
    mutant = campaign("--answers", "--ops", "all_gather", "--mutant", "all-gather-batching")
    [stock] = [r for r in stock_answers["rows"] if (r["op"], r["kind"]) == ("all_gather", "vmap")]
    [wrong] = [r for r in mutant["rows"] if r["kind"] == "vmap"]
    assert len(wrong["digests"]) == len(stock["digests"]) > 0
    assert wrong["digests"] != stock["digests"]
