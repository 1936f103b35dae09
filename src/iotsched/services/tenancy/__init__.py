"""Tenancy: what one tenant may use of the shared scheduler.

`quotas` stores a tenant's quotas on each of its tasks (so neither the tick nor a worker reads a
tenant item) and holds `max_tasks`; `slots` takes and gives back a tenant's in-flight shard
slots (`max_concurrent_shards`) at a shard's start and end. Ports: the task store, the instance
store (tenant slots).
"""
