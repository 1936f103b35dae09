"""A whole task run in this process (`TaskHarness`): the scheduler's services on the in-memory
store with a manual clock, its shard messages delivered to the worker's own code path.

Time moves only when the test moves it: `advance` steps the clock minute by minute, with a
tick (the dispatcher: scheduled firings) and a sweep at each minute, and delivers each message
when it becomes visible (a retry after its backoff, a paced send). `run` fires a task now and
drives it until its instance ends.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import date, datetime, timedelta
from os import PathLike
from pathlib import Path
from typing import Any, cast

from iotsched import bootstrap
from iotsched.adapters.memory.queues import (
    MemoryAlertSink,
    MemoryShardQueue,
)
from iotsched.clock import ManualClock
from iotsched.context import Handler, ResourceCache, ShardContext
from iotsched.core.input_limits import MAX_FILE_BYTES, InputError, load_json, too_large
from iotsched.core.shard_message import ShardMessage
from iotsched.core.timeutil import floor_minute
from iotsched.handlers import HandlerSpec, spec_of
from iotsched.handlers import handler as declare_handler
from iotsched.registry import spec_for
from iotsched.services.definitions.apply import apply_task_file
from iotsched.services.definitions.task_file import TaskFileError
from iotsched.services.execution.batch import run_shard
from iotsched.services.execution.outcomes import (
    Delivery,
    RetryShardError,
)
from iotsched.services.execution.sweep import sweep
from iotsched.services.operations.actions import (
    cancel_instance,
    rerun_instance,
)
from iotsched.services.operations.on_demand import run_now
from iotsched.services.scheduling.tick import dispatch_tick
from iotsched.services.wiring import Wiring
from iotsched.testing._run import DEFAULT_START, Effect, level_number, lowered_logging
from iotsched.testing._views import TaskRun, task_run

#: How long `run`, `rerun` and `wait` drive the clock at most for the instance to end.
DEFAULT_WITHIN = timedelta(hours=1)

#: Deliveries `deliver` makes at one instant at most before it gives up.
MAX_DELIVERIES = 100_000

TaskSource = Mapping[str, Any] | Sequence[Mapping[str, Any]] | str | PathLike[str]


class TaskHarness:
    """The scheduler on the in-memory store with a manual clock, for a test of whole tasks.

    Handlers resolve as on a deployed worker (the installed ones, by name); `handlers` adds to
    them or replaces some by name (a handler not installed, a fake). `resources` puts fakes
    where handlers ask for `ctx.resource(factory)`.

    Attributes:
        clock: the manual clock every part reads; move it with `advance` (or set it before
            `apply`, to start elsewhere).
        services: the scheduler's services (internal API: may change between versions).
    """

    def __init__(
        self,
        *,
        handlers: Mapping[str, Callable[..., Any] | HandlerSpec] | None = None,
        resources: Mapping[Callable[[], Any], Any] | None = None,
        start: datetime | None = None,
        log_level: int | str | None = "INFO",
    ) -> None:
        """`start`: the clock's first instant (default 2026-01-01 12:00 UTC); `log_level`: as
        for `run_handler`."""
        self.clock = ManualClock(start or DEFAULT_START)
        self._resources = ResourceCache(resources)
        self._log_level = level_number(log_level)
        # The handlers a deployment resolves (the composition root's choice), under the test's.
        deployed = bootstrap.build_memory(clock=self.clock)
        self._handlers = _Handlers(self, deployed.handlers, handlers or {})
        self.services: Wiring = dataclasses.replace(deployed, handlers=self._handlers)
        self._queue = cast("MemoryShardQueue", self.services.queue)
        self._seen = 0  # messages of the queue's `sent` taken into `_waiting`
        self._waiting: list[tuple[datetime, ShardMessage]] = []  # (visible at, message)
        self._receipts = 0
        self._effects: list[tuple[Effect, bool]] = []
        self._lock = threading.Lock()

    # -- what the scheduler runs ----------------------------------------------------------------

    def add_handler(
        self, handler: Callable[..., Any] | HandlerSpec, name: str | None = None
    ) -> None:
        """Add (or replace) a handler: under its `@handler` name, else `name` or its own."""
        self._handlers.add(handler, name)

    def provide(self, factory: Callable[[], Any], value: Any) -> None:
        """`ctx.resource(factory)` returns `value` from now on."""
        self._resources.provide(factory, value)

    def apply(self, tasks: TaskSource) -> list[str]:
        """Apply task definitions as `iotsched tasks apply` does (validated whole, then
        written); returns their ids.

        `tasks`: a task file's content (`{"tasks": [...]}`), one task's definition, a list of
        them, or the path of a task file (YAML, which needs PyYAML: the `cli` extra; or JSON).

        Raises:
            ValueError: a task file that cannot be applied (`problems` lists each problem, by
                task and field), or not read.
            ImportError: a YAML file without PyYAML installed.
        """
        data = _task_file(tasks)
        applied = apply_task_file(
            data,
            handlers=self._handlers,
            store=lambda: self.services.tasks,
            now=self.clock.now,
            actor="iotsched-testing",
        )
        return list(applied.valid)

    # -- making it run ----------------------------------------------------------------------------

    def fire(
        self,
        task_id: str,
        *,
        business_date: date | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> str:
        """Start a run of `task_id` now (as `iotsched tasks run`), without delivering its
        shards; returns its instance id. `params` override the task's for this run."""
        instance, report = run_now(
            task_id, self.services, business_date=business_date, params=_dict(params)
        )
        if not report.claimed:  # this minute's instance exists (a run or a firing): another one
            with self._lock:
                self._receipts += 1
                request = f"test-{self._receipts}"
            instance, _ = run_now(
                task_id,
                self.services,
                business_date=business_date,
                params=_dict(params),
                request_id=request,
            )
        return instance.instance_id

    def run(
        self,
        task_id: str,
        *,
        business_date: date | None = None,
        params: Mapping[str, Any] | None = None,
        within: timedelta = DEFAULT_WITHIN,
    ) -> TaskRun:
        """Fire `task_id` now and drive the clock until its instance ends (claim, shards,
        retries after their backoff, the reduce), for `within` at most; returns the instance
        as it then stands (assert its `status`)."""
        return self.wait(
            self.fire(task_id, business_date=business_date, params=params), within=within
        )

    def rerun(
        self,
        instance_id: str,
        *,
        shard: int | None = None,
        failed_only: bool = False,
        within: timedelta = DEFAULT_WITHIN,
    ) -> TaskRun:
        """Run an ended instance again (all of it, one `shard`, or its failed shards), as
        `iotsched rerun`, and drive it until it ends; effects its first run claimed are
        refused to it (`ctx.once` answers False)."""
        again = rerun_instance(instance_id, self.services, shard=shard, failed_only=failed_only)
        return self.wait(again.instance_id, within=within)

    def cancel(self, instance_id: str) -> TaskRun:
        """Cancel an open instance, as `iotsched cancel`: shards not started never run."""
        cancel_instance(instance_id, self.services, actor="iotsched-testing")
        self.deliver()
        return self.instance(instance_id)

    def wait(self, instance_id: str, *, within: timedelta = DEFAULT_WITHIN) -> TaskRun:
        """Deliver what is due and drive the clock until `instance_id` ends, for `within` at
        most; returns the instance as it then stands."""
        self.deliver()

        def ended() -> bool:
            found = self.services.instances.get_instance(instance_id)
            if found is None:
                raise KeyError(f"no instance {instance_id!r}")
            return found.status.final

        self._drive(self.clock.now() + within, until=ended)
        return self.instance(instance_id)

    def advance(self, delta: timedelta) -> None:
        """Move the clock by `delta`, minute by minute: a tick (scheduled firings) and a sweep
        at each minute, each message delivered when it becomes visible."""
        self.deliver()
        self._drive(self.clock.now() + delta, until=None)

    def deliver(self) -> int:
        """Deliver every shard message visible now to the worker (and those that makes visible
        now); returns how many were delivered."""
        delivered = 0
        while True:
            self._take_sent()
            now = self.clock.now()
            due = [item for item in self._waiting if item[0] <= now]
            if not due:
                return delivered
            if delivered > MAX_DELIVERIES:  # a message that comes back at once for ever
                raise RuntimeError(
                    f"over {MAX_DELIVERIES} shard deliveries at {now.isoformat()} without the "
                    "clock moving: a message keeps coming back at once"
                )
            for item in due:
                self._waiting.remove(item)
                self._deliver(item[1])
                delivered += 1

    # -- reading what happened --------------------------------------------------------------------

    def instance(self, instance_id: str) -> TaskRun:
        """The instance as it stands now.

        Raises:
            KeyError: no such instance.
        """
        found = self.services.instances.get_instance(instance_id)
        if found is None:
            raise KeyError(f"no instance {instance_id!r}")
        return task_run(
            found,
            self.services.instances.list_shards(instance_id),
            self.services,
            effects=list(self._effects),
            alerts=self.alerts,
        )

    def instances(self, task_id: str) -> list[TaskRun]:
        """The task's instances, newest first."""
        found = self.services.instances.list_instances(task_id=task_id, limit=1000)
        return [self.instance(i.instance_id) for i in found]

    @property
    def effects(self) -> list[Effect]:
        """Every effect claimed with `ctx.once` so far, in order."""
        return [effect for effect, claimed in self._effects if claimed]

    @property
    def alerts(self) -> list[dict[str, Any]]:
        """Every alert raised so far, each as the JSON subscribers receive."""
        sink = cast("MemoryAlertSink", self.services.alerts)
        return [a.model_dump(mode="json") for a in sink.published]

    # -- internals --------------------------------------------------------------------------------

    def _take_sent(self) -> None:
        sent = self._queue.sent
        for n in range(self._seen, len(sent)):
            self._waiting.append((self._queue.visible_at[n] or self.clock.now(), sent[n]))
        self._seen = len(sent)

    def _deliver(self, message: ShardMessage) -> None:
        with self._lock:
            self._receipts += 1
            receipt = f"receipt-{self._receipts}"
        try:
            run_shard(
                Delivery(body=message.model_dump_json(), receipt_handle=receipt),
                self.services,
                worker="iotsched-testing",
            )
        except RetryShardError:  # back on the queue after its backoff
            delay = self._queue.visibility.get(receipt, 0)
            self._waiting.append((self.clock.now() + timedelta(seconds=delay), message))

    def _drive(self, end: datetime, *, until: Callable[[], bool] | None) -> None:
        """Step the clock to `end` (or until `until()`), stopping at each minute (tick, sweep)
        and at each instant a message becomes visible."""
        while self.clock.now() < end and (until is None or not until()):
            self._take_sent()
            now = self.clock.now()
            minute = floor_minute(now) + timedelta(minutes=1)
            visible = [at for at, _ in self._waiting if now < at]
            self.clock.set(min([minute, end, *visible]))
            if self.clock.now() == minute:
                dispatch_tick(minute, self.services)
                sweep(self.services)
            self.deliver()

    def _wrap(self, spec: HandlerSpec) -> Handler:
        """`spec`'s handler with the test's resources, its `ctx.once` calls recorded, its
        logging let through at the harness's level; it keeps `spec`'s params model, so that
        `apply` checks params as the deployed scheduler does."""

        def prepare(ctx: ShardContext) -> None:
            ctx._resource = self._resources.get
            claim = ctx._record_effect

            def recorded(key: str, writes: tuple[Mapping[str, Any], ...]) -> bool:
                claimed = claim(key, writes)
                effect = Effect(
                    key=key,
                    writes=tuple(json.loads(json.dumps(dict(w), default=str)) for w in writes),
                    instance_id=ctx.instance_id,
                    shard=ctx.shard,
                    attempt=ctx.attempt,
                )
                with self._lock:
                    self._effects.append((effect, claimed))
                return claimed

            ctx._record_effect = recorded

        def fn(ctx: ShardContext, *params: Any) -> Any:
            prepare(ctx)
            with lowered_logging(self._log_level):
                return spec.fn(ctx, *params)

        # The worker calls it through its spec: params parsed by the model, then `fn(ctx, p)`.
        return cast("Handler", declare_handler(spec.name, params=spec.params)(fn))


