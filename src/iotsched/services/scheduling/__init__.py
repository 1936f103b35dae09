"""Scheduling: which task fires at which slot, and the instance each firing becomes.

`tick` finds due tasks and claims each (task, slot) with a conditional write; `build` plans
the claimed instance's shards; `send` puts its shard messages on the queue from a cursor;
`lifecycle` moves an instance through fired, sent and ended with its follow-ups; `fan_in`
fires a task once all its parents succeeded for a business date; `on_demand` runs, submits and
backfills what an operator asks for; `report` is what one tick did. Ports: the task store, the
instance store, the shard queue, the clock, the tracer.
"""
