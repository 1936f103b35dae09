"""`noop`: does nothing, for tests, demos and benchmarks.

Params:
    seconds: sleep this long, stopping early if the instance is cancelled.
    heartbeat_s: while sleeping, call `ctx.heartbeat()` this often (a shard longer than its
        `timeout_s`: each heartbeat restarts it).
    fail: true to fail every attempt, or a list of shard indexes to fail.
    fail_attempts: fail attempts numbered up to this (retry demos).
    log: write this many lines to the attempt's log first, alternately through Python logging
        (WARNING) and `ctx.log` (INFO) (log demos).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from iotsched.context import ShardContext
from iotsched.handlers import handler

log = logging.getLogger(__name__)


class NoopFailure(RuntimeError):
    """The failure `noop` raises when asked to fail."""


@handler
def noop(ctx: ShardContext) -> Mapping[str, Any] | None:
    """Log `params.log` lines, sleep `params.seconds` (heartbeating if asked), then fail if
    asked to."""
    lines = int(ctx.params.get("log", 0) or 0)
    for n in range(1, lines + 1):
        text = f"noop shard {ctx.shard}: line {n} of {lines}"
        if n % 2:
            log.warning(text)
        else:
            ctx.log(text, line=n)
    seconds = float(ctx.params.get("seconds", 0) or 0)
    heartbeat_s = float(ctx.params.get("heartbeat_s", 0) or 0)
    start = time.monotonic()
    end = start + seconds
    next_beat = start + heartbeat_s if heartbeat_s > 0 else float("inf")
    while (left := end - time.monotonic()) > 0 and not ctx.cancelled():
        if time.monotonic() >= next_beat:
            ctx.heartbeat()
            next_beat = time.monotonic() + heartbeat_s
        time.sleep(min(left, 0.05))
    fail = ctx.params.get("fail")
    if fail is True or (isinstance(fail, list) and ctx.shard in fail):
        raise NoopFailure(f"noop asked to fail shard {ctx.shard}")
    if ctx.attempt <= int(ctx.params.get("fail_attempts", 0) or 0):
        raise NoopFailure(f"noop asked to fail attempt {ctx.attempt}")
    return {"slept_s": seconds}
