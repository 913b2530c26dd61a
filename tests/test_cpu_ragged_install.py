"""Installing JAX's CPU ragged_all_to_all (`oracles.install_cpu_ragged_all_to_all`), each in a new process as a
user's script does it: after jax is imported and used (idempotent; what was lowered before keeps failing until
`jax.clear_caches()`), `import oracles` leaving jax unimported, and the docs page's example as written."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from docs_pages import named_block, page

pytestmark = [
    pytest.mark.differential,
    pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="needs the jax extra"),
]

ROOT = Path(__file__).resolve().parents[1]

_CACHING = r"""
import json, os, sys
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
sys.path.insert(0, sys.argv[1])
import numpy as np, jax, jax.numpy as jnp
from jax.sharding import Mesh, PartitionSpec as P
import oracles

mesh = Mesh(np.array(jax.devices()[:2]), ("i",))
def ragged():
    return jax.jit(jax.shard_map(lambda *a: jax.lax.ragged_all_to_all(*a, axis_name="i"), mesh=mesh,
                                 in_specs=P("i"), out_specs=P("i")))
args = (jnp.array([1, 2, 2, 3, 4, 0.]), jnp.zeros(8), jnp.array([0, 1, 0, 1]), jnp.array([1, 2, 1, 1]),
        jnp.array([0, 0, 1, 2]), jnp.array([1, 1, 2, 1]))
def attempt(f):
    try:
        return [float(v) for v in f(*args)]
    except jax.errors.JaxRuntimeError as error:
        return str(error).split(":")[0]
early = ragged()
seen = {"before": attempt(early), "first install": oracles.install_cpu_ragged_all_to_all(),
        "second install": oracles.install_cpu_ragged_all_to_all(), "lowered before": attempt(early),
        "new function": attempt(ragged())}
jax.clear_caches()
seen["lowered before, caches cleared"] = attempt(early)
print(json.dumps(seen))
"""


def test_install_after_jax_import_is_idempotent_and_cached_functions_keep_their_lowering():
    """Installed after jax is imported and used: the first call registers, the second does nothing; a function
    lowered before keeps failing until jax.clear_caches(); a new function runs (the caveat on
    docs/reference/cpu-lowerings.md)."""
    done = subprocess.run([sys.executable, "-c", _CACHING, str(ROOT)], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    docs = [1.0, 3.0, 0.0, 0.0, 2.0, 2.0, 4.0, 0.0]
    assert json.loads(done.stdout) == {"before": "UNIMPLEMENTED", "first install": True, "second install": False,
                                       "lowered before": "UNIMPLEMENTED", "new function": docs,
                                       "lowered before, caches cleared": docs}


def test_importing_oracles_does_not_import_jax():
    """`import oracles` (which exports the install) leaves jax unimported, so XLA_FLAGS can still be set."""
    done = subprocess.run([sys.executable, "-c", "import sys, oracles; print('jax' in sys.modules)"],
                          capture_output=True, text=True, timeout=60, check=False, cwd=ROOT)
    assert done.stdout.strip() == "False", done.stderr


def test_the_pages_example_runs_in_a_fresh_process():
    """The example of docs/reference/cpu-lowerings.md (the block named cpu-ragged-example) runs as written in a
    new process and prints the docs' results."""
    code = named_block(page("reference/cpu-lowerings"), "cpu-ragged-example")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False,
                          cwd=ROOT, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[1. 3. 0. 0. 2. 2. 4. 0.]"
