"""iotsched: a serverless distributed task scheduler for IoT platforms.

iotsched owns the right to fire a task instance: which clock reached the trigger, which worker
holds the right to execute each shard, and where that right moves when a worker dies.
"""

from __future__ import annotations

__version__ = "0.1.0"
