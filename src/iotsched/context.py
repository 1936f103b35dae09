"""The handler API: what task code receives for one shard attempt.

Handlers never read "now" for business logic: the business date and the data interval come from
the instance, so a catch-up of yesterday never rewrites today.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any, Protocol, TypeVar, cast

T = TypeVar("T")


class ResourceCache:
    """Resources by factory, each made once per container (a worker process) and shared by
    every shard it runs; `provide` puts a made one in place (the composition root's, a test's
    fake)."""

    def __init__(self, provided: Mapping[Callable[[], Any], Any] | None = None) -> None:
        self._made: dict[Callable[[], Any], Any] = dict(provided or {})
        self._lock = threading.Lock()

    def provide(self, factory: Callable[[], T], value: T) -> None:
        """Use `value` wherever a handler asks for `factory`'s resource."""
        with self._lock:
            self._made[factory] = value

    def get(self, factory: Callable[[], T]) -> T:
        """`factory`'s resource, made on first use (one thread makes it; others wait)."""
        try:
            return cast("T", self._made[factory])
        except KeyError:
            pass
        with self._lock:
            if factory not in self._made:
                self._made[factory] = factory()
            return cast("T", self._made[factory])


#: Resources of handlers run outside a worker's `Wiring` (a context built by hand).
_PROCESS_RESOURCES = ResourceCache()


@dataclass
class ShardContext:
    """One attempt at one shard.

    Attributes:
        instance_id: the instance (`<task>@<slot>`).
        task_id: the task.
        tenant: the task's tenant, if any.
        shard: the shard index (0-based).
        bounds: the shard's stored bounds (tenant, group, or id range).
        params: the task's params as stored on the instance.
        business_date: the business date the instance works on.
        data_interval_start: start of the data interval (UTC, inclusive).
        data_interval_end: end of the data interval (UTC, exclusive).
        attempt: this attempt's number, from 1.
        deadline: when this attempt's `timeout_s` interrupts it unless it calls `heartbeat()`
            (its lease is renewed apart, by the worker, while it runs).
        worker: who runs the attempt.
    """

    instance_id: str
    task_id: str
    tenant: str | None
    shard: int
    bounds: Mapping[str, Any]
    params: Mapping[str, Any]
    business_date: date
    data_interval_start: datetime
    data_interval_end: datetime
    attempt: int
    deadline: datetime
    worker: str
    _heartbeat: Callable[[], datetime] = field(repr=False)
    _record_effect: Callable[[str, tuple[Mapping[str, Any], ...]], bool] = field(repr=False)
    _cancelled: Callable[[], bool] = field(repr=False, default=lambda: False)
    _partials: Callable[[], list[dict[str, Any]]] = field(repr=False, default=lambda: [])
    _log: Callable[[str, str, Mapping[str, Any]], None] = field(
        repr=False, default=lambda level, message, fields: None
    )
    _resource: Callable[[Callable[[], Any]], Any] = field(
        repr=False, default=_PROCESS_RESOURCES.get
    )
    keys: list[str] = field(default_factory=list)

    def heartbeat(self) -> None:
        """A sign of life: keeps this attempt's lease and restarts its `timeout_s`. The lease is
        written now where that is due (see `iotsched.services.execution.renewal.LeaseRenewal.heartbeat`),
        else by the scheduled renewal, within a third of a lease.

        Raises `iotsched.ports.StaleAttemptError` once another attempt is known to have taken
        the shard over (a renewal refused, this one's or a scheduled one): the handler must
        stop without writing anything more (its writes are refused in any case).
        """
        self.deadline = self._heartbeat()

    def once(self, key: str, writes: Sequence[Mapping[str, Any]] = ()) -> bool:
        """Claim effect `key` (e.g. `bill#acct-7#2026-11-28`), once for all runs.

        Keys are one namespace for the whole deployment: put in them what makes the effect
        unique beyond this task (its tenant, the account), as the built-in handlers do; a key
        another task claimed first answers False here too.

        Returns True exactly once across every attempt and rerun, False when an earlier run
        already claimed the key: skip the effect then. The claim is fenced on this attempt
        (a zombie whose shard was taken over raises `StaleAttemptError`) and listed in the
        execution record of the attempt that made it.

        Exactly once needs the effect to commit with the claim. `writes` are DynamoDB
        TransactWriteItems entries (`{"Update": {...}}`, `{"Put": {...}}`, without TableName:
        the scheduler's table) committed in the same transaction as the claim: a deduction, a
        counter, a notice record. An effect outside DynamoDB must instead be idempotent by the
        key at its destination (an S3 object named by the key, a message deduplicated by it),
        because a process can always die between a claim and a call elsewhere.

        Raises (nothing written, the key not claimed): `iotsched.ports.EffectConditionError`
        when a condition of `writes` failed (its `index` names the write; catch it where the
        condition is a business rule, e.g. "not settled yet"); `StoreContendedError` when
        contention or throttling outlasted the retries, and `WriteRejectedError` when DynamoDB
        refused the request (an item over 400 KB): the attempt fails and is retried.
        """
        claimed = self._record_effect(key, tuple(writes))
        if claimed:
            self.keys.append(key)
        return claimed

    def partials(self) -> list[dict[str, Any]]:
        """For a reduce handler: every shard's partial result (`shard`, `bounds`, `result`),
        the value its handler returned, read from the execution records."""
        return self._partials()

    def log(self, message: str, /, level: str = "INFO", **fields: Any) -> None:
        """One line of this attempt's log (`iotsched logs`, the API, the console), with its
        level (`DEBUG`, `INFO`, `WARNING`, `ERROR`) and JSON fields, e.g.
        `ctx.log("devices read", devices=120)`. Kept whatever the loggers' levels, from any
        thread of the handler. Lines of Python logging emitted on the handler's thread are
        captured too, at the level their logger lets through."""
        self._log(level, message, fields)

    def cancelled(self) -> bool:
        """True once the instance ended (an operator's cancel, an abort, its timeout, a cover
        policy): ask between units of work, as often as you like. The instance's status is read at
        most once per lease renewal period (a third of `ShardLeaseSeconds`), so an end is seen
        within that long (and the moment an eventually consistent read may lag)."""
        return self._cancelled()

    def resource(self, factory: Callable[[], T]) -> T:
        """What `factory` (a function of no arguments) makes: an AWS client, a settings
        object, a connection pool. Made on its first use in this container (a worker process,
        a Lambda execution environment) and shared by every shard the container runs after;
        `iotsched.testing` puts fakes in its place. E.g.
        `table = ctx.resource(billing_table)` with `def billing_table() -> Table: ...`."""
        return cast("T", self._resource(factory))


class Handler(Protocol):
    """Task code: runs one shard; raising an exception fails the attempt."""

    def __call__(self, ctx: ShardContext) -> Mapping[str, Any] | None:
        """Do the shard's work; may return a small JSON-able summary."""
        ...
