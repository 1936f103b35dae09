"""How many instances this process ended, by status: the functions' outcome metrics.

An instance ends in one conditional write, and only the caller whose write ended it goes on to
`lifecycle.after_end` (a racing worker or sweeper that finds it final does not): that is where
the end is tallied, so each end is counted once, by the function that wrote it, whichever path
ended it (the last shard, an abort, a timeout, a failure to start). The services ring publishes
no metrics itself: each function drains the tally into its own EMF document.
"""

from __future__ import annotations

import threading
from collections import Counter

from iotsched.core.instance_record import InstanceStatus

#: The metric each final status is counted under. Skipped and timed-out instances have their
#: own metrics already (`InstancesSkipped` from the dispatcher, `InstancesTimedOut` from the
#: sweeper). Cancelled ones have none: an operator cancels through the API or the CLI, which
#: publish no metrics, so a count would miss most of them (the audit log has every cancel).
ENDED_METRICS: dict[InstanceStatus, str] = {
    InstanceStatus.SUCCEEDED: "InstancesSucceeded",
    InstanceStatus.FAILED: "InstancesFailed",
    InstanceStatus.ABORTED: "InstancesAborted",
}


class EndTally:
    """Ends written by this process since the last `drain`.

    Locked: a worker's batch may commit (and so end instances) from its timer's thread.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[InstanceStatus] = Counter()

    def record(self, status: InstanceStatus) -> None:
        """Count one end, written by this process."""
        with self._lock:
            self._counts[status] += 1

    def drain(self) -> dict[str, int]:
        """The metrics of the ends counted since the last drain (those that happened only),
        and start again from zero."""
        with self._lock:
            counts, self._counts = self._counts, Counter()
        return {ENDED_METRICS[status]: n for status, n in counts.items() if status in ENDED_METRICS}
