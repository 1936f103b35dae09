"""`iotsched`: operate the scheduler from a terminal.

The verbs live by group: `cli.local` (demo, local up|tick|sweep), `cli.tasks` (tasks
apply|list|show), `cli.task_control` (tasks pause|resume|delete), `cli.audit` (audit, tasks
history|rollback), `cli.times`, `cli.runs` (run, submit, backfill), `cli.instances` (instances,
shards, rerun, cancel, alerts). Each prints its result through `cli.output.emit`, which states
the `--json` shapes, and builds only the ports it needs (`cli.output.stores` or `services`).

Exit status: 0 success, 1 a failed operation, 2 bad input (file, flag, unknown id).
"""

from __future__ import annotations

import click

from iotsched.cli.audit import audit, tasks_history, tasks_rollback
from iotsched.cli.calendars import calendars
from iotsched.cli.handlers import handlers
from iotsched.cli.init import init
from iotsched.cli.instances import alerts, cancel, instances, rerun, shards
from iotsched.cli.local import demo, local
from iotsched.cli.logs import logs
from iotsched.cli.overview import overview
from iotsched.cli.runs import backfill, run, submit
from iotsched.cli.target import Target
from iotsched.cli.task_control import tasks_delete, tasks_pause, tasks_resume
from iotsched.cli.tasks import tasks
from iotsched.cli.tenants import tenants
from iotsched.cli.times import times
from iotsched.settings import endpoint_from_env, stack_from_env


class OperatorOrder(click.Group):
    """Lists the verbs in the order an operator needs them, not alphabetically."""

    ORDER = (
        "demo",
        "init",
        "local",
        "tasks",
        "times",
        "calendars",
        "tenants",
        "instances",
        "shards",
        "run",
        "submit",
        "backfill",
        "cancel",
        "audit",
        "overview",
    )

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Known verbs first, in ORDER; anything newer after them."""
        known = [name for name in self.ORDER if name in self.commands]
        return known + sorted(set(self.commands) - set(known))


@click.group(cls=OperatorOrder, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--endpoint-url",
    envvar="AWS_ENDPOINT_URL",
    help="Emulator endpoint (local up, LocalStack); env AWS_ENDPOINT_URL.",
)
@click.option(
    "--localstack",
    is_flag=True,
    help="LocalStack's endpoint, as localstack-client finds it (env LOCALSTACK_HOST, "
    "default localhost:4566).",
)
@click.option("--region", envvar="AWS_REGION", help="AWS region; env AWS_REGION.")
@click.option("--stack", envvar="IOTSCHED_STACK", help="Stack name (default iotsched).")
@click.option(
    "--api-url",
    envvar="IOTSCHED_API_URL",
    metavar="URL",
    help="Go through the management API at URL (the stack's ManagementApiUrl, SigV4-signed; "
    "or http://127.0.0.1:8000/api for local up) for tasks list|show, instances, shards, logs, "
    "audit, run and cancel; env IOTSCHED_API_URL. The other verbs read the table directly.",
)
@click.pass_context
def cli(
    ctx: click.Context,
    endpoint_url: str | None,
    localstack: bool,
    region: str | None,
    stack: str | None,
    api_url: str | None,
) -> None:
    """iotsched: a serverless distributed task scheduler for IoT platforms.

    \b
    Start here:   demo, init, local up|tick|sweep
    Tasks:        tasks apply|list|show|pause|resume|delete, times, calendars, tenants
    What ran:     overview, instances, shards
    Run by hand:  run, submit, backfill
    Intervene:    rerun, cancel, alerts
    """
    ctx.ensure_object(dict)
    if localstack:
        if endpoint_url:
            raise click.UsageError("give --localstack or --endpoint-url, not both")
        endpoint_url = localstack_endpoint()
    ctx.obj["target"] = Target(
        endpoint_url=endpoint_url or endpoint_from_env(),
        region=region or None,  # else the AWS configuration's (Target.session)
        stack=stack or stack_from_env(),
        api_url=api_url or None,
    )


def localstack_endpoint() -> str:
    """LocalStack's edge endpoint, from localstack-client (LOCALSTACK_HOST, USE_SSL)."""
    from localstack_client.config import get_service_endpoint  # only with --localstack

    endpoint: str | None = get_service_endpoint("dynamodb")
    if not endpoint:  # pragma: no cover - the library knows DynamoDB
        raise click.UsageError("localstack-client names no DynamoDB endpoint")
    return endpoint


for command in (demo, local, tasks, times, calendars, tenants, instances, shards, run, submit):
    cli.add_command(command)
cli.add_command(backfill)
cli.add_command(handlers)
cli.add_command(rerun)
cli.add_command(cancel)
cli.add_command(alerts)
cli.add_command(audit)
cli.add_command(logs)
cli.add_command(overview)
cli.add_command(init)
for command in (tasks_pause, tasks_resume, tasks_delete, tasks_history, tasks_rollback):
    tasks.add_command(command)


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="iotsched")
