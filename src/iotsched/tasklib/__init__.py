"""The task library: handlers by registered name.

The IoT handlers (`inspect_offline`, `tenant_report` + `tenant_report_merge`,
`archive_cold_data`, `plan_expiry_reminders`, `billing_settlement`) are bound to their
`TaskResources` here; without resources they are still registered (task files validate), and an
attempt fails with a message naming the missing setting.

Every function's cold start builds the registry, and most never run a handler (the dispatcher,
the sweeper, the API only check names): a handler's module is imported when its name is first
looked up, so a worker imports the handlers its tasks use and no other function imports any
(tests/unit/test_cold_imports.py).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from iotsched.context import Handler, ShardContext
from iotsched.tasklib.resources import TaskResources

#: Each built-in handler's module, and whether it takes the `TaskResources` (the IoT handlers).
#: The function has the handler's name in its module.
_BUILTIN: dict[str, tuple[str, bool]] = {
    "noop": ("iotsched.tasklib.noop", False),
    "chaos": ("iotsched.tasklib.chaos", False),
    "inspect_offline": ("iotsched.tasklib.inspect_offline", True),
    "tenant_report": ("iotsched.tasklib.tenant_report", True),
    "tenant_report_merge": ("iotsched.tasklib.tenant_report", True),
    "archive_cold_data": ("iotsched.tasklib.archive_cold_data", True),
    "plan_expiry_reminders": ("iotsched.tasklib.plan_expiry_reminders", True),
    "billing_settlement": ("iotsched.tasklib.billing_settlement", True),
}


class Registry(Mapping[str, Handler]):
    """The built-in handlers by name, each imported (and bound) on its first lookup."""

    def __init__(self, resources: TaskResources) -> None:
        self._resources = resources
        self._loaded: dict[str, Handler] = {}

    def __getitem__(self, name: str) -> Handler:
        handler = self._loaded.get(name)
        if handler is None:
            module, takes_resources = _BUILTIN[name]  # KeyError: not a built-in handler
            fn = getattr(importlib.import_module(module), name)
            handler = _bind(fn, self._resources) if takes_resources else fn
            self._loaded[name] = handler  # a race binds twice: the same handler either way
        return handler

    def __contains__(self, name: object) -> bool:
        return name in _BUILTIN  # without importing the handler

    def __iter__(self) -> Iterator[str]:
        return iter(_BUILTIN)

    def __len__(self) -> int:
        return len(_BUILTIN)


def registry(resources: TaskResources | None = None) -> Mapping[str, Handler]:
    """Every built-in handler by the name task definitions use."""
    return Registry(resources or TaskResources())


def _bind(
    fn: Callable[[ShardContext, TaskResources], Mapping[str, Any] | None],
    resources: TaskResources,
) -> Handler:
    @functools.wraps(fn)
    def handler(ctx: ShardContext) -> Mapping[str, Any] | None:
        return fn(ctx, resources)

    return handler
