"""Reading an attempt's log (`read_log`): the whole log from its object when one was written,
else the tail its record keeps (which is the whole log when nothing was left out)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from iotsched.core import logs as attempt_logs
from iotsched.core.attempt_record import Attempt
from iotsched.core.logs import AttemptLog, LogLine
from iotsched.core.shard_record import ShardRecord
from iotsched.ports.instances import InstanceStore
from iotsched.ports.logs import AttemptLogStore, LogObjectError


@runtime_checkable
class LogReadPorts(Protocol):
    """The instance store (the records) and the attempt log store (the objects)."""

    @property
    def instances(self) -> InstanceStore: ...

    @property
    def attempt_logs(self) -> AttemptLogStore | None: ...


class AttemptNotFoundError(LookupError):
    """No such shard, or no such attempt of it."""


@dataclass(frozen=True)
class LogRead:
    """An attempt's log as read: its lines, where they came from, and whether they are all.

    `source` is `object` (the whole log, from the data bucket), `inline` (the record's tail)
    or `none` (the attempt logged nothing). `note` says why a written object was not read.
    """

    instance_id: str
    shard: int
    attempt: int | None  # None: the shard has not started
    outcome: str | None
    status: str  # the shard's
    final: bool  # the shard's status is final: nothing more will be logged for it
    source: Literal["object", "inline", "none"]
    lines: list[LogLine] = field(default_factory=list)
    log: AttemptLog | None = None
    note: str | None = None

    @property
    def complete(self) -> bool:
        """True when `lines` are the whole log."""
        return self.source == "object" or self.log is None or self.log.complete

    def view(self) -> dict[str, Any]:
        """The JSON the API and `--json` give."""
        log = self.log
        return {
            "instance_id": self.instance_id,
            "shard": self.shard,
            "attempt": self.attempt,
            "outcome": self.outcome,
            "status": self.status,
            "final": self.final,
            "source": self.source,
            "complete": self.complete,
            "line_count": log.line_count if log else 0,
            "byte_count": log.byte_count if log else 0,
            "truncated": log.truncated if log else False,
            "object_key": log.object_key if log else None,
            "object_error": log.object_error if log else None,
            "log_group": log.log_group if log else None,
            "log_stream": log.log_stream if log else None,
            "insights_query": log.insights_query if log else None,
            "note": self.note,
            "lines": [dict(attempt_logs.view(line)) for line in self.lines],
        }


def find_attempt(shard: ShardRecord, attempt: int | None) -> Attempt:
    """Attempt `attempt` of `shard` (None: its latest). Raises AttemptNotFoundError."""
    if not shard.attempts:
        raise AttemptNotFoundError(f"{shard.instance_id} shard {shard.index} has no attempt yet")
    if attempt is None:
        return shard.attempts[-1]
    for found in shard.attempts:
        if found.number == attempt:
            return found
    raise AttemptNotFoundError(
        f"{shard.instance_id} shard {shard.index} has no attempt {attempt} "
        f"(attempts: 1 to {len(shard.attempts)})"
    )


def read_log(instance_id: str, shard: int, attempt: int | None, services: LogReadPorts) -> LogRead:
    """The log of one attempt (None: the shard's latest). Raises AttemptNotFoundError."""
    record = services.instances.get_shard(instance_id, shard)
    if record is None:
        return _not_started(instance_id, shard, attempt, services)
    found = find_attempt(record, attempt)
    log = found.log
    base: dict[str, Any] = {
        "instance_id": instance_id,
        "shard": shard,
        "attempt": found.number,
        "outcome": found.outcome.value if found.outcome else None,
        "status": record.status.value,
        "final": record.status.final,
        "log": log,
    }
    if log is None:
        return LogRead(**base, source="none")
    note = None
    if log.object_key is not None:
        store = services.attempt_logs
        if store is None:
            note = "no data bucket is configured here: the record's tail is shown"
        else:
            try:
                body = store.get(log.object_key)
            except LogObjectError as exc:
                body, note = None, f"the log object could not be read ({exc}): the tail is shown"
            if body is not None:
                return LogRead(**base, source="object", lines=attempt_logs.decode(body))
            if note is None:
                note = "the log object is gone (expired): the record's tail is shown"
    return LogRead(**base, source="inline", lines=list(log.lines), note=note)


def _not_started(
    instance_id: str, shard: int, attempt: int | None, services: LogReadPorts
) -> LogRead:
    """A planned shard with no record yet (or never to run): no attempt, nothing logged."""
    inst = services.instances.get_instance(instance_id)
    planned = inst is not None and 0 <= shard < inst.plan.count
    if inst is None or not planned or attempt is not None:
        what = f"no attempt {attempt}" if planned else f"no shard {shard}"
        raise AttemptNotFoundError(f"{instance_id} has {what}")
    return LogRead(
        instance_id=instance_id,
        shard=shard,
        attempt=None,
        outcome=None,
        status="cancelled" if inst.status.final else "pending",
        final=inst.status.final,
        source="none",
    )
