"""Execution: a worker invocation's shard messages run (lease, handler, record, finalize),
and what ends the shards nobody else will: the sweeper (`sweep`), dead letters
(`dead_letters`), the one finalizer of an instance (`completion`), the abort of an instance
whose failures reached its criteria (`abort`). Ports: the instance store, the shard queue, the alert sink.

The messages of one worker invocation (an SQS batch of up to 10) run one after another in a
`ShardBatch`, and the final writes of those that finished commit together: one transaction of
every shard's fenced write plus one counter decrement per instance, then one read per instance
to learn `remaining`. `run_shard` is a batch of one.

A batch is built per invocation from plain parts, each in its own module:

* `attempt`: the attempt runner (take the lease, run the handler, decide the outcome);
* `start`: the steps of a start around its lease (slot, seat, fence) and what a start that may
  not go on does instead (a deferral, a give-back);
* `buffer`: the completion buffer (completions held and committed together; the heartbeat's
  and the timer's commits);
* `deadline`: the invocation's deadline (time left; the records not started given back);
* `hold`: the records' visibility, kept short while the invocation runs;
* `renewal`: an attempt's lease, renewed while it lives;
* `schedules`: the threads (or a test's hand) that run timers and renewals;
* `capture`: what the handler logs during its attempt, and where that log is kept;
* `timer`: the attempt's timeout; `handler_context`: what a handler sees of its attempt;
* `leases`: leases a delivery did not take (ended, or indexed); `reads`: shared instance
  reads; `outcomes`: what flows between the parts.

What one function invocation does, reached by unit tests without a Lambda event:
`worker_invocation` (a batch's records run, settled and committed, and their metrics),
`sweeper_invocation` and `dead_letter_invocation` (a sweep's and a dead letter's counts).
"""
