"""iotsched: a serverless distributed task scheduler for IoT platforms.

iotsched owns the right to fire a task instance: which clock reached the trigger, which worker
holds the right to execute each shard, and where that right moves when a worker dies.

What this module exports is the handler author's API, stable across minor versions
(docs/handlers.md); every other module of the package is internal. The names load on first
use, so importing an inner module (the core, a function's entry point) loads none of them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from iotsched.context import ShardContext
    from iotsched.errors import FailShard, RetryShard
    from iotsched.handlers import HandlerSpec, handler, planner

__version__ = "0.1.0"

#: Each exported name and the module that defines it.
_EXPORTS = {
    "FailShard": "iotsched.errors",
    "HandlerSpec": "iotsched.handlers",
    "RetryShard": "iotsched.errors",
    "ShardContext": "iotsched.context",
    "handler": "iotsched.handlers",
    "planner": "iotsched.handlers",
}

__all__ = [
    "FailShard",
    "HandlerSpec",
    "RetryShard",
    "ShardContext",
    "__version__",
    "handler",
    "planner",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'iotsched' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
