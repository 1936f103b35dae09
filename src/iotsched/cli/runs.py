"""`iotsched run|submit|backfill`: instances started by hand, now, later or for past dates."""

from __future__ import annotations

from collections import Counter
from datetime import date
from typing import Any

import click
from rich.progress import Progress
from rich.table import Table

from iotsched.cli import api as via_api
from iotsched.cli.api import api_client
from iotsched.cli.output import (
    BadInputError,
    actor,
    emit,
    err,
    fail_cleanly,
    json_option,
    no_such,
    out,
    services,
)
from iotsched.core.input_limits import InputError, load_json
from iotsched.core.task_definition import Priority
from iotsched.services.definitions.control import TaskNotFoundError
from iotsched.services.operations.views import instance_view


def _params_option(raw: str | None) -> dict[str, Any] | None:
    if raw is None:
        return None
    try:
        value = load_json(raw)
    except InputError as exc:
        raise BadInputError(f"--params: {exc}") from None
    except ValueError as exc:
        raise BadInputError(f"--params is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise BadInputError("--params must be a JSON object")
    return value


def _date_option(raw: str | None, name: str) -> date | None:
    if raw is None:
        return None
    try:
        return date.fromisoformat(raw)
    except ValueError:
        raise BadInputError(f"{name} {raw!r}: expected a date like 2026-11-28") from None


@click.command()
@click.argument("task_id")
@click.option("--business-date", help="The business date to run for (default: from now).")
@click.option("--params", "params_json", help="JSON object merged over the task's params.")
@click.option("--request-id", help="Client request id: running twice with it creates one instance.")
@click.option(
    "--priority",
    type=click.Choice(["high", "normal", "low"]),
    help="The shard queue its shards go to (default: the task's).",
)
@json_option
@click.pass_context
@fail_cleanly
def run(
    ctx: click.Context,
    task_id: str,
    business_date: str | None,
    params_json: str | None,
    request_id: str | None,
    priority: str | None,
    as_json: bool,
) -> None:
    """Run TASK_ID now (trigger kind manual), through its blocking policy."""
    from iotsched.services.operations.on_demand import (
        ManualRunError,
        run_now,
    )

    day = _date_option(business_date, "--business-date")
    params = _params_option(params_json)
    client = api_client(ctx)
    if client is not None:
        view = via_api.run(
            client,
            task_id,
            business_date=day,
            params=params,
            request_id=request_id,
            priority=priority,
        )
    else:
        try:
            instance, _ = run_now(
                task_id,
                services(ctx),
                business_date=day,
                params=params,
                request_id=request_id,
                priority=Priority(priority) if priority else None,
                actor=actor(ctx),
            )
        except TaskNotFoundError:
            raise no_such("task", task_id) from None
        except ManualRunError as exc:
            raise BadInputError(str(exc)) from None
        view = instance_view(instance)
    emit(
        view,
        as_json,
        lambda v: out.print(
            f"{v['instance_id']}: {v['status']} (business date {v['business_date']})"
        ),
    )


@click.command()
@click.argument("task_id")
@click.option("--delay", help="Fire after this long: 30m, 2h, 1d.")
@click.option("--at", "at_text", help="Fire at this ISO instant (with offset).")
@click.option("--business-date", help="The business date to run for.")
@click.option("--params", "params_json", help="JSON object merged over the task's params.")
@click.option("--request-id", help="Client request id: submitting twice with it creates one.")
@click.option(
    "--priority",
    type=click.Choice(["high", "normal", "low"]),
    help="The shard queue its shards go to (default: the task's).",
)
@json_option
@click.pass_context
@fail_cleanly
def submit(
    ctx: click.Context,
    task_id: str,
    delay: str | None,
    at_text: str | None,
    business_date: str | None,
    params_json: str | None,
    request_id: str | None,
    priority: str | None,
    as_json: bool,
) -> None:
    """Submit a one-time instance of TASK_ID that the tick fires when due (stored, not in memory)."""
    from iotsched.core.timeutil import parse_iso
    from iotsched.core.triggers import TriggerError, parse_rate
    from iotsched.services.operations.on_demand import ManualRunError
    from iotsched.services.operations.on_demand import submit as submit_instance

    if (delay is None) == (at_text is None):
        raise BadInputError("give exactly one of --delay and --at")
    svc = services(ctx)
    try:
        at = parse_iso(at_text) if at_text else svc.clock.now() + parse_rate(delay or "")
    except (ValueError, TriggerError) as exc:
        raise BadInputError(str(exc)) from None
    try:
        instance = submit_instance(
            task_id,
            svc,
            at=at,
            business_date=_date_option(business_date, "--business-date"),
            params=_params_option(params_json),
            request_id=request_id,
            priority=Priority(priority) if priority else None,
            actor=actor(ctx),
        )
    except TaskNotFoundError:
        raise no_such("task", task_id) from None
    except ManualRunError as exc:
        raise BadInputError(str(exc)) from None
    emit(
        instance_view(instance),
        as_json,
        # fire_at as the record holds it (the view has no fire_at: `instances` shows none)
        lambda v: out.print(f"{v['instance_id']}: {v['status']}, fires at {instance.fire_at}"),
    )


@click.command()
@click.argument("task_id")
@click.option(
    "--from", "start", required=True, help="First business date, YYYY-MM-DD (task timezone)."
)
@click.option("--to", "end", required=True, help="Last business date, inclusive.")
@click.option("--max-concurrent", default=1, show_default=True, help="Instances open at once.")
@click.option(
    "--dry-run",
    is_flag=True,
    help="List each slot with its business date and data interval, and the estimated "
    "requests; write nothing.",
)
@click.option(
    "--priority",
    type=click.Choice(["high", "normal", "low"]),
    default="low",
    show_default=True,
    help="The shard queue its instances' shards go to.",
)
@json_option
@click.pass_context
@fail_cleanly
def backfill(
    ctx: click.Context,
    task_id: str,
    start: str,
    end: str,
    max_concurrent: int,
    dry_run: bool,
    priority: str,
    as_json: bool,
) -> None:
    """One instance per slot of TASK_ID whose business date lies in --from..--to.

    Every slot whose business date (the day its instance works on, per the task's
    business_date rule) is in the range, both ends included: for a daily 00:05 task with
    business_date previous_day, --from 2026-11-30 --to 2026-12-02 makes the reports of
    11-30, 12-01 and 12-02 (trigger kind backfill).
    """
    import time

    from iotsched.core.timeutil import iso
    from iotsched.services.operations.on_demand import (
        ManualRunError,
        backfill_slots,
        plan_backfill,
    )

    if max_concurrent < 1:
        raise BadInputError("--max-concurrent must be at least 1")
    svc = services(ctx)
    first = _date_option(start, "--from")
    last = _date_option(end, "--to")
    assert first is not None and last is not None
    try:
        plan = plan_backfill(task_id, svc, start=first, end=last)
    except TaskNotFoundError:
        raise no_such("task", task_id) from None
    except ManualRunError as exc:
        raise BadInputError(str(exc)) from None
    summary: dict[str, Any] = {
        "task_id": task_id,
        "slots": [
            {
                "slot": iso(d.slot),
                "business_date": d.business_date.isoformat(),
                "data_interval_start": iso(d.data_interval_start),
                "data_interval_end": iso(d.data_interval_end),
            }
            for d in plan.slots
        ],
        "shards_per_instance": plan.shards_per_instance,
        "estimated_requests": plan.estimated_requests,
    }
    if dry_run:

        def slot_table(result: dict[str, Any]) -> None:
            table = Table("slot (UTC)", "business date", "data interval (UTC)")
            for d in result["slots"]:
                table.add_row(
                    d["slot"],
                    d["business_date"],
                    f"{d['data_interval_start']} .. {d['data_interval_end']}",
                )
            out.print(table)
            out.print(
                f"{len(result['slots'])} slot(s) for business dates {first} to {last}, "
                f"{result['shards_per_instance']} shard(s) each; estimated requests "
                f"{result['estimated_requests']}; nothing written (--dry-run)"
            )

        emit(summary, as_json, slot_table)
        return
    results: dict[str, str] = {}
    opened: list[str] = []
    with Progress(console=err, disable=as_json, transient=True) as progress:
        bar = progress.add_task(f"backfill {task_id}", total=len(plan.slots))
        for instance_id, what in backfill_slots(
            plan, svc, priority=Priority(priority), actor=actor(ctx)
        ):
            results[instance_id] = what
            progress.advance(bar)
            if what in ("claimed", "queued"):
                opened.append(instance_id)
            # pace the next claim; after the last one there is nothing left to pace
            while len(opened) >= max_concurrent and len(results) < len(plan.slots):
                opened = [
                    i
                    for i in opened
                    if not (inst := svc.instances.get_instance(i)) or not inst.status.final
                ]
                if len(opened) >= max_concurrent:
                    time.sleep(1)
    summary["results"] = results

    def counts(result: dict[str, Any]) -> None:
        by_outcome = Counter(result["results"].values())
        out.print(
            f"backfill {task_id}: " + ", ".join(f"{n} {w}" for w, n in sorted(by_outcome.items()))
        )

    emit(summary, as_json, counts)
