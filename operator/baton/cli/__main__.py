"""`python -m baton.cli`: the plugin, as the `kubectl-baton` console script runs it."""

from __future__ import annotations

import sys

from baton.cli.main import main

sys.exit(main())
