"""lax.psum of bfloat16 in a shard_map manual over part of the mesh aborts XLA:CPU's compiler.

The program runs in a child process (the abort kills the process that compiles it); this script reports
its exit status. Stock JAX 0.10.2 on 2 CPU devices. On GPU the same reducer region is built, but whether
the compiler aborts depends on the backend's passes (XLA:CPU's AllReducePromotion widens bfloat16).
"""

import os
import subprocess
import sys

os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=2".strip()

PROGRAM = """
import os, sys
if os.environ.get("REPRO_FIXES"):  # the fixes the parent process runs with, if any
    import oracles
    oracles.install_jax_fixes(os.environ["REPRO_FIXES"].split(","))
import jax, jax.numpy as jnp, numpy as np
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P
mesh = jax.sharding.Mesh(np.array(jax.devices()[:2]).reshape(2, 1), ("x", "y"))
f = jax.shard_map(lambda b: lax.psum(b, "x"), mesh=mesh, in_specs=P("x"), out_specs=P("x"), axis_names={"x"})
x = jax.device_put(np.arange(4).astype(jnp.bfloat16).reshape(2, 2), NamedSharding(mesh, P("x", "y")))
print("psum:", np.asarray(jax.jit(f)(x)).tolist())
"""

fixes = sys.modules["oracles"].jax_fixes.installed() if "oracles" in sys.modules else ()
done = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, check=False,
                      env={**os.environ, "REPRO_FIXES": ",".join(fixes), "PYTHONPATH": os.pathsep.join(sys.path)})
lines = [line for line in (done.stdout + done.stderr).splitlines() if not line.startswith("    @")]
print("\n".join(lines[-4:]))
print("exit status:", done.returncode, "(correct: 0 and psum: [[2.0, 4.0], [2.0, 4.0]])")
assert done.returncode == 0 and "[[2.0, 4.0], [2.0, 4.0]]" in done.stdout, \
    "XLA:CPU aborts compiling a bfloat16 psum in a partial-manual shard_map"
