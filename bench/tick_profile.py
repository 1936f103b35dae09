"""Where a big tick's time goes on the emulator: `python -m bench.tick_profile [TASKS] [--plain]`.

Not a benchmark (`python -m bench` does not run it): a profile that explains bench/tick.py's
figures. One tick of TASKS (default 2,000) one-shard `noop` tasks, all due at one instant,
handled by `dispatch_tick` with one page in flight, so the emulator's requests and the
dispatcher's own work do not overlap. Printed: the emulator thread's CPU time per request
kind, and inside TransactWriteItems and Query, per part: moto's request handler (its own
validation: it parses every action's expressions once before the backend parses them again),
the backend's conditional puts and updates, and the serialisation of the Query's answer. The
wrappers only read the thread's clock around moto's methods; they change nothing they time.
With `--plain` the tick takes its one-by-one path (plain conditional PutItem and UpdateItem
requests, a SendMessageBatch per instance): what the same writes cost outside transactions.
"""

from __future__ import annotations

import sys
import time
from collections import defaultdict
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from bench.common import deploy, emulator
from bench.tick import T0

#: (calls, CPU seconds) by name.
_spent: defaultdict[str, list[float]] = defaultdict(lambda: [0, 0.0])


def _timed(owner: Any, method: str, name: Callable[[tuple[Any, ...], dict[str, Any]], str]) -> None:
    original = getattr(owner, method)

    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.thread_time()
        try:
            return original(*args, **kwargs)
        finally:
            entry = _spent[name(args, kwargs)]
            entry[0] += 1
            entry[1] += time.thread_time() - started

    setattr(owner, method, timed)


def _update_kind(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    expression = str(kwargs.get("update_expression", ""))
    kind = "running mark" if "status_pk" in expression else "clock advance"
    return f"  backend UpdateItem ({kind})"


def _instrument() -> None:
    from moto.dynamodb import responses
    from moto.dynamodb.models import DynamoDBBackend

    from iotsched.local import emulator as server_module

    original = server_module.serialize_requests

    def serialize_timed(server: Any, **options: Any) -> Any:
        app = server.app  # moto's werkzeug server

        def timed(environ: dict[str, Any], start_response: Any) -> list[bytes]:
            target = str(environ.get("HTTP_X_AMZ_TARGET") or "other").rsplit(".", 1)[-1]
            started = time.thread_time()
            try:
                return list(app(environ, start_response))
            finally:
                entry = _spent[target]
                entry[0] += 1
                entry[1] += time.thread_time() - started

        server.app = timed
        return original(server, **options)

    server_module.serialize_requests = serialize_timed
    _timed(responses.DynamoHandler, "transact_write_items", lambda a, k: " handler")
    _timed(DynamoDBBackend, "transact_write_items", lambda a, k: "  backend")
    _timed(DynamoDBBackend, "put_item", lambda a, k: "  backend PutItem (claim)")
    _timed(DynamoDBBackend, "update_item", _update_kind)
    _timed(responses.DynamoHandler, "query", lambda a, k: " handler (the rest: serialising)")


def main(tasks: int, *, plain: bool = False) -> None:
    from iotsched.bootstrap import build
    from iotsched.clock import ManualClock
    from iotsched.core.task_definition import TaskDefinition
    from iotsched.services.definitions.apply import apply_tasks
    from iotsched.services.scheduling.tick import (
        BATCH_FROM,
        dispatch_tick,
    )

    _instrument()
    with emulator() as url:
        deployment = deploy(url)
        clock = ManualClock(T0)
        services = build(deployment.settings, clock=clock, clients=deployment.clients)
        definitions = [
            TaskDefinition.model_validate(
                {"id": f"p-{i:05d}", "handler": "noop", "trigger": {"at": T0.isoformat()}}
            )
            for i in range(tasks)
        ]
        apply_tasks(definitions, services.tasks, now=T0 - timedelta(minutes=1))
        clock.set(T0)
        _spent.clear()
        started, started_cpu = time.perf_counter(), time.thread_time()
        report = dispatch_tick(
            T0, services, workers=1, batch_from=tasks + 1 if plain else BATCH_FROM
        )
        wall, cpu = time.perf_counter() - started, time.thread_time() - started_cpu
    lines = [
        f"tick of {tasks:,} due tasks ({len(report.claimed):,} claimed, "
        f"{'one by one' if plain else 'batched'}): {wall:.2f} s; "
        f"dispatcher CPU {cpu * 1000 / tasks:.2f} ms per task",
        f"{'emulator CPU':<46} {'calls':>7} {'ms/call':>9} {'ms/task':>8}",
    ]
    order = ["TransactWriteItems", " handler", "  backend"]
    order += sorted(k for k in _spent if k.startswith("  backend "))
    order += ["PutItem", "UpdateItem", "Query", " handler (the rest: serialising)"]
    order += ["SendMessageBatch"]
    for name in order + sorted(set(_spent) - set(order)):
        if name in _spent:
            calls, seconds = _spent[name]
            lines.append(
                f"{name:<46} {int(calls):>7} {seconds * 1000 / calls:>9.2f} "
                f"{seconds * 1000 / tasks:>8.2f}"
            )
    sys.stdout.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    numbers = [a for a in sys.argv[1:] if a.isdigit()]
    main(int(numbers[0]) if numbers else 2000, plain="--plain" in sys.argv[1:])
