"""Use-cases: plain functions over the ports, grouped by capability.

- `scheduling`: the tick, claims, instances built and sent, fan-in, on-demand runs.
- `execution`: one worker invocation's shards (lease, handler, record, finalize), the sweeper,
  dead letters.
- `fleet`: when a shard may start (rollout rate, windows), abort criteria, pausing a task.
- `tenancy`: a tenant's quotas and its in-flight caps.
- `definitions`: task files validated and applied, versions and rollback, pause and delete.
- `operations`: what operators read and do: views, overview, logs, audit, alerts, instance
  actions.

`wiring.Wiring` is what a use-case is given (built by `iotsched.bootstrap`); `port_sets` names
the subsets of it several use-cases take; `end_tally` counts the instances a process ended.
"""
