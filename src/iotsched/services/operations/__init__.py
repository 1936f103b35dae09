"""Operations: what operators read and do.

`views` (tasks, instances, shards, upcoming fires), `overview` (a window's figures), `logs` (an
attempt's log), `on_demand` (run now, submit for later, backfill: through the tick's claim),
`actions` (operator actions on instances: cancel, rerun). Each change is audited (`notices`).
Ports: the task store, the instance store, the shard queue, the attempt log store, the queue
gauge, the clock; firing and ending an instance go through the lifecycle.
"""
