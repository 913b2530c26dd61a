"""`python -m scenarios.cli`: the `meshsim` command without its console script."""

import sys

from scenarios.cli import main

sys.exit(main())
