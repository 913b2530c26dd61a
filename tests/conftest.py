"""The single configuration point of the test suite: Hypothesis profiles and the shared JAX oracle.

Profiles, chosen with the environment variable HYPOTHESIS_PROFILE. The ones a test run uses by default
are derandomized and keep no example database, so `make test` gives the same verdict on every machine
and every run; random exploration has profiles of its own:

- `default`: 300 generated cases per property, so each collective's differential property sees a few
  hundred cases (plus the explicit ones); no deadline (the first JAX compile of a signature is slow);
  derandomized (each test draws the same cases every run), no example database.
- `quick`: 25 cases per property, derandomized, for a fast local loop.
- `explore`: the default's counts, but random (new cases each run) with Hypothesis's example database in
  `.hypothesis/` (a failure found is tried first next time): to look for new failures. A failure prints
  the `@reproduce_failure` blob that replays it.
- `fuzz`: 3,000 cases per property, ten times the default, and random like `explore`; `test_fuzz.py` scales
  its own counts by the profile's, so its properties run ten times longer too (a nightly or pre-release
  run; `benchmarks/fuzz.py` runs it and tabulates the outcomes).
"""

from __future__ import annotations

import collections
import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.database import DirectoryBasedExampleDatabase

_COMMON = dict(deadline=None, print_blob=True, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
_FIXED = dict(_COMMON, derandomize=True, database=None)  # the same cases every run, nothing remembered
_RANDOM = dict(_COMMON, derandomize=False, database=DirectoryBasedExampleDatabase(".hypothesis/examples"))

settings.register_profile("default", max_examples=300, **_FIXED)
settings.register_profile("quick", max_examples=25, **_FIXED)
settings.register_profile("explore", max_examples=300, **_RANDOM)
settings.register_profile("fuzz", max_examples=3000, **_RANDOM)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


@pytest.fixture(autouse=True, scope="session")
def _crash_reports_in_a_temporary_directory(tmp_path_factory):
    """`meshsim`'s exit-3 reports (under $XDG_STATE_HOME/meshsim) go to the test run's temporary directory, not
    the home of whoever runs the suite; a test that checks them sets its own directory."""
    previous = os.environ.get("XDG_STATE_HOME")
    os.environ["XDG_STATE_HOME"] = str(tmp_path_factory.mktemp("state"))
    yield
    if previous is None:
        os.environ.pop("XDG_STATE_HOME", None)
    else:
        os.environ["XDG_STATE_HOME"] = previous


@pytest.fixture(autouse=True, scope="session")
def _jax_compile_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One persistent JAX compilation cache for every JAX process of the run (the JAX oracle, the bridge's
    workers, the campaigns, the CPU lowering's children, the reproducers, the docs' notebook kernels), shared
    by both pytest-xdist workers: a folder of the run's temporary directory, empty when the run starts (so a
    fresh clone measures what CI pays). Many programs are compiled in more than one process (a campaign with
    and without the fixes, a reproducer on stock JAX and with its fix, the same segment in each way of giving
    the bridge a mesh, a docs lesson's search and the campaign's): the cache compiles each once. A cached
    executable is the one XLA compiled for the same program (the key holds the HLO, the compile options,
    XLA_FLAGS and the versions of JAX and XLA), so no answer changes; an entry read while another process
    writes it fails to decompress, and JAX then compiles the program itself."""
    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "jax-compile-cache"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("JAX_COMPILATION_CACHE_DIR", str(folder))
        patch.setenv("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
        patch.setenv("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
        yield folder


@pytest.fixture(scope="session")
def jax_oracle():
    """The process-wide JAX oracle (one worker on 8 CPU devices); skips when jax is not installed."""
    if importlib.util.find_spec("jax") is None:
        pytest.skip("needs the jax extra: pip install -e '.[jax]'")
    from oracles import shared_oracle

    return shared_oracle()


def _checked_here() -> dict[tuple[str, str], int]:
    """The cases this process checked, by (collective, against), as `strategies.check_agreement` counted them."""
    import sys

    return dict(getattr(sys.modules.get("strategies"), "CHECKED", None) or {})


# The files that take longest (over 15 s each in a run of the suite on a busy 2-core machine), slowest first.
# They run first, so that under pytest-xdist's `--dist loadfile` no long file starts when the other worker has
# little left: xdist's own order (files with most tests first) started the docs build, one test, last of all,
# and the other worker idled through most of it; files of a few long tests (the interrupted clusters, the
# listeners) came last too. The many short files after them even out the two workers' ends. The campaign
# with the fixes runs well after the one without, so that it finds their programs compiled (`_jax_compile_cache`).
SLOWEST_FIRST = ("test_docs_site.py", "test_bridge_reach.py", "test_jax_reports.py", "test_campaign.py",
                 "test_cpu_ragged.py", "test_bridge.py", "test_bridge_tutorial.py", "test_differential.py",
                 "test_jax_fixes_rules.py", "test_interrupt.py", "test_bfloat16.py", "test_reductions_differential.py",
                 "test_listeners.py", "test_layouts_collectives.py", "test_bridge_nested.py",
                 "test_campaign_oracle.py", "test_campaign_cli.py", "test_float8.py", "test_fidelity.py",
                 "test_steps.py", "test_jax_fixes_ragged.py", "test_fuzz.py", "test_cpu_lowerings.py",
                 "test_algorithms.py", "test_faces_scale.py", "test_mutation.py", "test_registry.py",
                 "test_cli_explain.py", "test_jax_coverage.py")


def pytest_configure(config):
    """pytest-xdist hands out files in the order `pytest_collection_modifyitems` leaves them."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(items):
    """The files of SLOWEST_FIRST in its order, then the others with most tests first (xdist's own order); a
    file's tests keep their order."""
    counts = collections.Counter(item.path.name for item in items)
    rank = {name: (k, 0) for k, name in enumerate(SLOWEST_FIRST)}
    place = {id(item): n for n, item in enumerate(items)}
    items.sort(key=lambda item: (*rank.get(item.path.name, (len(SLOWEST_FIRST), -counts[item.path.name])),
                                 place[id(item)]))


_FROM_WORKERS: collections.Counter = collections.Counter()  # under pytest-xdist: what each worker checked


def pytest_sessionfinish(session):
    """An xdist worker hands its counts to the controller, which prints the summary."""
    if hasattr(session.config, "workeroutput"):
        session.config.workeroutput["checked"] = [[op, against, n] for (op, against), n in _checked_here().items()]


def pytest_testnodedown(node, error):
    """The controller adds up what each xdist worker checked (the hook exists only with pytest-xdist)."""
    for op, against, n in getattr(node, "workeroutput", {}).get("checked", []):
        _FROM_WORKERS[op, against] += n


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Report how many cases each collective was checked on, so a run shows its real coverage."""
    checked = _FROM_WORKERS + collections.Counter(_checked_here())
    for against in ("jax", "spec"):
        counts = {op: n for (op, other), n in sorted((checked or {}).items()) if other == against}
        if counts:
            terminalreporter.write_line(f"cases checked simulator == spec{' == jax' if against == 'jax' else ''}: "
                                        + ", ".join(f"{op}={n}" for op, n in counts.items()))
