"""`iotsched instances|shards|rerun|cancel|alerts`: what ran, and the operator's hand on it.

`instances` and `shards` read the target's stores alone; rerun, cancel and alerts take the whole
wiring (the lifecycle, the alert log)."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import click
from rich.table import Table
from rich.text import Text

from iotsched.cli import api as via_api
from iotsched.cli.api import api_client
from iotsched.cli.output import (
    STATUS_STYLE,
    BadInputError,
    actor,
    emit,
    fail_cleanly,
    json_option,
    no_such,
    out,
    services,
    stores,
    styled,
    tenant_option,
)
from iotsched.core.instance_record import InstanceStatus
from iotsched.core.paging import filled_page
from iotsched.core.value_types import passes_tenant_filter
from iotsched.services.definitions.history import listed_incarnation
from iotsched.services.operations.actions import (
    InstanceConflictError,
    InstanceNotFoundError,
    cancel_instance,
)
from iotsched.services.operations.views import (
    instance_view,
    shard_views,
)


@click.command()
@click.argument("task", required=False)
@click.option(
    "--status", type=click.Choice([s.value for s in InstanceStatus]), help="Only this status."
)
@click.option("--limit", default=50, show_default=True)
@click.option(
    "--before", metavar="INSTANCE", help="The next page: the instances listed after INSTANCE."
)
@tenant_option("instances")
@json_option
@click.pass_context
@fail_cleanly
def instances(
    ctx: click.Context,
    task: str | None,
    status: str | None,
    limit: int,
    before: str | None,
    tenant: str | None,
    as_json: bool,
) -> None:
    """Instances, newest first (of one TASK if given)."""
    client = api_client(ctx)
    if client is not None:
        found_views = via_api.instances(client, task, status, limit, before, tenant)
        emit(found_views, as_json, _instance_table)
        return
    store = stores(ctx).instances
    wanted = InstanceStatus(status) if status else None
    incarnation = listed_incarnation(task, stores(ctx).tasks)
    found = filled_page(
        lambda cursor, n: store.list_instances(
            task_id=task, status=wanted, limit=n, before=cursor, incarnation=incarnation
        ),
        lambda i: passes_tenant_filter(i.tenant, tenant),
        lambda i: i.instance_id,
        limit,
        start=before,
    )
    emit([instance_view(i) for i in found], as_json, _instance_table)


def _instance_table(views: list[dict[str, Any]]) -> None:
    table = Table(
        "instance",
        "tenant",
        "run (task version)",
        "kind",
        "business date",
        "status",
        "shards",
        "failed",
        "duration",
    )
    for v in views:
        style = STATUS_STYLE.get(v["status"], "")
        rerun = f" (shards {v['rerun_shards']})" if v["rerun_shards"] is not None else ""
        table.add_row(
            v["instance_id"],
            v["tenant"] or "-",
            f"{v['run']}{rerun} (v{v['task_version']})",
            v["trigger_kind"],
            v["business_date"],
            styled(v["status"], style)
            + (f" ({v['reason']})" if v["reason"] else "")
            + (f" (waits: {v['waiting']})" if v.get("waiting") else ""),
            str(v["shards"]),
            str(v["failed_shards"]),
            f"{v['duration_s']:.1f}s" if v["duration_s"] is not None else "-",
        )
    out.print(table)
    counts = Counter(v["status"] for v in views)
    out.print(", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no instances")


@click.command()
@click.argument("instance_id")
@json_option
@click.pass_context
@fail_cleanly
def shards(ctx: click.Context, instance_id: str, as_json: bool) -> None:
    """The shards of INSTANCE_ID: bounds, status, attempts, errors, keys written."""
    client = api_client(ctx)
    if client is not None:
        emit(via_api.shards(client, instance_id), as_json, _shard_table)
        return
    svc = stores(ctx)
    inst = svc.instances.get_instance(instance_id)
    if inst is None:
        raise no_such("instance", instance_id, " (ids look like task@2026-11-29T12:00Z)")
    views = shard_views(inst, svc.instances.list_shards(instance_id), svc.clock.now())
    emit({"instance": instance_view(inst), "shards": views}, as_json, _shard_table)


def _shard_table(result: dict[str, Any]) -> None:
    instance = result["instance"]
    out.print(
        Text.assemble(
            f"{instance['instance_id']}: ",
            styled(instance["status"], "bold"),
            f" business date {instance['business_date']}",
            f", task version {instance['task_version']}",
        )
    )
    table = Table(
        "shard", "bounds", "status", "attempts (worker, ms, outcome)", "error", "keys", "result"
    )
    for v in result["shards"]:
        bounds = v["bounds"]
        text = (
            f"[{bounds['first_id']}, {bounds['end_id']})"
            if "first_id" in bounds
            else json.dumps(bounds, separators=(",", ":"))
        )
        attempts = "; ".join(_attempt_cell(n, a) for n, a in enumerate(v["attempts"], 1))
        style = STATUS_STYLE.get(v["status"], "")
        table.add_row(
            str(v["index"]),
            text,
            styled(v["status"], style),
            attempts or "-",
            (v["error"] or "")[:80],
            _keys_cell(v["keys_written"], v.get("keys_count", 0)),
            _result_cell(v.get("result")),
        )
    out.print(table)


def _attempt_cell(number: int, attempt: dict[str, Any]) -> str:
    """`#1 w-3 120ms succeeded (acme-jobs 1.4.2)`: the package is what ran."""
    cell = (
        f"#{number} {attempt['worker']} {attempt.get('duration_ms') or '-'}ms "
        f"{attempt.get('outcome') or 'died?'}"
    )
    if attempt.get("package"):
        cell += f" ({attempt['package']} {attempt.get('version') or '?'})"
    return cell


def _result_cell(result: Any) -> str:
    """What the handler returned, as compact JSON cut to a cell (`--json` gives it whole)."""
    if result is None:
        return "-"
    text = json.dumps(result, separators=(",", ":"), default=str)
    return text if len(text) <= 80 else text[:77] + "..."


def _keys_cell(keys: list[str], count: int) -> str:
    """The keys a shard lists, and how many more it claimed (each attempt lists its first 20)."""
    more = count - len(keys)
    return (", ".join(keys) or "-") + (f" (+{more} more)" if more > 0 else "")


@click.command()
@click.argument("instance_id")
@click.option("--shard", type=int, help="Re-run this shard only.")
@click.option(
    "--failed", "failed_only", is_flag=True, help="Re-run the shards that did not succeed."
)
@json_option
@click.pass_context
@fail_cleanly
def rerun(
    ctx: click.Context, instance_id: str, shard: int | None, failed_only: bool, as_json: bool
) -> None:
    """Run an ended instance again with its stored bounds, params and business date."""
    from iotsched.services.operations.actions import (
        NothingToRerunError,
        rerun_instance,
    )

    if shard is not None and failed_only:
        raise BadInputError("give --shard or --failed, not both")
    try:
        started = rerun_instance(
            instance_id, services(ctx), shard=shard, failed_only=failed_only, actor=actor(ctx)
        )
    except InstanceNotFoundError:
        raise no_such("instance", instance_id) from None
    except NothingToRerunError as exc:
        raise BadInputError(str(exc)) from None
    except InstanceConflictError as exc:
        raise click.ClickException(str(exc)) from None

    def line(v: dict[str, Any]) -> None:
        which = "all shards" if v["rerun_shards"] is None else f"shard(s) {v['rerun_shards']}"
        out.print(f"{v['instance_id']}: run {v['run']} of {v['rerun_of']} started ({which})")

    emit(instance_view(started), as_json, line)


#: Alerts `alerts --tenant` looks through (the log has no cursor).
ALERTS_SCANNED = 200


def _alert_state(pending: bool) -> str:
    return "pending" if pending else "published"


@click.command()
@click.option("--limit", default=20, show_default=True)
@tenant_option(f"alerts, among the newest {ALERTS_SCANNED}")
@json_option
@click.pass_context
@fail_cleanly
def alerts(ctx: click.Context, limit: int, tenant: str | None, as_json: bool) -> None:
    """Recent alerts, newest first: published to the alert topic, or still pending publication
    (recorded, the topic's answer not yet confirmed: a retry or the sweeper publishes it). The
    state column (`state` with --json) says which."""
    log = services(ctx).alert_log
    if tenant is None:
        entries = log.entries(limit=limit)
    else:
        scanned = log.entries(limit=max(limit, ALERTS_SCANNED))
        entries = [e for e in scanned if passes_tenant_filter(e.alert.tenant, tenant)][:limit]

    def table(_: object) -> None:
        # from the entries: the table shows raised_at to the second, the JSON in full
        shown = Table(
            "raised (UTC)",
            "state",
            "type",
            "severity",
            "tenant",
            "task",
            "instance",
            "reason / failed shards",
        )
        for entry in entries:
            a = entry.alert
            detail = a.reason or ", ".join(
                f"#{s.get('shard')} {s.get('error') or s.get('status')}" for s in a.failed_shards
            )
            shown.add_row(
                a.raised_at.strftime("%Y-%m-%d %H:%M:%S") if a.raised_at else "-",
                _alert_state(entry.pending),
                a.type,
                a.severity,
                a.tenant or "-",
                a.task_id,
                a.instance_id,
                (detail or "")[:80],
            )
        out.print(shown if entries else "no alerts")

    emit(
        [
            {**entry.alert.model_dump(mode="json"), "state": _alert_state(entry.pending)}
            for entry in entries
        ],
        as_json,
        table,
    )


@click.command()
@click.argument("instance_id")
@click.option("--reason", default="cancelled by operator", show_default=True)
@json_option
@click.pass_context
@fail_cleanly
def cancel(ctx: click.Context, instance_id: str, reason: str, as_json: bool) -> None:
    """Cancel INSTANCE_ID: shards not started never run, running ones stop at their next check."""
    client = api_client(ctx)
    if client is not None:
        view = via_api.cancel(client, instance_id, reason)
    else:
        try:
            ended = cancel_instance(instance_id, services(ctx), reason=reason, actor=actor(ctx))
        except InstanceNotFoundError:
            raise no_such("instance", instance_id) from None
        except InstanceConflictError as exc:
            raise click.ClickException(str(exc)) from None
        view = instance_view(ended)
    emit(
        view,
        as_json,
        lambda _: out.print(
            Text.assemble(f"{instance_id}: ", styled("cancelled", "magenta"), f" ({reason})")
        ),
    )
