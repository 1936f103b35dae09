"""The `iotsched` command line (extra `cli`)."""

from __future__ import annotations
