"""The alert policy's state port: failures counted per threshold window, and whether a task
is failing. Each count and each clear lands once, however often a call is retried."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol


@dataclass(frozen=True)
class FailureCount:
    """A threshold window's count after `count_failure`."""

    # failures counted in the window (never past its threshold); for a failure counted by an
    # earlier call (a retry, a lost answer), the count it made then
    count: int
    counted: bool  # this failure is one of them (counted now, or by an earlier call)
    instances: list[str]  # the counted failures' ids


class AlertStateStore(Protocol):
    """The state of a task's alert policy: failures counted per threshold window, and whether
    the task is failing (for its recovery notice). Items per task, never one every task writes.
    `task_id` names the task's incarnation (`incarnation_key`): a task created again under a
    deleted one's id counts and recovers on its own."""

    def count_failure(
        self,
        task_id: str,
        window_start: datetime,
        failure_id: str,
        *,
        threshold: int,
        expires_at: datetime,
    ) -> FailureCount:
        """Count `failure_id` in the task's window starting `window_start`, once, while the
        count is below `threshold` (one conditional write naming the id: a retried or repeated
        call counts nothing more and answers `counted`). At the threshold nothing more is
        counted: a later failure is answered `counted=False` with the full count."""
        ...

    def mark_failing(
        self, task_id: str, instance_id: str, *, at: datetime, expires_at: datetime
    ) -> None:
        """Record that the task is failing, since `instance_id` unless it already was, as of
        the failure's instant `at`; the state is kept until `expires_at` (each failure moves
        it on). A state expired at `at` is gone: the task fails since `instance_id`."""
        ...

    def clear_failing(
        self, task_id: str, *, by: str, at: datetime, expires_at: datetime
    ) -> str | None:
        """End the task's failing state on behalf of instance `by` (succeeded at `at`);
        returns the instance it was failing since, to exactly one caller `by` (again to the
        same `by`, whose earlier call may have landed), None to every other and when it was
        not failing (or its state had expired at `at`). The cleared state, which answers a
        retried call, is kept until `expires_at`."""
        ...
