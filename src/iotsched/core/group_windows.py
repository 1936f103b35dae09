"""Maintenance windows per device group (`window.group_attribute`): each shard of a `groups`
plan gets the window its device group carries (the attribute's `{cron, duration[, timezone]}`,
else the task window's default in the group's timezone), resolved once at the claim and stored
in the shard's bounds. A group with neither fails the plan (docs/design.md, "Windows per
device group").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

from iotsched.core import triggers
from iotsched.core.sharding import PlanningError
from iotsched.core.task_fleet_safety import Window

#: The key of a shard's own window in its bounds.
WINDOW_KEY = "window"
#: Problems a failed plan names, at most (the rest are counted).
MAX_NAMED_PROBLEMS = 5
_FIELDS = frozenset({"cron", "duration", "timezone"})


@dataclass(frozen=True)
class GroupFacts:
    """What the plan reads of one device group: its label (`tenant/group`), own timezone and
    attributes."""

    label: str
    timezone: str
    attributes: Mapping[str, Any]


def resolve_group_window(window: Window, group: GroupFacts) -> dict[str, str]:
    """The window stored in the bounds of `group`'s shard: `{cron, duration, timezone}`.

    Raises:
        ValueError: the attribute is malformed (not a mapping, unknown or missing fields, a bad
            cron, duration or timezone), or missing with no default on the task's window.
    """
    attribute = window.group_attribute or ""
    value = group.attributes.get(attribute)
    if value is None:
        if window.cron is None or window.duration is None:
            raise ValueError(
                f"no {attribute!r} attribute, and the task's window gives no default cron and "
                "duration"
            )
        spec: dict[str, Any] = {"cron": window.cron, "duration": window.duration}
    elif not isinstance(value, Mapping):
        raise ValueError(
            f"{attribute}: expected a mapping {{cron, duration[, timezone]}}, "
            f"got {type(value).__name__}"
        )
    else:
        spec = dict(value)
        unknown = sorted(str(k) for k in spec if k not in _FIELDS)
        if unknown:
            raise ValueError(f"{attribute}: unknown field(s) {', '.join(unknown)}")
        missing = [k for k in ("cron", "duration") if not spec.get(k)]
        if missing:
            raise ValueError(f"{attribute}: missing {' and '.join(missing)}")
        if not all(isinstance(v, str) for v in spec.values()):
            raise ValueError(f"{attribute}: cron, duration and timezone must be strings")
    zone = spec.get("timezone") or group.timezone
    where = attribute if value is not None else "the task's default window"
    try:
        cron = triggers.check_cron(spec["cron"])
        triggers.parse_rate(spec["duration"])
        triggers.load_zone(zone)
    except triggers.TriggerError as exc:
        raise ValueError(f"{where}: {exc}") from None
    return {"cron": cron, "duration": spec["duration"], "timezone": zone}


def plan_group_windows(window: Window, groups: Sequence[GroupFacts]) -> list[dict[str, str]]:
    """Each group's resolved window, in the groups' order.

    Raises:
        PlanningError: naming the groups whose window could not be resolved, and why.
    """
    resolved: list[dict[str, str]] = []
    problems: list[str] = []
    for group in groups:
        try:
            resolved.append(resolve_group_window(window, group))
        except ValueError as exc:
            problems.append(f"group {group.label}: {exc}")
    if problems:
        named = "; ".join(problems[:MAX_NAMED_PROBLEMS])
        more = len(problems) - MAX_NAMED_PROBLEMS
        suffix = f" (and {more} more groups)" if more > 0 else ""
        raise PlanningError(f"window.group_attribute: {named}{suffix}")
    return resolved


def shard_window(window: Window | None, bounds: Mapping[str, Any]) -> Window | None:
    """The window a shard's starts wait for: the instance's window, or for a per-group window
    the one fixed into the shard's bounds at the claim (None if it has none: a reduce, whose
    bounds are not a group's)."""
    if window is None or not window.per_group:
        return window
    spec = bounds.get(WINDOW_KEY)
    if not isinstance(spec, Mapping):
        return None
    return _window(
        str(spec.get("cron")),
        str(spec.get("duration")),
        str(spec.get("timezone") or "UTC"),
        window.on_close,
    )


@lru_cache(maxsize=1024)
def _window(
    cron: str, duration: str, timezone: str, on_close: Literal["defer", "cancel"]
) -> Window:
    # Shards of one instance share a handful of windows: parse each once per process.
    return Window(cron=cron, duration=duration, timezone=timezone, on_close=on_close)
