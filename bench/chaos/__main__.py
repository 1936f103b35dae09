"""`python -m bench.chaos` (see bench/chaos/cli.py)."""

from __future__ import annotations

import sys

from bench.chaos.cli import main

sys.exit(main())
