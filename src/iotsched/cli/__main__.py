"""`python -m iotsched.cli`."""

from __future__ import annotations

from iotsched.cli.main import main

main()
