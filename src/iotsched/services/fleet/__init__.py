"""Fleet safety: when a shard of an instance may touch devices.

`rollout` decides each shard's start from the policies the instance stored at its claim (rate,
ramp, maintenance window, the abort fence); `abort` ends an instance whose failures reached its
abort criteria; `pausing` pauses a task with a note. Ports: the instance store (start gates),
the task store.
"""
