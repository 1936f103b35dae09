"""Tenancy: what one tenant may use of the shared scheduler.

`quotas` stores a tenant's quotas on each of its tasks (so neither the tick nor a worker reads a
tenant item) and holds `max_tasks`; `slots` enforces the in-flight caps: a tenant's shard slots
(`max_concurrent_shards`, taken at a shard's start, given back at its end), its instances per
minute (`max_instances_per_minute`, counted before an instance's first message), and the
`quota_exceeded` alert a wait raises. Ports: the task store (quotas, task counts), the instance
store (tenant slots and gates), the alert sink, the clock.
"""
