"""`python -m bench.chaos` (see bench/chaos/cli.py)."""

from __future__ import annotations

from bench.chaos.cli import main

main()
