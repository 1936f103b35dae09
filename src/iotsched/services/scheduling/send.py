"""Send an instance's shard messages: in steps from its cursor, then mark it running.

The lowest step of a dispatch: it writes the queue and the instance's send cursor (`sent`),
and never ends an instance; a message too large for the queue is raised to the caller
(`lifecycle.send_shards` ends the instance). After each step but the last, one conditional
write fenced on the dispatch lease records the cursor and renews the lease, so a dispatcher
that dies is taken over from its last step, and one that was only slow stops at its next
write. A paced instance (`rollout`, `window`) is sent only as its shards may start
(`fleet.rollout.send_allowance`), and a capped tenant's only a window at a time
(`tenancy.pacing`).

Its functions take `SendPorts`: the queue, the instance store, the clock, the faults, the tuning.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor, wait
from datetime import datetime, timedelta

from iotsched.core import messages
from iotsched.core.instance_record import (
    InstanceRecord,
    InstanceStatus,
)
from iotsched.core.messages import send_order
from iotsched.core.shard_message import ShardMessage
from iotsched.ports.messaging import MessageTooLargeError
from iotsched.ports.store_errors import StoreContendedError
from iotsched.services.fleet import rollout
from iotsched.services.port_sets import SendPorts
from iotsched.services.scheduling.report import TickReport
from iotsched.services.tenancy import pacing

log = logging.getLogger(__name__)


#: Shard messages per step of a send. After each step but the last the instance records how
#: many went out (`InstanceRecord.sent`) in one conditional write that also renews the dispatch
#: lease: a crash re-sends at most the step it was in, never from shard 0. An instance of at
#: most one step (nearly all of them) sends its messages, then its running mark.
STEP_SHARDS = 1_000
#: Messages per SendMessageBatch call a step's threads take in turn (10 per call, 10 calls).
CHUNK_MESSAGES = 100
#: Threads sending a step's chunks together: the calls wait on the network, not the CPU.
SEND_WORKERS = 10
#: How long one call of `send_messages` goes on before it gives the rest of the send up to a
#: continuation (the next sweep, or a later delivery of the tick), well within the dispatcher's
#: and the sweeper's 60 s timeouts.
SEND_BUDGET_S = 30.0


def shard_messages(instance: InstanceRecord) -> list[ShardMessage]:
    """Every message the instance sends, in send order (see `iotsched.core.messages`)."""
    return messages.shard_messages(instance)


def reduce_message(instance: InstanceRecord) -> ShardMessage:
    """The reduce's message: the instance's reduce handler, as shard number `plan.count`."""
    return messages.reduce_message(instance)


def send_messages(
    instance: InstanceRecord,
    services: SendPorts,
    report: TickReport,
    *,
    budget_s: float | None = None,
    behind: bool = False,
) -> bool:
    """Send the instance's shard messages from `instance.sent` on, then mark it running; True
    if this call sent its last message. `behind`: a capped instance behind another in its
    tenant's line (`tenancy.pacing.my_turn`), which sends nothing now.

    The caller holds the dispatch lease `instance.dispatch_lease_until` (the claim's, or one
    taken with `take_dispatch`: see `resume_dispatch`). Messages go in steps of `STEP_SHARDS`,
    each step's SendMessageBatch calls `SEND_WORKERS` at a time; after each step but the last,
    `advance_dispatch` records the cursor and renews the lease, fenced on the lease held. The
    send stops without marking the instance running when that write is refused (another
    dispatcher took over after the lease ended; the instance left `planning`), and after
    `budget_s` seconds (`SEND_BUDGET_S` by default), giving the lease up so that the next taker
    resumes at the cursor.

    Re-sending after a crash is safe: a duplicate message finds its shard leased or finished.

    Raises:
        MessageTooLargeError: a message of a step is too large for the queue (nothing of that
            step was sent; the steps before it were).
    """
    order = send_order(instance)
    total = len(order)
    cursor = min(instance.sent, total)
    held = instance.dispatch_lease_until
    # A paced instance sends what may start now, and the rest when its dispatch lease (moved to
    # the next minute, or the window's next opening) has ended and the sweeper resumes it.
    stop_at, paused_until = total, None
    if rollout.paced(instance):
        allowance = rollout.send_allowance(instance, services.clock.now())
        stop_at, paused_until = min(total, cursor + allowance.count), allowance.until
    spread_from = 0.0
    if pacing.cap_paced(instance):
        # A capped tenant's instance keeps a window of its shards on the queue, and sends only
        # in its turn in the tenant's line; its workers (or the sweeper) send the rest.
        window = 0 if behind else pacing.allowance(instance.model_copy(update={"sent": cursor}))
        if cursor + window < stop_at:
            # The window, not a rollout's minute, holds the rest back: any refill may go on.
            stop_at, paused_until = cursor + window, None
        # A refill's shards keep their spread from the claim, not again from now.
        spread_from = (services.clock.now() - instance.created_at).total_seconds()
    # A rollout's minute of sends takes its starts' seats in one write; each message carries
    # the seat, and its start takes none (`rollout.seats_at_send`).
    seat = None
    if cursor < stop_at and rollout.seats_at_send(instance):
        seat = rollout.sell_seats(instance, order[cursor:stop_at], services)
    started = time.monotonic()
    pool: ThreadPoolExecutor | None = None
    try:
        while cursor < stop_at:
            stop = min(cursor + STEP_SHARDS, stop_at)
            step = messages.shard_messages(instance, cursor, stop)
            if pool is None and len(step) > CHUNK_MESSAGES:
                pool = ThreadPoolExecutor(max_workers=SEND_WORKERS, thread_name_prefix="send")
            report.send_requests += _send_step(
                step, services, pool, instance.shard_spread_s, spread_from, seat
            )
            report.messages_sent += len(step)
            if stop == stop_at:
                cursor = stop
                break
            now = services.clock.now()
            budget = SEND_BUDGET_S if budget_s is None else budget_s
            pause = time.monotonic() - started >= budget
            until = now if pause else now + timedelta(seconds=services.tuning.dispatch_lease_s)
            try:
                advanced = services.instances.advance_dispatch(
                    instance.instance_id, sent=stop, held=held, until=until
                )
            except StoreContendedError:
                # The instance item stayed inside another writer's transaction past the
                # adapter's rounds: nothing was written. The send goes on and the next step
                # records both; a crash meanwhile re-sends one more step.
                log.warning(
                    "send cursor not recorded (contention); the next step records it",
                    extra={"instance_id": instance.instance_id, "sent": stop},
                )
                cursor = stop
                continue
            if not advanced:
                log.info(
                    "shard send stopped: the dispatch was taken over or the instance moved on",
                    extra={"instance_id": instance.instance_id, "sent": stop},
                )
                return False
            services.faults.at("sent_step", instance.instance_id)
            held, cursor = until, stop
            if pause:
                log.info(
                    "shard send paused at its time budget; the next sweep resumes it",
                    extra={"instance_id": instance.instance_id, "sent": stop, "of": total},
                )
                return False
    finally:
        if pool is not None:
            pool.shutdown(wait=True)
    if cursor < total:
        _pause_paced(instance, services, sent=cursor, held=held, until=paused_until, behind=behind)
        return False
    services.instances.set_instance_status(
        instance.instance_id, expected=InstanceStatus.PLANNING, status=InstanceStatus.RUNNING
    )
    return True


def _pause_paced(
    instance: InstanceRecord,
    services: SendPorts,
    *,
    sent: int,
    held: datetime | None,
    until: datetime | None,
    behind: bool,
) -> None:
    """A paced instance sent what it may now: record the cursor and a dispatch lease ending
    when the rest may go (the sweeper resumes it then). Refused: another dispatcher took it.
    A capped one's deadline moves on if it sent shards or waits in line (`behind`), which
    its record says."""
    now = services.clock.now()
    advanced = services.instances.advance_dispatch(
        instance.instance_id,
        sent=sent,
        held=held,
        until=until or now,
        waiting=pacing.LINE_WAIT.format(tenant=instance.tenant or "-") if behind else None,
        deadline=(
            pacing.moved_deadline(instance, now, behind=behind)
            if behind or sent > instance.sent
            else None
        ),
    )
    log.info(
        "paced send: the rest later" if advanced else "paced send: taken over meanwhile",
        extra={"instance_id": instance.instance_id, "sent": sent, "until": str(until)},
    )


def _send_step(
    step: list[ShardMessage],
    services: SendPorts,
    pool: ThreadPoolExecutor | None,
    spread_s: int = 0,
    spread_from: float = 0.0,
    seat: datetime | None = None,
) -> int:
    """Send one step's messages (chunks in parallel on `pool`); the requests made. Every chunk
    is waited for; the first error is raised (a message too large before any other).
    `spread_s`: each message is delayed by its shard's own share of it (`rollout.spread_s`),
    less `spread_from` seconds already past. `seat`: the rollout seat each message holds,
    delayed until its minute if that is to come."""
    if pool is None or len(step) <= CHUNK_MESSAGES:
        return _send_chunk(step, services, spread_s, spread_from, seat)
    chunks = [step[n : n + CHUNK_MESSAGES] for n in range(0, len(step), CHUNK_MESSAGES)]
    futures = [
        pool.submit(_send_chunk, chunk, services, spread_s, spread_from, seat) for chunk in chunks
    ]
    wait(futures)
    errors = [error for f in futures if (error := f.exception()) is not None]
    for error in errors:
        if isinstance(error, MessageTooLargeError):
            raise error
    if errors:
        raise errors[0]
    return sum(f.result() for f in futures)


def _send_chunk(
    chunk: list[ShardMessage],
    services: SendPorts,
    spread_s: int,
    spread_from: float,
    seat: datetime | None = None,
) -> int:
    if seat is not None:
        now = services.clock.now()
        seated = [m.model_copy(update={"seat": seat}) for m in chunk]
        delays = [rollout.seat_delay_s(m.instance_id, m.shard, seat, now) for m in chunk]
        return services.queue.send(seated, delays=delays if any(delays) else None)
    if not spread_s:
        return services.queue.send(chunk)
    delays = [
        max(0, rollout.spread_s(m.instance_id, m.shard, spread_s) - int(spread_from)) for m in chunk
    ]
    return services.queue.send(chunk, delays=delays)
