"""`inspect_offline`: mark the devices of the shard's range offline when their heartbeat is late.

Params:
    heartbeat_timeout_s: a device is offline when its last heartbeat is older than this,
        measured from the instance's data-interval end (default 1800).
    tenant: the tenant, when neither the bounds nor the task name one.

Bounds: `{tenant, group, first_id, end_id}` (sharding `groups`), an id range, or `{tenant}`.

Effects: for each device of the range whose last heartbeat is before
`data_interval_end - heartbeat_timeout_s` (or that never reported) and that is not marked yet,
one conditional write on the directory marks it offline as of `data_interval_end`. A device whose
last heartbeat is later than the interval's end was reporting through it: online.

Why it is safe twice: "now" is never read, so a rerun, a failover or a catch-up of an old
interval judges the same devices by the same instant; the mark is conditional (the first mark
stays, a second one changes nothing), so a second run marks none and the end state is the same.
Returns `{devices, marked, offline}`: devices seen, marked by this run, offline in the range.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from iotsched.context import ShardContext
from iotsched.tasklib.common import Liveness, TaskResources, scope_of

#: Devices between two liveness checks (heartbeat when due, cancellation).
CHECK_EVERY = 1000


def inspect_offline(ctx: ShardContext, resources: TaskResources) -> Mapping[str, Any]:
    """Mark late devices offline, as of the instance's data-interval end."""
    directory = resources.need_directory()
    scope = scope_of(ctx, resources)
    timeout = timedelta(seconds=float(ctx.params.get("heartbeat_timeout_s", 1800)))
    as_of = ctx.data_interval_end
    cutoff = as_of - timeout
    seen = marked = offline = 0
    liveness = Liveness(ctx)
    for device in directory.devices(scope.tenant, scope.first_id, scope.end_id):
        seen += 1
        if seen % CHECK_EVERY == 0 and liveness.check():
            break
        if device.offline_since is not None:
            offline += 1
            continue
        if device.last_heartbeat is None or device.last_heartbeat < cutoff:
            if directory.mark_offline(scope.tenant, device.device_id, since=as_of):
                marked += 1
            offline += 1
    return {"devices": seen, "marked": marked, "offline": offline}
