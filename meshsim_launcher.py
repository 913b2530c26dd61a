"""The `meshsim` console script: loads the command line and runs it, so that a Ctrl-C while the modules are
still loading (numpy, SimPy, rich: most of the first second) is one line and exit 130, as it is later."""

from __future__ import annotations

import signal
import sys

INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command Ctrl-C stopped


def main() -> int:
    """Import `scenarios.cli` and run its `main`; a Ctrl-C before it runs prints one line.

    Once the command has returned, a further Ctrl-C is ignored while the process exits (its clean-up,
    such as stopping a cluster, has no line of its own to print).
    """
    try:
        from scenarios.cli import main as command
    except KeyboardInterrupt:
        print("meshsim: interrupted while starting; nothing was run", file=sys.stderr)
        return INTERRUPTED
    code = command()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    return code


if __name__ == "__main__":
    sys.exit(main())
