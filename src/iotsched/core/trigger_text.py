"""Triggers in words, for operators: `every day at 02:00 (Europe/Berlin)` reads faster at 3 am
than `0 2 * * *`.

Common cron shapes get a sentence; anything else is shown as the expression itself, so the
text is never wrong, only sometimes terse.
"""

from __future__ import annotations

from datetime import timedelta

from iotsched.core.task_triggers import AfterTrigger, AtTrigger, CronTrigger, RateTrigger, Trigger
from iotsched.core.timeutil import iso

_DAYS = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"]


def describe_trigger(trigger: Trigger) -> str:
    """One line saying when `trigger` fires, with its timezone where it matters."""
    if isinstance(trigger, CronTrigger):
        return f"{_cron_words(trigger.cron)} ({trigger.timezone})"
    if isinstance(trigger, RateTrigger):
        return _period_words(trigger.period)
    if isinstance(trigger, AtTrigger):
        return f"once, at {iso(trigger.at)}"
    if isinstance(trigger, AfterTrigger):
        parents = ", ".join(trigger.after)
        return (
            f"after {parents} succeed{'s' if len(trigger.after) == 1 else ''} (per business date)"
        )
    return str(trigger)  # pragma: no cover - the union is closed


def _period_words(period: timedelta) -> str:
    minutes = int(period.total_seconds() // 60)
    for unit, size in (("day", 1440), ("hour", 60), ("minute", 1)):
        if minutes % size == 0:
            count = minutes // size
            return f"every {unit}" if count == 1 else f"every {count} {unit}s"
    return f"every {minutes} minutes"  # pragma: no cover - minutes divide by 1


def _cron_words(expr: str) -> str:
    fields = expr.split()
    if len(fields) != 5:
        return f"cron {expr}"
    minute, hour, dom, month, dow = fields
    if (dom, month) != ("*", "*") and not (month == "*" and dom.isdigit() and dow == "*"):
        return f"cron {expr}"
    if hour == "*" and dom == "*" and dow == "*":
        if minute == "*":
            return "every minute"
        if minute.startswith("*/") and minute[2:].isdigit():
            return f"every {int(minute[2:])} minutes"
        if minute.isdigit():
            return f"every hour at minute {int(minute)}"
        return f"cron {expr}"
    if not (minute.isdigit() and hour.isdigit()):
        if minute.isdigit() and hour.startswith("*/") and hour[2:].isdigit() and dom == "*":
            return f"every {int(hour[2:])} hours at minute {int(minute)}"
        return f"cron {expr}"
    at = f"{int(hour):02d}:{int(minute):02d}"
    if dom.isdigit():
        return f"on day {int(dom)} of every month at {at}"
    days = _dow_words(dow)
    return f"every {days} at {at}" if days else f"cron {expr}"


def _dow_words(dow: str) -> str | None:
    if dow == "*":
        return "day"
    names = {"1-5": "weekday (Monday to Friday)", "0,6": "Saturday and Sunday"}
    if dow in names:
        return names[dow]
    parts = dow.split(",")
    if all(p.isdigit() and int(p) <= 7 for p in parts):
        return ", ".join(_DAYS[int(p) % 7] for p in parts)
    return None
