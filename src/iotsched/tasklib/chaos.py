"""`chaos`: applies effects through the ledger and sometimes SIGKILLs its own process.

The handler of `make chaos` (`bench/chaos`). Each shard applies `effects` units; each
unit is one effect key claimed with `ctx.once(key, writes=...)` whose write (a counter on an
`APPLIED#<key>` item) commits in the same transaction as the ledger entry, so the counter of
every key must end at exactly 1 however often the shard is re-run. With probability
`kill_probability` an attempt dies: before one of its units (chosen at random) it appends a JSON
line to `death_log` and sends SIGKILL to its own process, a real worker death mid-shard.

Params:
    effects: units (effect keys) per shard, default 3.
    kill_probability: probability that an attempt SIGKILLs its process, default 0.
    unit_seconds: work per unit (a sleep before its effect), default 0.05.
    death_log: file to append one JSON line per kill (instance_id, shard, attempt, unit,
        worker, pid, time as Unix seconds, and `waiting`: the [instance_id, shard] of the
        records its invocation had received and not started); kills are not logged when absent.
    start_log: file to append one such line (without `unit`) as each attempt starts: which
        invocation holds which records when (none when absent).
    seed: makes the kill decisions reproducible (one random stream per attempt), default 0.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from collections.abc import Mapping
from datetime import date
from typing import Any

from iotsched.context import ShardContext
from iotsched.handlers import handler

#: Partition key prefix of the items the effects update (`APPLIED#<key>`, sort key `APPLIED`).
APPLIED_PREFIX = "APPLIED#"


def effect_key(task_id: str, business_date: date, shard: int, unit: int) -> str:
    """The effect key of unit `unit` of `shard` for one business date of the task."""
    return f"effect#{task_id}#{business_date.isoformat()}#{shard}#{unit}"


def applied_write(key: str) -> dict[str, Any]:
    """The effect: add 1 to the `applied` counter of `APPLIED#<key>` (a TransactWriteItems entry)."""
    return {
        "Update": {
            "Key": {"pk": {"S": f"{APPLIED_PREFIX}{key}"}, "sk": {"S": "APPLIED"}},
            "UpdateExpression": "ADD applied :one",
            "ExpressionAttributeValues": {":one": {"N": "1"}},
        }
    }


@handler
def chaos(ctx: ShardContext) -> Mapping[str, Any] | None:
    """Apply the shard's effects once each; die at a random unit if this attempt is chosen."""
    params = ctx.params
    units = int(params.get("effects", 3))
    unit_s = float(params.get("unit_seconds", 0.05))
    rng = random.Random(f"{params.get('seed', 0)}/{ctx.instance_id}/{ctx.shard}/{ctx.attempt}")
    if params.get("start_log"):
        _log(params["start_log"], _where(ctx))
    doomed = rng.random() < float(params.get("kill_probability", 0) or 0)
    die_at = rng.randrange(units) if doomed and units > 0 else None
    applied = skipped = 0
    for unit in range(units):
        if ctx.cancelled():
            break
        time.sleep(unit_s)
        if unit == die_at:
            _die(ctx, unit, params.get("death_log"))
        key = effect_key(ctx.task_id, ctx.business_date, ctx.shard, unit)
        if ctx.once(key, writes=[applied_write(key)]):
            applied += 1
        else:
            skipped += 1  # an earlier attempt applied it
    return {"applied": applied, "skipped": skipped}


def _die(ctx: ShardContext, unit: int, death_log: Any) -> None:
    """Log the death (one line, appended atomically), then SIGKILL this process."""
    if death_log:
        _log(death_log, {**_where(ctx), "unit": unit})
    os.kill(os.getpid(), signal.SIGKILL)


def _where(ctx: ShardContext) -> dict[str, Any]:
    """This attempt, its process, the time, and the records its invocation has not started."""
    from iotsched.services.execution.batch import waiting_records  # the worker's, at this moment

    return {
        "instance_id": ctx.instance_id,
        "shard": ctx.shard,
        "attempt": ctx.attempt,
        "worker": ctx.worker,
        "pid": os.getpid(),
        "time": time.time(),
        "waiting": waiting_records(),
    }


def _log(path: Any, entry: dict[str, Any]) -> None:
    """Append one JSON line atomically (and durably: the process may be killed next)."""
    fd = os.open(str(path), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(entry) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
