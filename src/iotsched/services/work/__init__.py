"""One shard message: take the lease, run the handler, write the record, maybe finalize.

The messages of one worker invocation (an SQS batch of up to 10) run one after another in a
`ShardBatch`, and the final writes of those that finished commit together: one transaction of
every shard's fenced write plus one counter decrement per instance, then one read per instance
to learn `remaining`. `run_shard` is a batch of one.

A batch is built per invocation from plain parts, each in its own module:

* `attempt`: the attempt runner (take the lease, run the handler, decide the outcome);
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
"""

from __future__ import annotations

from iotsched.services.work.attempt import MAX_ERROR_CHARS, AttemptRunner
from iotsched.services.work.batch import ShardBatch, run_shard, waiting_records
from iotsched.services.work.buffer import UNWRITTEN_RETURN_S, CompletionBuffer
from iotsched.services.work.capture import (
    HANDLER_LOGGER,
    AttemptCapture,
    AttemptKeys,
    LogStream,
    current_keys,
)
from iotsched.services.work.deadline import COMMIT_ALLOWANCE_S, InvocationDeadline
from iotsched.services.work.handler_context import (
    MAX_RESULT_BYTES,
    ResultTooLargeError,
    run_ids,
)
from iotsched.services.work.hold import VisibilityHold
from iotsched.services.work.leases import end_exhausted
from iotsched.services.work.outcomes import (
    SHARD_ENDED,
    CompletionNotWrittenError,
    Delivery,
    GivenBackError,
    PendingShard,
    RetryShardError,
    ShardOutcome,
    ShardReport,
)
from iotsched.services.work.reads import InstanceReads
from iotsched.services.work.renewal import LeaseRenewal, RenewalTimeoutError, call_within
from iotsched.services.work.schedules import HeldRenewals, Renewing, thread_renewals, thread_timer
from iotsched.services.work.timer import AttemptTimeoutError, AttemptTimer

__all__ = [
    "COMMIT_ALLOWANCE_S",
    "HANDLER_LOGGER",
    "MAX_ERROR_CHARS",
    "MAX_RESULT_BYTES",
    "SHARD_ENDED",
    "UNWRITTEN_RETURN_S",
    "AttemptCapture",
    "AttemptKeys",
    "AttemptRunner",
    "AttemptTimeoutError",
    "AttemptTimer",
    "CompletionBuffer",
    "CompletionNotWrittenError",
    "Delivery",
    "GivenBackError",
    "HeldRenewals",
    "InstanceReads",
    "InvocationDeadline",
    "LeaseRenewal",
    "LogStream",
    "PendingShard",
    "RenewalTimeoutError",
    "Renewing",
    "ResultTooLargeError",
    "RetryShardError",
    "ShardBatch",
    "ShardOutcome",
    "ShardReport",
    "VisibilityHold",
    "call_within",
    "current_keys",
    "end_exhausted",
    "run_ids",
    "run_shard",
    "thread_renewals",
    "thread_timer",
    "waiting_records",
]
