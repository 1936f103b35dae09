"""The alert policy's state in dicts: threshold windows' counts and the tasks failing."""

from __future__ import annotations

import threading
from datetime import datetime

from iotsched.ports import FailureCount


class AlertStates:
    """AlertStateStore under a lock (as the DynamoDB adapter's per-item conditional writes)."""

    _lock: threading.Lock

    def __init__(self) -> None:
        self._windows: dict[tuple[str, datetime], list[str]] = {}
        self._failing: dict[str, str] = {}  # task: the instance it fails since
        self._recovered: dict[str, tuple[str, str]] = {}  # task: (failing since, cleared by)

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
            counted = failure_id in ids
            if not counted and len(ids) < threshold:
                ids.append(failure_id)
                counted = True
            return FailureCount(len(ids), counted, list(ids))

    def mark_failing(self, task_id: str, instance_id: str) -> None:
        with self._lock:
            self._failing.setdefault(task_id, instance_id)

    def clear_failing(self, task_id: str, *, by: str) -> str | None:
        with self._lock:
            since = self._failing.pop(task_id, None)
            if since is not None:
                self._recovered[task_id] = (since, by)
                return since
            earlier = self._recovered.get(task_id)
            return earlier[0] if earlier is not None and earlier[1] == by else None
