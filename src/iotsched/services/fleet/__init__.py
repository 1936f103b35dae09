"""Fleet safety: when a shard of an instance may touch devices.

`rollout` decides each shard's start from the policies the instance stored at its claim (rate,
ramp, maintenance window, the abort fence) and paces a rolled-out instance's sends; `abort` fences
and ends an instance whose failures reached its abort criteria; `pausing` pauses a task with a
note when an instance's end asks for it. Ports: the instance store (the start gates), the task
store (a pause and its audit record), the clock; `abort` ends through the lifecycle.
"""
