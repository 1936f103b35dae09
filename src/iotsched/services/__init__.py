"""Use-cases: plain functions over the ports, grouped by capability.

Listed from the outermost in: each imports only those below it (an import-linter contract).

- `operations`: what operators read and do: views, overview, logs, on-demand runs and
  backfills, instance actions.
- `definitions`: task files validated and applied, versions and rollback, pause and delete.
- `execution`: one worker invocation's shards (lease, handler, record, finalize), the abort of
  an instance, the sweeper, dead letters.
- `scheduling`: the tick, claims, instances built, sent and ended, fan-in.
- `tenancy`: a tenant's quotas and its in-flight caps.
- `fleet`: when a shard may start (rollout rate, ramp, windows, the abort fence), pausing a task.
- `notices`: alerts and their policy, the audit trail.

`wiring.Wiring` is what a use-case is given (built by `iotsched.bootstrap`); `port_sets` names
the subsets of it several use-cases take; `end_tally` counts the instances a process ended.
"""
