"""One handler run against a context built for the test (`run_handler`), and what it did
(`HandlerRun`): its result or exception, the effects it claimed, its log, its heartbeats and
what it saw of cancellation.

The context is the product's `ShardContext`; the params go through the handler's model by
`HandlerSpec.call`, the result through the worker's own check, and the log through the
worker's attempt capture, so a handler behaves here as it does on a worker.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from pydantic import ValidationError

from iotsched.clock import ManualClock
from iotsched.context import ResourceCache, ShardContext
from iotsched.core.logs import LogLine
from iotsched.handlers import HandlerSpec, spec_of
from iotsched.ports.effects import EffectConditionError
from iotsched.services.execution.capture import (
    HANDLER_LOGGER,
    AttemptCapture,
    AttemptKeys,
    capturing,
)
from iotsched.services.execution.handler_context import checked_result

#: Where a test's clock starts when it gives none: a fixed instant, so that a test never
#: depends on the day it runs.
DEFAULT_START = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


class ParamsError(ValueError):
    """Params the handler's params model refuses (or that are not JSON, as a task file's
    params always are); `problems` names each field (`currency: Input should be ...`)."""

    def __init__(self, message: str, problems: Sequence[str]) -> None:
        super().__init__(message + "".join(f"\n  {p}" for p in problems))
        self.problems = list(problems)


@dataclass(frozen=True)
class Effect:
    """An effect claimed with `ctx.once`: its key, the writes committed with the claim, and
    the attempt that claimed it."""

    key: str
    writes: tuple[Mapping[str, Any], ...]
    instance_id: str
    shard: int
    attempt: int


class EffectLedger:
    """The effect keys claimed so far, shared by the runs given it: a key claimed by one run is
    refused (`ctx.once` answers False) to every later run, as the scheduler's ledger does
    across attempts and reruns."""

    def __init__(self) -> None:
        self._claimed: dict[str, Effect] = {}
        self._refused: dict[str, int] = {}
        self._lock = threading.Lock()

    @property
    def effects(self) -> list[Effect]:
        """Every effect claimed, in the order claimed."""
        with self._lock:
            return list(self._claimed.values())

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._claimed

    def refuse(self, key: str, *, index: int = 0) -> None:
        """Make `ctx.once(key, writes)` raise `EffectConditionError` (the condition of its write
        `index` failed: nothing written, the key not claimed), as DynamoDB does when a write's
        condition is a business rule the data breaks."""
        with self._lock:
            self._refused[key] = index

    def _claim(
        self, key: str, writes: tuple[Mapping[str, Any], ...], ctx: ShardContext
    ) -> Effect | None:
        """The effect claimed now, or None if an earlier run claimed `key`."""
        with self._lock:
            if key in self._refused:
                index = self._refused[key]
                raise EffectConditionError(
                    f"effect {key!r}: the condition of its write {index} failed; nothing was "
                    "written and the key is not claimed",
                    index=index,
                )
            if key in self._claimed:
                return None
            effect = Effect(
                key=key,
                writes=tuple(json.loads(json.dumps(dict(w), default=str)) for w in writes),
                instance_id=ctx.instance_id,
                shard=ctx.shard,
                attempt=ctx.attempt,
            )
            self._claimed[key] = effect
            return effect


class CancelSwitch:
    """What `ctx.cancelled()` answers in `run_handler`: False until `cancel()` is called (from a
    fake, another thread) or, with `after=n`, from the (n+1)-th question on."""

    def __init__(self, *, after: int | None = None) -> None:
        if after is not None and after < 0:
            raise ValueError("CancelSwitch(after=n) takes n >= 0")
        self._after = after
        self._cancelled = threading.Event()
        self.checks = 0  # how many times the handler asked
        self.seen = False  # the handler was told it is cancelled

    def cancel(self) -> None:
        """From now on `ctx.cancelled()` answers True."""
        self._cancelled.set()

    def __call__(self) -> bool:
        answer = self._cancelled.is_set() or (
            self._after is not None and self.checks >= self._after
        )
        self.checks += 1
        self.seen = self.seen or answer
        return answer


@dataclass(frozen=True)
class HandlerRun:
    """What one `run_handler` call saw.

    Attributes:
        error: the exception the handler raised (`RetryShard`, `FailShard`, anything), or the
            worker's refusal of its result (not a mapping, over 32 KB); None when it returned.
        effects: the effects this run claimed (`ctx.once` answered True).
        skipped: the keys `ctx.once` answered False (claimed before, by an earlier run that
            shared the ledger).
        logs: the attempt's log as the worker keeps it: `ctx.log` lines and Python logging on
            the handler's thread, in order, then the exception's line if it raised.
        heartbeats: the clock's instant at each `ctx.heartbeat()`.
        cancel_seen: `ctx.cancelled()` answered True at least once.
        ledger: the ledger the run claimed in: give it to the next run (`ledger=`) to see
            effects happen once across runs.
        ctx: the context the handler was given.
    """

    _result: Mapping[str, Any] | None
    error: Exception | None
    effects: list[Effect]
    skipped: list[str]
    logs: list[LogLine]
    heartbeats: list[datetime]
    cancel_seen: bool
    ledger: EffectLedger
    ctx: ShardContext = field(repr=False)

    @property
    def ok(self) -> bool:
        """The handler returned (and its result is one the worker stores)."""
        return self.error is None

    @property
    def result(self) -> Mapping[str, Any] | None:
        """The result as the worker stores it (a pydantic model as its JSON form). Raises the
        handler's exception if it raised, so a failing test shows where."""
        if self.error is not None:
            raise self.error
        return self._result

    def messages(self, level: str | None = None) -> list[str]:
        """The log's messages, only those of `level` (e.g. `"WARNING"`) if given."""
        wanted = level.upper() if level is not None else None
        return [line.message for line in self.logs if wanted is None or line.level == wanted]


