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

Returns `{devices, marked, marked_now, offline}`: devices seen; devices of the range marked
offline as of this interval's end, whichever attempt or run wrote the mark (an attempt killed
mid-shard leaves marks the next one finds made: they are still this inspection's work, so the
count agrees with the table); the marks this attempt's own writes made; devices offline in the
range (marked as of this interval or an earlier one).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from iotsched.context import ShardContext
from iotsched.handlers import handler
from iotsched.tasklib.common import Liveness, scope_of
from iotsched.tasklib.resources import iot_resources

#: Devices between two liveness checks (heartbeat when due, cancellation).
CHECK_EVERY = 1000


@handler
def inspect_offline(ctx: ShardContext) -> Mapping[str, Any]:
    """Mark late devices offline, as of the instance's data-interval end."""
    resources = ctx.resource(iot_resources)
    directory = resources.need_directory()
    scope = scope_of(ctx, resources)
    timeout = timedelta(seconds=float(ctx.params.get("heartbeat_timeout_s", 1800)))
    as_of = ctx.data_interval_end
    cutoff = as_of - timeout
    seen = marked = marked_now = offline = 0
    raced: set[str] = set()
    liveness = Liveness(ctx)
    for device in directory.devices(scope.tenant, scope.first_id, scope.end_id):
        seen += 1
        if seen % CHECK_EVERY == 0 and liveness.check():
            break
        if device.offline_since is not None:
            offline += 1
            marked += device.offline_since == as_of
            continue
        if device.last_heartbeat is None or device.last_heartbeat < cutoff:
            if directory.mark_offline(scope.tenant, device.device_id, since=as_of):
                marked_now += 1
                marked += 1
            else:
                raced.add(device.device_id)  # marked since the read, by a concurrent attempt
            offline += 1
    if raced:
        # Whose mark won is in the directory: read the range again (one read per block) and
        # count those whose mark is this interval's, as the loop does for marks it reads.
        marked += sum(
            1
            for device in directory.devices(scope.tenant, scope.first_id, scope.end_id)
            if device.device_id in raced and device.offline_since == as_of
        )
    return {"devices": seen, "marked": marked, "marked_now": marked_now, "offline": offline}
