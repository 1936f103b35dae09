"""iotsched: a serverless distributed task scheduler for IoT platforms.

iotsched owns the right to fire a task instance: which clock reached the trigger, which worker
holds the right to execute each shard, and where that right moves when a worker dies.

What this module exports is the handler author's API, stable across minor versions
(docs/handlers.md); every other module of the package is internal.
"""

from __future__ import annotations

from iotsched.context import ShardContext
from iotsched.errors import FailShard, RetryShard
from iotsched.handlers import HandlerSpec, handler, planner

__version__ = "0.1.0"

__all__ = [
    "FailShard",
    "HandlerSpec",
    "RetryShard",
    "ShardContext",
    "__version__",
    "handler",
    "planner",
]
