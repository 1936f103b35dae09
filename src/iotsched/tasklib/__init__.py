"""The task library: handlers by registered name.

The IoT handlers (`inspect_offline`, `tenant_report` + `tenant_report_merge`,
`archive_cold_data`, `plan_expiry_reminders`, `billing_settlement`) are bound to their
`TaskResources` here; without resources they are still registered (task files validate), and an
attempt fails with a message naming the missing setting.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from iotsched.context import Handler, ShardContext
from iotsched.tasklib.archive_cold_data import archive_cold_data
from iotsched.tasklib.billing_settlement import billing_settlement
from iotsched.tasklib.chaos import chaos
from iotsched.tasklib.common import TaskResources
from iotsched.tasklib.inspect_offline import inspect_offline
from iotsched.tasklib.noop import noop
from iotsched.tasklib.plan_expiry_reminders import plan_expiry_reminders
from iotsched.tasklib.tenant_report import tenant_report, tenant_report_merge

_IOT: dict[str, Callable[[ShardContext, TaskResources], Mapping[str, Any] | None]] = {
    "inspect_offline": inspect_offline,
    "tenant_report": tenant_report,
    "tenant_report_merge": tenant_report_merge,
    "archive_cold_data": archive_cold_data,
    "plan_expiry_reminders": plan_expiry_reminders,
    "billing_settlement": billing_settlement,
}


def registry(resources: TaskResources | None = None) -> Mapping[str, Handler]:
    """Every built-in handler by the name task definitions use."""
    bound = resources or TaskResources()
    handlers: dict[str, Handler] = {"noop": noop, "chaos": chaos}
    for name, fn in _IOT.items():
        handlers[name] = _bind(fn, bound)
    return handlers


def _bind(
    fn: Callable[[ShardContext, TaskResources], Mapping[str, Any] | None],
    resources: TaskResources,
) -> Handler:
    @functools.wraps(fn)
    def handler(ctx: ShardContext) -> Mapping[str, Any] | None:
        return fn(ctx, resources)

    return handler