def run_handler(
    handler: Callable[..., Any] | HandlerSpec,
    *,
    params: Mapping[str, Any] | None = None,
    bounds: Mapping[str, Any] | None = None,
    business_date: date | None = None,
    data_interval: tuple[datetime, datetime] | None = None,
    shard: int = 0,
    attempt: int = 1,
    task_id: str = "test-task",
    instance_id: str | None = None,
    tenant: str | None = None,
    timeout_s: int = 300,
    clock: ManualClock | None = None,
    resources: Mapping[Callable[[], Any], Any] | None = None,
    partials: Sequence[Mapping[str, Any]] | None = None,
    cancel_after: int | None = None,
    cancel: CancelSwitch | None = None,
    ledger: EffectLedger | None = None,
    log_level: int | str | None = logging.INFO,
) -> HandlerRun:
    """Run one handler once, on this thread, against a context built from the arguments.

    Args:
        handler: a function declared with `@handler` (its params model applies), an
            undecorated `(ctx)` function, or a `HandlerSpec`.
        params: the task's params as a task file gives them (JSON values); parsed by the
            handler's params model as on a worker.
        bounds: the shard's bounds (`{"tenant": "acme"}`, `{"start": 0, "end": 100}`).
        business_date: the instance's business date; default: the day before the clock's.
        data_interval: (start, end) of the data interval; default: the business date's day,
            in UTC.
        shard, attempt, task_id, instance_id, tenant: what the context says of the attempt.
        timeout_s: the attempt's timeout: `ctx.deadline` is the clock's now plus this, moved on
            by each heartbeat (nothing interrupts the handler here).
        clock: the clock heartbeats and log lines read; default: a `ManualClock` at
            2026-01-01 12:00 UTC.
        resources: `{factory: fake}`: what `ctx.resource(factory)` returns; a factory not
            given is called, once per run.
        partials: for a reduce handler, what `ctx.partials()` returns: each shard's
            `{"shard", "bounds", "result"}` (`shard` defaults to its position, `bounds` to
            `{}`); without it `ctx.partials()` raises, as for a shard handler.
        cancel_after: `ctx.cancelled()` answers False that many times, then True (0: the
            instance is cancelled from the start).
        cancel: a `CancelSwitch` the test flips instead.
        ledger: the effect ledger `ctx.once` claims in (a new one if None); share it between
            runs to see a rerun skip what the first run did.
        log_level: the least level of Python logging the handler's records are kept at (the
            root logger is lowered to it while the handler runs); None leaves logging as
            configured.

    Returns:
        The `HandlerRun`; the handler's exception is in its `error`, never raised here.

    Raises:
        ParamsError: the params do not fit the handler's params model (or are not JSON).
        ValueError: `cancel` and `cancel_after` both given, a partial without `result`, or
            `log_level` not a level.
    """
    spec = handler if isinstance(handler, HandlerSpec) else spec_of(handler)
    least_level = level_number(log_level)
    if cancel is not None and cancel_after is not None:
        raise ValueError("give cancel or cancel_after, not both")
    clock = clock or ManualClock(DEFAULT_START)
    given_params = _json_values(params or {}, what="params", name=spec.name)
    _check_params(spec, given_params)
    business_date = business_date or (clock.now() - timedelta(days=1)).date()
    if data_interval is None:
        start = datetime.combine(business_date, time(), tzinfo=UTC)
        data_interval = (start, start + timedelta(days=1))
    started = clock.now()
    switch = cancel or CancelSwitch(after=cancel_after)
    ledger = ledger if ledger is not None else EffectLedger()
    beats: list[datetime] = []
    effects: list[Effect] = []
    skipped: list[str] = []
    instance_id = instance_id or f"{task_id}@{started:%Y-%m-%dT%H:%MZ}"
    capture = AttemptCapture(AttemptKeys(instance_id, shard, attempt), clock)
    cache = ResourceCache(resources)
    shard_partials = _partials(partials)

    def heartbeat() -> datetime:
        now = clock.now()
        beats.append(now)
        return now + timedelta(seconds=timeout_s)

    def record_effect(key: str, writes: tuple[Mapping[str, Any], ...]) -> bool:
        claimed = ledger._claim(key, writes, ctx)
        if claimed is None:
            skipped.append(key)
            return False
        effects.append(claimed)
        return True

    def read_partials() -> list[dict[str, Any]]:
        if shard_partials is None:
            raise RuntimeError("partials() is for a task's reduce handler")
        return [dict(p) for p in shard_partials]

    ctx = ShardContext(
        instance_id=instance_id,
        task_id=task_id,
        tenant=tenant,
        shard=shard,
        bounds=_json_values(bounds or {}, what="bounds", name=spec.name),
        params=given_params,
        business_date=business_date,
        data_interval_start=data_interval[0],
        data_interval_end=data_interval[1],
        attempt=attempt,
        deadline=started + timedelta(seconds=timeout_s),
        worker="iotsched-testing",
        _heartbeat=heartbeat,
        _record_effect=record_effect,
        _cancelled=switch,
        _partials=read_partials,
        _log=_log_to(capture),
        _resource=cache.get,
    )
    error: Exception | None = None
    stored: Mapping[str, Any] | None = None
    try:
        with capturing(capture), lowered_logging(least_level):
            returned = spec.call(ctx)
        stored = checked_result(returned)
    except Exception as exc:
        error = exc
        capture.failed(exc)
    return HandlerRun(
        _result=stored,
        error=error,
        effects=effects,
        skipped=skipped,
        logs=capture.lines(),
        heartbeats=beats,
        cancel_seen=switch.seen,
        ledger=ledger,
        ctx=ctx,
    )


