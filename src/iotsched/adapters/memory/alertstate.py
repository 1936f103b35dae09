"""The alert policy's state in dicts: threshold windows' counts and the tasks failing."""

from __future__ import annotations

import threading
from datetime import datetime

from iotsched.ports.alert_state import FailureCount


class AlertStates:
    """AlertStateStore under a lock (as the DynamoDB adapter's per-item conditional writes)."""

    _lock: threading.Lock

    def __init__(self) -> None:
        self._windows: dict[tuple[str, datetime], list[str]] = {}
        self._failing: dict[str, str] = {}  # task: the instance it fails since
        self._recovered: dict[str, tuple[str, str]] = {}  # task: (failing since, cleared by)
        self._state_expires: dict[str, datetime] = {}  # task: when its state item expires

    def count_failure(
        self,
        task_id: str,
        window_start: datetime,
        failure_id: str,
        *,
        threshold: int,
        expires_at: datetime,
    ) -> FailureCount:
        with self._lock:
            ids = self._windows.setdefault((task_id, window_start), [])
            if failure_id in ids:  # counted by an earlier call: the count it made
                return FailureCount(ids.index(failure_id) + 1, True, list(ids))
            counted = len(ids) < threshold
            if counted:
                ids.append(failure_id)
            return FailureCount(len(ids), counted, list(ids))

    def _state_live(self, task_id: str, at: datetime) -> bool:
        expires = self._state_expires.get(task_id)
        return expires is None or expires > at

    def forget_alert_state(self, task_id: str) -> None:
        """The task's state item deleted (with its task: the caller holds the lock)."""
        for states in (self._failing, self._recovered, self._state_expires):
            states.pop(task_id, None)

    def mark_failing(
        self, task_id: str, instance_id: str, *, at: datetime, expires_at: datetime
    ) -> None:
        with self._lock:
            if not self._state_live(task_id, at):  # expired, as if its TTL had deleted it
                self.forget_alert_state(task_id)
            self._failing.setdefault(task_id, instance_id)
            self._state_expires[task_id] = expires_at

    def clear_failing(
        self, task_id: str, *, by: str, at: datetime, expires_at: datetime
    ) -> str | None:
        with self._lock:
            if self._state_live(task_id, at):
                since = self._failing.pop(task_id, None)
                if since is not None:
                    self._recovered[task_id] = (since, by)
                    self._state_expires[task_id] = expires_at
                    return since
            earlier = self._recovered.get(task_id)
            return earlier[0] if earlier is not None and earlier[1] == by else None
