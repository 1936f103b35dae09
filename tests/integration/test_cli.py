"""The CLI against a deployment on the moto server (IOTSCHED_* environment + endpoint)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from iotsched.cli.main import cli
from tests.support import TEST_INDEX_BUCKETS, AwsResources

pytestmark = pytest.mark.moto

GOOD = """
tasks:
{tasks}
"""


def _task(n: int, **extra: str) -> str:
    lines = [
        f"  - id: task-{n}",
        "    handler: noop",
        '    trigger: {cron: "*/5 * * * *", timezone: Europe/Berlin}',
    ]
    lines += [f"    {k}: {v}" for k, v in extra.items()]
    return "\n".join(lines)


def _runner(aws: AwsResources) -> CliRunner:
    return CliRunner(
        env={
            "IOTSCHED_TABLE": aws.table,
            "IOTSCHED_SHARD_QUEUE_URL": aws.shard_queue_url,
            "IOTSCHED_ALERT_TOPIC_ARN": aws.alert_topic_arn,
            "AWS_ENDPOINT_URL": aws.endpoint_url,
        }
    )


@pytest.mark.parametrize(
    ("bad", "expected"),
    [
        ({"trigger": '{cron: "61 * * * *"}'}, "task 'task-6': trigger.cron"),
        (
            {"trigger": '{cron: "0 3 * * *", timezone: Mars/Olympus}'},
            "task 'task-6': trigger.timezone",
        ),
        ({"handler": "no_such_handler"}, "task 'task-6': handler: unknown handler"),
        ({"timeout_s": "0"}, "task 'task-6': timeout_s"),
        ({"colour": "blue"}, "task 'task-6': colour"),
    ],
)
def test_a_file_with_one_bad_task_exits_2_and_writes_nothing(
    aws_resources: AwsResources, tmp_path: Path, bad: dict[str, str], expected: str
) -> None:
    # given ten tasks of which the sixth is bad
    tasks = []
    for n in range(10):
        if n == 6:
            lines = [f"  - id: task-{n}"]
            fields = {"handler": "noop", "trigger": '{cron: "*/5 * * * *"}', **bad}
            lines += [f"    {k}: {v}" for k, v in fields.items()]
            tasks.append("\n".join(lines))
        else:
            tasks.append(_task(n))
    # (a path longer than a terminal line: the error is still one line, never wrapped)
    path = tmp_path / ("deep-" * 20) / "tasks.yaml"
    path.parent.mkdir()
    path.write_text(GOOD.format(tasks="\n".join(tasks)))
    runner = _runner(aws_resources)
    # when it is applied
    result = runner.invoke(cli, ["tasks", "apply", str(path)])
    # then: exit 2, a message naming the task and the field, and no task written
    assert result.exit_code == 2, result.output
    assert f"error: {path}: {expected}" in result.output
    assert "Traceback" not in result.output
    listed = runner.invoke(cli, ["tasks", "list", "--json"])
    assert listed.exit_code == 0, listed.output
    assert json.loads(listed.output) == []


def test_apply_list_instances_shards_round_trip(
    aws_resources: AwsResources, tmp_path: Path
) -> None:
    path = tmp_path / "tasks.yaml"
    path.write_text(GOOD.format(tasks="\n".join(_task(n) for n in range(3))))
    runner = _runner(aws_resources)
    applied = runner.invoke(cli, ["tasks", "apply", str(path), "--json"])
    assert applied.exit_code == 0, applied.output
    assert json.loads(applied.output)["created"] == ["task-0", "task-1", "task-2"]
    again = runner.invoke(cli, ["tasks", "apply", str(path), "--json"])
    assert json.loads(again.output)["unchanged"] == ["task-0", "task-1", "task-2"]
    listed = json.loads(runner.invoke(cli, ["tasks", "list", "--json"]).output)
    assert [t["id"] for t in listed] == ["task-0", "task-1", "task-2"]
    assert all(t["next_fire"] and t["timezone"] == "Europe/Berlin" for t in listed)
    assert json.loads(runner.invoke(cli, ["instances", "--json"]).output) == []
    missing = runner.invoke(cli, ["shards", "task-0@2026-01-01T00:00Z"])
    assert missing.exit_code == 2
    assert "no instance" in missing.output


def test_yaml_syntax_error_exits_2(aws_resources: AwsResources, tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("tasks: [\n  - id: x\n")
    result = _runner(aws_resources).invoke(cli, ["tasks", "apply", str(path)])
    assert result.exit_code == 2
    assert "not valid YAML" in result.output


def test_a_dependency_cycle_or_unknown_parent_exits_2_and_writes_nothing(
    aws_resources: AwsResources, tmp_path: Path
) -> None:
    runner = _runner(aws_resources)
    path = tmp_path / "cycle.yaml"
    path.write_text(
        "tasks:\n"
        "  - {id: a, handler: noop, trigger: {after: [c]}}\n"
        "  - {id: b, handler: noop, trigger: {after: [a]}}\n"
        "  - {id: c, handler: noop, trigger: {after: [b]}}\n"
    )
    result = runner.invoke(cli, ["tasks", "apply", str(path)])
    assert result.exit_code == 2, result.output
    assert "dependency cycle a -> c -> b -> a" in result.output
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text("tasks:\n  - {id: z, handler: noop, trigger: {after: [nobody]}}\n")
    result = runner.invoke(cli, ["tasks", "apply", str(unknown)])
    assert result.exit_code == 2
    assert "unknown parent 'nobody'" in result.output
    assert json.loads(runner.invoke(cli, ["tasks", "list", "--json"]).output) == []


def test_tasks_show_lists_the_next_five_fires_in_local_time_and_utc(
    aws_resources: AwsResources, tmp_path: Path
) -> None:
    runner = _runner(aws_resources)
    path = tmp_path / "t.yaml"
    path.write_text(
        'tasks:\n  - {id: close, handler: noop, trigger: {cron: "5 0 * * *", timezone: Asia/Shanghai}}\n'
    )
    assert runner.invoke(cli, ["tasks", "apply", str(path)]).exit_code == 0
    shown = runner.invoke(cli, ["tasks", "show", "close", "--json"])
    assert shown.exit_code == 0, shown.output
    view = json.loads(shown.output)
    fires = view["next_fires"]
    assert len(fires) == 5
    assert all(
        f["local"].endswith("00:05:00+08:00") and f["utc"].endswith("16:05:00+00:00") for f in fires
    )
    assert runner.invoke(cli, ["tasks", "show", "nope"]).exit_code == 2


def test_alerts_lists_published_and_pending_alerts(aws_resources: AwsResources) -> None:
    from iotsched import bootstrap
    from iotsched.adapters.dynamodb.alerts import DynamoDBAlertLog
    from iotsched.core.alert_message import Alert

    def alert(slot: str, reason: str) -> Alert:
        return Alert(
            type="instance_failed",
            severity="critical",
            task_id="t",
            tenant="acme",
            instance_id=f"t@{slot}",
            status="failed",
            reason=reason,
            alert_id=f"t@{slot}#failed",
        )

    services = bootstrap.build(aws_resources.settings, clients=aws_resources.clients())
    services.alerts.publish(alert("2026-11-29T12:00Z", "boom"))
    # a publisher that died between the alert's record and the topic: recorded, never published
    log = DynamoDBAlertLog(
        aws_resources.clients().dynamodb(), aws_resources.table, buckets=TEST_INDEX_BUCKETS
    )
    later = datetime.now(UTC) + timedelta(minutes=1)  # the newer of the two
    log.record(alert("2026-11-29T13:00Z", "bang").model_copy(update={"raised_at": later}))
    runner = _runner(aws_resources)
    result = runner.invoke(cli, ["alerts", "--json"])
    assert result.exit_code == 0, result.output
    pending, published = json.loads(result.output)  # newest first
    assert (pending["alert_id"], pending["reason"], pending["state"]) == (
        "t@2026-11-29T13:00Z#failed",
        "bang",
        "pending",
    )
    assert (
        published["alert_id"],
        published["severity"],
        published["reason"],
        published["state"],
    ) == ("t@2026-11-29T12:00Z#failed", "critical", "boom", "published")
    assert published["raised_at"]

    table = runner.invoke(cli, ["alerts"], env={"COLUMNS": "200"})
    assert table.exit_code == 0, table.output
    rows = [line for line in table.output.splitlines() if "t@2026-11-29T1" in line]
    assert len(rows) == 2
    assert "pending" in rows[0] and "13:00Z" in rows[0]
    assert "published" in rows[1] and "12:00Z" in rows[1]
    helped = " ".join(runner.invoke(cli, ["alerts", "--help"]).output.split())
    assert "or still pending publication" in helped


def test_tasks_delete_refuses_open_instances_then_forces(
    aws_resources: AwsResources, tmp_path: Path
) -> None:
    runner = _runner(aws_resources)
    path = tmp_path / "t.yaml"
    path.write_text(GOOD.format(tasks=_task(1)))
    assert runner.invoke(cli, ["tasks", "apply", str(path)]).exit_code == 0
    ran = runner.invoke(cli, ["run", "task-1", "--json"])
    assert ran.exit_code == 0, ran.output
    refused = runner.invoke(cli, ["tasks", "delete", "task-1"])
    assert refused.exit_code == 1  # a failed operation, not bad input
    assert "1 open instance(s)" in refused.output
    forced = runner.invoke(cli, ["tasks", "delete", "task-1", "--force", "--json"])
    assert forced.exit_code == 0, forced.output
    body = json.loads(forced.output)
    assert body["task_id"] == "task-1" and len(body["cancelled"]) == 1
    assert json.loads(runner.invoke(cli, ["tasks", "list", "--json"]).output) == []
    history = json.loads(runner.invoke(cli, ["instances", "task-1", "--json"]).output)
    assert [i["status"] for i in history] == ["cancelled"]
    missing = runner.invoke(cli, ["tasks", "delete", "task-1"])
    assert missing.exit_code == 2 and "no task 'task-1'" in missing.output
