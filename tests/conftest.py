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
