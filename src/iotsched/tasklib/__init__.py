"""The task library: iotsched's own handlers and planners.

They register as any package's do: under the entry-point groups `iotsched.handlers` and
`iotsched.planners` of iotsched's `pyproject.toml`, each function declared with `@handler` or
`@planner`. The IoT handlers (`inspect_offline`, `tenant_report` + `tenant_report_merge`,
`archive_cold_data`, `plan_expiry_reminders`, `billing_settlement`) reach the outside world by
`ctx.resource(iot_resources)` (`iotsched.tasklib.resources`); without a setting they need, an
attempt fails with a message naming it.

Nothing here is imported at a function's cold start but this package itself: a handler's
module is imported on the first lookup of its name (`iotsched.registry`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from iotsched.registry import HandlerRegistry


def registry(given: Mapping[str, Callable[..., Any]] | None = None) -> HandlerRegistry:
    """Every installed handler by the name task definitions use (the built-ins among them),
    with `given` ones (in-process: tests, benchmarks) in place of any of the same name."""
    return HandlerRegistry(given)