class _Handlers(Mapping[str, Handler]):
    """The installed handlers (looked up as the worker does, lazily), with the test's over
    them by name; each wrapped by the harness."""

    def __init__(
        self,
        harness: TaskHarness,
        installed: Mapping[str, Handler],
        extra: Mapping[str, Callable[..., Any] | HandlerSpec],
    ) -> None:
        self._harness = harness
        self._installed = installed
        self._extra: dict[str, HandlerSpec] = {}
        self._wrapped: dict[str, Handler] = {}
        for name, handler in extra.items():
            self.add(handler, name)

    def add(self, handler: Callable[..., Any] | HandlerSpec, name: str | None) -> None:
        spec = handler if isinstance(handler, HandlerSpec) else spec_of(handler, name=name)
        self._extra[name or spec.name] = spec
        self._wrapped.pop(name or spec.name, None)

    def __getitem__(self, name: str) -> Handler:
        wrapped = self._wrapped.get(name)
        if wrapped is None:
            spec = self._extra.get(name) or spec_for(name, self._installed[name])
            wrapped = self._wrapped[name] = self._harness._wrap(spec)
        return wrapped

    def __contains__(self, name: object) -> bool:
        return name in self._extra or name in self._installed

    def __iter__(self) -> Iterator[str]:
        yield from self._extra
        yield from (n for n in self._installed if n not in self._extra)

    def __len__(self) -> int:
        return sum(1 for _ in self)


