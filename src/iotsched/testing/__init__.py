"""The testing kit for handler authors (public API, stable): docs/testing.md.

`run_handler` runs one handler against a context the test describes (params, bounds, business
date, a manual clock, fake resources, partial results, cancellation) and returns what it did
(`HandlerRun`). `TaskHarness` runs whole tasks on the in-memory store with a manual clock
(claim, shards, retries, reduce); the pytest plugin installed with iotsched gives one per test
as the fixture `iotsched_harness` (`iotsched.testing.plugin`).

Names are imported on first use, so that loading the pytest plugin (which every pytest run in
an environment with iotsched does) imports neither the scheduler's services nor the AWS SDK.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from iotsched.clock import ManualClock
    from iotsched.core.logs import LogLine
    from iotsched.testing._harness import TaskHarness
    from iotsched.testing._run import (
        CancelSwitch,
        Effect,
        EffectLedger,
        HandlerRun,
        ParamsError,
        run_handler,
    )
    from iotsched.testing._views import ShardRun, TaskRun

_WHERE = {
    "CancelSwitch": "iotsched.testing._run",
    "Effect": "iotsched.testing._run",
    "EffectLedger": "iotsched.testing._run",
    "HandlerRun": "iotsched.testing._run",
    "LogLine": "iotsched.core.logs",
    "ManualClock": "iotsched.clock",
    "ParamsError": "iotsched.testing._run",
    "ShardRun": "iotsched.testing._views",
    "TaskHarness": "iotsched.testing._harness",
    "TaskRun": "iotsched.testing._views",
    "run_handler": "iotsched.testing._run",
}

__all__ = [
    "CancelSwitch",
    "Effect",
    "EffectLedger",
    "HandlerRun",
    "LogLine",
    "ManualClock",
    "ParamsError",
    "ShardRun",
    "TaskHarness",
    "TaskRun",
    "run_handler",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'iotsched.testing' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
