"""An invocation's reads of the instances its records belong to (`InstanceReads`).

It takes `InstancePorts`: it reads instances only.
"""

from __future__ import annotations

import time

from iotsched.core.instance_record import InstanceRecord
from iotsched.services.port_sets import InstancePorts


class InstanceReads:
    """Reads of an instance before a lease (is it cancelled?), shared by an invocation's
    messages for `INSTANCE_READ_S`: a cancel is still seen before any handler starts more than
    that after it. A commit's read of an instance (`remember`) is shared as well."""

    INSTANCE_READ_S = 1.0

    def __init__(self, services: InstancePorts) -> None:
        self._services = services
        self._reads: dict[str, tuple[float, InstanceRecord | None]] = {}

    def get(self, instance_id: str) -> InstanceRecord | None:
        """The instance, read at most once per `INSTANCE_READ_S`."""
        read = self._reads.get(instance_id)
        if read is not None and time.monotonic() - read[0] < self.INSTANCE_READ_S:
            return read[1]
        found = self._services.instances.get_instance(instance_id)
        self._reads[instance_id] = (time.monotonic(), found)
        return found

    def remember(self, instance_id: str, instance: InstanceRecord | None) -> None:
        """An instance read now by other means (a commit's strongly consistent read)."""
        self._reads[instance_id] = (time.monotonic(), instance)
