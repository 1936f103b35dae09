"""The task library: handlers by registered name."""

from __future__ import annotations

from collections.abc import Mapping

from iotsched.context import Handler
from iotsched.tasklib.chaos import chaos
from iotsched.tasklib.noop import noop


def registry() -> Mapping[str, Handler]:
    """Every built-in handler by the name task definitions use."""
    return {"noop": noop, "chaos": chaos}
