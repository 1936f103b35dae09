"""Scheduling: which task fires at which slot, and the instance each firing becomes.

`tick` works a minute's due tasks by bucket, one by one (`task_dispatch`) or in pages
(`page_dispatch`), and claims each (task, slot) with a conditional write; `build` plans the
claimed instance's shards; `lifecycle` moves an instance through fired, sent and ended with its
follow-ups; `send` puts its shard messages on the queue from a cursor; `fan_in` decides when a
task fires once all its parents succeeded for a business date; `report` is what one dispatch
did; `dispatcher_invocation` is what one tick or dispatcher invocation does, reached by unit tests
without a Lambda event. Operators' runs, submissions and backfills (`operations.on_demand`) claim
through the same `lifecycle`.

Ports: the task store, the instance store and the blocking store (claims, holds, cursors), the
shard queue and the dispatch queue, the device directory (a `groups` plan), the alert sink, the
clock, the tracer.
"""
