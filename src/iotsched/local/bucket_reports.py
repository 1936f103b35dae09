"""A tick's bucket dispatches, settled and added up into the tick's report.

A delivered tick fans out one dispatch-queue message per bucket; the bucket dispatcher
processes report each batch they end (or lose). `BucketReports` records how each message
settled and `gather` waits for a tick's messages and merges their reports into one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

#: The report keys a tick's bucket dispatches add up (lists are joined, counts summed).
_TICK_LISTS = ("claimed", "resumed", "skipped", "queued", "covered", "failed", "failed_tasks")
_TICK_COUNTS = ("due_tasks", "duplicate_claims", "messages_sent", "send_requests")


class BucketReports:
    """The dispatch queue's messages as their bucket dispatches settled. Thread-safe."""

    def __init__(self) -> None:
        # message id -> ("done", its report) | ("failed", why); a message waiting behind its
        # bucket's lease is not settled yet.
        self._settled: dict[str, tuple[str, Any]] = {}
        self._cond = threading.Condition()

    def settle(self, line: dict[str, Any]) -> None:
        """A bucket dispatcher's batch ended (or its process died): settle its messages."""
        with self._cond:
            for message_id in line.get("died", []):
                self._settled[message_id] = ("failed", "the bucket dispatcher's process died")
            result = line.get("result") or {}
            reports = result.get("reports") or {}
            failed = set(line.get("failed_ids", []))
            for message_id in line.get("messages", []):
                report = reports.get(message_id)
                if message_id not in failed:
                    self._settled[message_id] = ("done", report)
                elif report is None or report.get("verdict") != "wait":
                    self._settled[message_id] = ("failed", "the bucket dispatch raised")
            self._cond.notify_all()

    def gather(self, fan_out: dict[str, Any], timeout: float) -> tuple[dict[str, Any], list[str]]:
        """Wait up to `timeout` seconds until every message of a tick's fan-out settled;
        (its bucket reports added up, the failures)."""
        ids = [str(m) for m in fan_out.get("messages", [])]
        deadline = time.monotonic() + timeout
        with self._cond:
            while not all(m in self._settled for m in ids):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(min(left, 0.5))
            settled = {m: self._settled.pop(m) for m in ids if m in self._settled}
        merged: dict[str, Any] = {
            "now": fan_out.get("now"),
            "buckets": fan_out.get("buckets"),
            **{key: [] for key in _TICK_LISTS},
            **dict.fromkeys(_TICK_COUNTS, 0),
            "buckets_dispatched": 0,
            "buckets_absorbed": 0,
            "outcomes": [],
        }
        failures = [f"{m}: {why}" for m, (state, why) in settled.items() if state == "failed"]
        failures += [f"{m}: not dispatched within {timeout}s" for m in ids if m not in settled]
        for state, bucket in settled.values():
            if state != "done" or not bucket:
                continue
            report = bucket.get("report")
            merged["outcomes"].append(_outcome(bucket))
            if report is None:
                merged["buckets_absorbed"] += 1
                continue
            merged["buckets_dispatched"] += 1
            for key in _TICK_LISTS:
                merged[key] += report.get(key, [])
            for key in _TICK_COUNTS:
                merged[key] += report.get(key, 0)
        return merged, failures


def _outcome(bucket: Mapping[str, Any]) -> dict[str, Any]:
    """One bucket message's outcome in brief: which bucket and minute, its verdict, and the
    due tasks it read (0: none due any more, or never), claimed and found claimed already."""
    report = bucket.get("report") or {}
    return {
        "minute": bucket.get("minute"),
        "bucket": bucket.get("bucket"),
        "verdict": bucket.get("verdict"),
        "due_tasks": int(report.get("due_tasks", 0)),
        "claimed": len(report.get("claimed", [])),
        "duplicate_claims": int(report.get("duplicate_claims", 0)),
    }