def _check_params(spec: HandlerSpec, params: Mapping[str, Any]) -> None:
    """Raise ParamsError if the handler's model refuses `params`."""
    try:
        spec.parse_params(params)
    except ValidationError as exc:
        problems = [
            f"{'.'.join(str(p) for p in err['loc']) or '(params)'}: {err['msg']}"
            for err in exc.errors()
        ]
        model = spec.params.__name__ if spec.params is not None else "its params model"
        raise ParamsError(
            f"params of handler {spec.name!r} do not fit {model}:", problems
        ) from None


def _json_values(values: Mapping[str, Any], *, what: str, name: str) -> dict[str, Any]:
    """`values` as a task file (JSON) carries them; anything else is refused."""
    try:
        loaded: dict[str, Any] = json.loads(json.dumps(dict(values)))
    except (TypeError, ValueError) as exc:
        raise ParamsError(
            f"{what} of handler {name!r} must be JSON values, as a task file gives them:",
            [str(exc)],
        ) from None
    return loaded


def _partials(partials: Sequence[Mapping[str, Any]] | None) -> list[dict[str, Any]] | None:
    """The worker's shape of each partial: `{"shard", "bounds", "result"}`."""
    if partials is None:
        return None
    shaped = []
    for n, partial in enumerate(partials):
        if "result" not in partial:
            raise ValueError(f"partials[{n}] has no 'result' (give {{'result': ...}})")
        shaped.append(
            {
                "shard": partial.get("shard", n),
                "bounds": dict(partial.get("bounds", {})),
                "result": partial["result"],
            }
        )
    try:  # as the execution records hold them: JSON
        loaded: list[dict[str, Any]] = json.loads(json.dumps(shaped))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"partials must be JSON values, as results are stored: {exc}") from None
    return loaded


def _log_to(capture: AttemptCapture) -> Callable[[str, str, Mapping[str, Any]], None]:
    """`ctx.log` as the worker does it: into the attempt's log, and out through the handler
    logger (pytest shows it with a failing test's output)."""
    handler_log = logging.getLogger(HANDLER_LOGGER)

    def log_line(level: str, message: str, fields: Mapping[str, Any]) -> None:
        capture.add(level, message, fields=fields)
        number = logging.getLevelName(level.upper())
        handler_log.log(number if isinstance(number, int) else logging.INFO, message)

    return log_line


def level_number(level: int | str | None) -> int | None:
    """`level` as logging's number (`"INFO"`: 20); None stays None.

    Raises:
        ValueError: not a level's name.
    """
    if level is None or isinstance(level, int):
        return level
    number = logging.getLevelName(level.upper())
    if not isinstance(number, int):
        raise ValueError(f"log_level {level!r} is not a logging level")
    return number


@contextmanager
def lowered_logging(number: int | None) -> Iterator[None]:
    """The root logger lets records of level `number` through while the block runs (None: as
    logging is configured)."""
    if number is None:
        yield
        return
    root = logging.getLogger()
    before = root.level
    if before <= number:
        yield
        return
    root.setLevel(number)
    try:
        yield
    finally:
        root.setLevel(before)
