"""Fleet safety: when a shard of an instance may touch devices.

`rollout` decides each shard's start from the policies the instance stored at its claim (rate,
ramp, maintenance window, the abort fence) and paces a rolled-out instance's sends; `pausing`
pauses a task with a note when an instance's end asks for it. The abort criteria are decided in
`core.abort` and applied where shards end (`execution.abort`: fence the starts, then end the
instance). Ports: the instance store (the start gates), the task store (a pause and its audit
record), the clock.
"""
