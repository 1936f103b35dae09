"""Audit records of the changes that take several writes (runs, submissions, backfills,
cancels, reruns): recorded `pending` before the change, settled after it.

So a change never lands without its record: a death between the two leaves a `pending`
record naming what it was about to do (the instances it names say whether it landed). The
changes that are one write of the task store (apply, pause, resume, delete, calendars) write
their record in the same transaction instead (`TaskStore`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from iotsched.core.audit import AuditRecord, AuditState, Verb, new_audit
from iotsched.ports.clock import Clock
from iotsched.ports.tasks import TaskStore

log = logging.getLogger(__name__)

#: The actor of a change whose caller named none (library use, tests); every entry point
#: (the CLI, the API, the scheduler's own pauses) names its caller.
UNNAMED = "unnamed"


@runtime_checkable
class AuditPorts(Protocol):
    """Recording a change: the task store (which keeps the audit log) and the time."""

    @property
    def tasks(self) -> TaskStore: ...

    @property
    def record_clock(self) -> Clock:
        """The clock change records are stamped with: the wall clock, whatever clock moves
        the schedule."""
        ...


@dataclass
class Change:
    """What a change under way adds to its record before it is settled."""

    instance_ids: list[str] = field(default_factory=list)
    detail: str | None = None
    diff: dict[str, list[Any]] = field(default_factory=dict)


@contextmanager
def audited(
    verb: Verb,
    subject: str,
    services: AuditPorts,
    *,
    actor: str,
    tenant: str | None,
    **fields: Any,
) -> Iterator[Change]:
    """Record the change `pending`, run the block, then settle the record: `done` with what
    the block added, or `failed` with the error (which propagates). A settle that cannot be
    written leaves the record `pending` and is not raised: the change has landed (or failed)
    by then, and answering it as an error would have a caller retry a change that is done."""
    pending = new_audit(
        verb,
        subject,
        actor=actor,
        at=services.record_clock.now(),
        tenant=tenant,
        state=AuditState.PENDING,
        **fields,
    )
    services.tasks.record_audit(pending)
    change = Change(instance_ids=list(pending.instance_ids))
    try:
        yield change
    except BaseException as exc:
        settle(
            services, _settled(pending, change, AuditState.FAILED, f"{type(exc).__name__}: {exc}")
        )
        raise
    settle(services, _settled(pending, change, AuditState.DONE, change.detail))


def settle(services: AuditPorts, record: AuditRecord) -> None:
    """Write a settled record (`done`, `failed`); one that cannot be written is logged and
    stays `pending`, never raised (see `audited`)."""
    try:
        services.tasks.record_audit(record)
    except Exception:
        log.warning(
            "audit record not settled: it stays pending",
            extra={
                "verb": record.verb.value,
                "subject": record.subject,
                "state": record.state.value,
                "instance_ids": record.instance_ids,
            },
            exc_info=True,
        )


def _settled(
    pending: AuditRecord, change: Change, state: AuditState, detail: str | None
) -> AuditRecord:
    return pending.model_copy(
        update={
            "state": state,
            "instance_ids": change.instance_ids,
            "detail": detail,
            "diff": change.diff or pending.diff,
        }
    )