def _dict(params: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return dict(params) if params is not None else None


def _task_file(tasks: TaskSource) -> Any:
    """The parsed task file `tasks` gives (not yet validated)."""
    if isinstance(tasks, str | PathLike):
        return _read(Path(tasks))
    if isinstance(tasks, Mapping):
        if "tasks" in tasks or "calendars" in tasks:
            return tasks
        return {"tasks": [dict(tasks)]}
    return {"tasks": [dict(t) for t in tasks]}


def _read(path: Path) -> Any:
    try:
        with path.open("rb") as stream:
            raw = stream.read(MAX_FILE_BYTES + 1)  # no more than the limit and a byte past it
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskFileError([f"{path}: cannot be read: {exc}"]) from None
    if len(raw) > MAX_FILE_BYTES:
        raise TaskFileError([f"{path}: {too_large('a task file')}"])
    if path.suffix == ".json":
        try:
            return load_json(text)
        except InputError as exc:
            raise TaskFileError([f"{path}: {exc}"]) from None
        except ValueError as exc:
            raise TaskFileError([f"{path}: not valid JSON: {exc}"]) from None
    try:
        import yaml

        from iotsched.services.definitions.task_yaml import load_task_yaml, yaml_problem
    except ImportError:
        raise ImportError(
            f"reading the YAML task file {path} needs PyYAML: install iotsched with the cli "
            "extra (pip install 'iotsched[cli]'), or give the task file as a dict"
        ) from None
    try:
        return load_task_yaml(text)
    except yaml.YAMLError as exc:
        raise TaskFileError([yaml_problem(path, text, exc)]) from None
