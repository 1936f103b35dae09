"""The CloudWatch dashboard and the stopped-tick and growing-DLQ alarms of template.yaml.

cfn-lint, `sam validate --lint` and checkov read a dashboard's body as an opaque string (it is
an `Fn::Sub`), and CloudWatch reports a widget naming a metric nobody emits as an empty graph,
never as an error. So here the body is resolved as CloudFormation would (placeholder names for
the stack's resources), parsed, and each widget is held to what is real: a custom metric to one
the functions really print in their EMF documents (their publishing code run under the
template's environment), an AWS metric to one that namespace reports, with the dimensions it
reports it by, for a resource of this template.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import logging
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from iotsched import bootstrap
from iotsched.adapters.memory.queues import MemoryDispatchQueue
from iotsched.clock import ManualClock
from iotsched.lambdas.worker import add_metric
from iotsched.local.delivery import scheduled_event
from iotsched.local.host import FakeLambdaContext
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.execution.outcomes import (
    ShardOutcome,
    ShardReport,
)
from iotsched.services.execution.worker_invocation import shard_metrics
from iotsched.services.operations.on_demand import run_now
from tests.infra.test_sam_template import (
    dead_letter_queue_ids,
    events_of,
    functions_of,
    load_template,
    resources_of,
)
from tests.support import T0, task

REGION = "eu-west-3"  # not the local runtime's: a hard-coded region would show here
ACCOUNT = "210987654321"
STACK = "fleet-prod"

#: What each AWS namespace reports: metric -> the dimension sets it is reported by (AWS's
#: metric references for SQS, Lambda and DynamoDB), and the template type each dimension names.
AWS_METRICS: dict[str, dict[str, set[frozenset[str]]]] = {
    "AWS/SQS": {
        name: {frozenset({"QueueName"})}
        for name in (
            "ApproximateNumberOfMessagesVisible",
            "ApproximateNumberOfMessagesNotVisible",
            "ApproximateNumberOfMessagesDelayed",
            "ApproximateAgeOfOldestMessage",
            "NumberOfMessagesSent",
            "NumberOfMessagesReceived",
            "NumberOfMessagesDeleted",
            "NumberOfEmptyReceives",
        )
    },
    "AWS/Lambda": {
        name: {frozenset({"FunctionName"})}
        for name in (
            "Invocations",
            "Errors",
            "Throttles",
            "Duration",
            "ConcurrentExecutions",
            "AsyncEventsDropped",
            "DeadLetterErrors",
        )
    },
    "AWS/DynamoDB": {
        "ThrottledRequests": {frozenset({"TableName", "Operation"})},
        "ReadThrottleEvents": {
            frozenset({"TableName"}),
            frozenset({"TableName", "GlobalSecondaryIndexName"}),
        },
        "WriteThrottleEvents": {
            frozenset({"TableName"}),
            frozenset({"TableName", "GlobalSecondaryIndexName"}),
        },
    },
}
DIMENSION_TYPES = {
    "QueueName": "AWS::SQS::Queue",
    "FunctionName": "AWS::Serverless::Function",
    "TableName": "AWS::DynamoDB::Table",
}
DYNAMODB_OPERATIONS = {
    "GetItem",
    "BatchGetItem",
    "PutItem",
    "UpdateItem",
    "DeleteItem",
    "Query",
    "Scan",
    "BatchWriteItem",
    "TransactWriteItems",
    "TransactGetItems",
}
#: The keys CloudWatch's dashboard body structure defines for the widgets used here.
WIDGET_PROPERTIES = {
    "metric": {
        "accountId",
        "annotations",
        "legend",
        "liveData",
        "metrics",
        "period",
        "region",
        "setPeriodToTimeRange",
        "stacked",
        "stat",
        "timezone",
        "title",
        "view",
        "yAxis",
    },
    "alarm": {"alarms", "sortBy", "states", "title"},
}
AXIS_KEYS = {"label", "min", "max", "showUnits"}
RENDERING_OPTIONS = {"color", "label", "period", "stat", "visible", "yAxis", "id"}
STATISTICS = re.compile(r"(Sum|Average|Maximum|Minimum|SampleCount|p\d{1,2}(\.\d+)?)")


# --------------------------------------------------------------------------- the resolved body


@dataclass(frozen=True)
class Named:
    """What a placeholder in the resolved body stands for."""

    logical_id: str
    attribute: str | None  # None: a Ref


def physical(logical_id: str, attribute: str | None) -> str:
    """The placeholder CloudFormation's value is replaced by: unique, and a valid name."""
    if attribute == "Arn":
        return f"arn:aws:cloudwatch:{REGION}:{ACCOUNT}:alarm:{STACK}-{logical_id}-X1"
    suffix = f"-{attribute}" if attribute else ""
    return f"{STACK}-{logical_id}{suffix}-X1"


@dataclass(frozen=True)
class Row:
    """One metric of a graph."""

    namespace: str
    name: str
    dimensions: dict[str, str]
    options: dict[str, Any]
    title: str  # the graph's
    stat: str  # its own, else the graph's


@dataclass
class Dashboard:
    body: dict[str, Any]
    named: dict[str, Named]  # placeholder -> what it stands for

    @property
    def widgets(self) -> list[dict[str, Any]]:
        widgets: list[dict[str, Any]] = self.body["widgets"]
        return widgets

    def metric_widgets(self) -> list[dict[str, Any]]:
        return [w for w in self.widgets if w["type"] == "metric"]

    def metrics(self) -> Iterator[Row]:
        """Every metric row of every graph."""
        for widget in self.metric_widgets():
            properties = widget["properties"]
            for row in properties["metrics"]:
                options = row[-1] if isinstance(row[-1], dict) else {}
                fields = row[:-1] if options else row
                # written in full: "." (same as the row above) would hide what a row names
                assert "." not in fields and ".." not in fields, row
                namespace, name, *pairs = fields
                assert len(pairs) % 2 == 0, row
                yield Row(
                    namespace,
                    name,
                    dict(zip(pairs[::2], pairs[1::2], strict=True)),
                    options,
                    properties["title"],
                    options.get("stat", properties["stat"]),
                )


def resolve_sub(
    template: dict[str, Any], text: str, stack: str = STACK
) -> tuple[str, dict[str, Named]]:
    """`Fn::Sub` as CloudFormation resolves it, with placeholders for the stack's values."""
    named: dict[str, Named] = {}

    def value(match: re.Match[str]) -> str:
        ref = match.group(1)
        pseudo = {"AWS::Region": REGION, "AWS::AccountId": ACCOUNT, "AWS::StackName": stack}
        if ref in pseudo:
            return pseudo[ref]
        target, _, attribute = ref.partition(".")
        assert target in template["Resources"], f"${{{ref}}}: no resource {target}"
        placeholder = physical(target, attribute or None)
        named[placeholder] = Named(target, attribute or None)
        return placeholder

    assert "${!" not in text  # no escaped literal: every ${...} is substituted
    return re.sub(r"\$\{([^}]+)\}", value, text), named


def metrics_env(template: dict[str, Any], stack: str = STACK) -> dict[str, str]:
    """The functions' POWERTOOLS_* metric settings, resolved as CloudFormation would."""
    variables = template["Globals"]["Function"]["Environment"]["Variables"]
    resolved = {}
    for name in ("POWERTOOLS_METRICS_NAMESPACE", "POWERTOOLS_SERVICE_NAME"):
        value = variables[name]
        if isinstance(value, dict):
            assert value == {"Ref": "AWS::StackName"}, (name, value)  # the only one resolved
            value = stack
        resolved[name] = value
    return resolved


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return load_template()


def read_dashboard(template: dict[str, Any], stack: str = STACK) -> Dashboard:
    (resource,) = resources_of(template, "AWS::CloudWatch::Dashboard").values()
    sub = resource["Properties"]["DashboardBody"]["Fn::Sub"]
    assert isinstance(sub, str), "a plain Sub string: names only the template's own resources"
    text, named = resolve_sub(template, sub, stack)
    return Dashboard(json.loads(text), named)


@pytest.fixture(scope="module")
def dashboard(template: dict[str, Any]) -> Dashboard:
    return read_dashboard(template)


# --------------------------------------------------------------------------- what is emitted


def emf_metrics(out: str) -> set[tuple[str, tuple[tuple[str, str], ...], str]]:
    """(namespace, dimensions with their values, metric name) of each EMF document printed."""
    found = set()
    for line in out.splitlines():
        try:
            document = json.loads(line)
        except ValueError:
            continue
        if not isinstance(document, dict) or "_aws" not in document:
            continue
        for directive in document["_aws"]["CloudWatchMetrics"]:
            for dimension_set in directive["Dimensions"]:
                dimensions = tuple(sorted((d, str(document[d])) for d in dimension_set))
                for metric in directive["Metrics"]:
                    found.add((directive["Namespace"], dimensions, metric["Name"]))
    return found


def sqs_record(body: str, message_id: str = "1") -> dict[str, Any]:
    return {
        "messageId": f"m-{message_id}",
        "receiptHandle": f"rh-{message_id}",
        "body": body,
        "attributes": {"ApproximateReceiveCount": "1"},
        "messageAttributes": {},
        "md5OfBody": "",
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:q",
        "awsRegion": "us-east-1",
    }


def _dispatcher(module: ModuleType) -> None:
    module.tick_handler(scheduled_event(T0, rule="tick"), FakeLambdaContext("tick", 30))
    # a bucket dispatch's document, with zeros for what it did not do
    module.lambda_handler({"Records": []}, FakeLambdaContext("dispatcher", 60))


def _worker(module: ModuleType) -> None:
    # one invocation whose shards end three instances: succeeded, failed, aborted (the last
    # with a shard still to run)
    services = module.container.wiring()
    definitions = {
        "ok": task("ok", sharding={"strategy": "static", "shards": [{}]}),
        "bad": task("bad", params={"fail": [0]}, retry={"max_attempts": 1}),
        "stop": task(
            "stop",
            sharding={"strategy": "static", "shards": [{}, {}]},
            params={"fail": [0]},
            retry={"max_attempts": 1},
            abort={"failure_percent": 50},
        ),
    }
    apply_tasks(list(definitions.values()), services.tasks, now=T0)
    for task_id in definitions:
        run_now(task_id, services)
    messages = [m for m in services.queue.sent if m.shard == 0]
    event = {"Records": [sqs_record(m.model_dump_json(), m.instance_id) for m in messages]}
    module.lambda_handler(event, FakeLambdaContext("worker", 60))
    ended = {m.task_id: services.instances.get_instance(m.instance_id).status for m in messages}
    assert ended == {"ok": "succeeded", "bad": "failed", "stop": "aborted"}
    assert services.ends.drain() == {}  # published by this invocation, not left to another
    # `shard_metrics` is what the handler publishes for each message: every outcome, the
    # retry, the takeover and the give-back flags, and a duration
    reports = [ShardReport(outcome=outcome, duration_ms=1500) for outcome in ShardOutcome]
    reports.append(ShardReport(retried=True, taken_over=True, given_back=True))
    for report in reports:
        for metric in shard_metrics(report):
            add_metric(module.metrics, metric)
    module.metrics.flush_metrics()


def _sweeper(module: ModuleType) -> None:
    module.lambda_handler(scheduled_event(T0, rule="sweep"), FakeLambdaContext("sweeper", 60))


def _dlq(module: ModuleType) -> None:
    # a body that names no shard: alerted, dropped and counted
    module.lambda_handler({"Records": [sqs_record("{}")]}, FakeLambdaContext("dlq", 60))


EXERCISES: dict[str, Callable[[ModuleType], None]] = {
    "dispatcher": _dispatcher,
    "worker": _worker,
    "sweeper": _sweeper,
    "dlq": _dlq,
}


@pytest.fixture(scope="module")
def emitted(template: dict[str, Any]) -> set[tuple[str, tuple[tuple[str, str], ...], str]]:
    """Every (namespace, dimensions, name) the functions print, under the template's env."""
    found: set[tuple[str, tuple[tuple[str, str], ...], str]] = set()
    with pytest.MonkeyPatch.context() as patch:
        for name, value in metrics_env(template).items():
            patch.setenv(name, value)
        services = bootstrap.build_memory(clock=ManualClock(T0))
        settings = SimpleNamespace(
            index_buckets=4, batch_reports=False, worker_id="w-1", tracing="off"
        )
        for package, exercise in EXERCISES.items():
            # Metrics reads its namespace and service when created: re-import under the env
            module = importlib.reload(importlib.import_module(f"functions.{package}.app"))
            module.metrics.clear_metrics()
            patch.setattr(module.container, "wiring", lambda: services)
            patch.setattr(module.container, "settings", lambda: settings)
            if hasattr(module.container, "queue"):
                patch.setattr(module.container, "queue", MemoryDispatchQueue)
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                exercise(module)
            found |= emf_metrics(out.getvalue())
    return found


# --------------------------------------------------------------------------- the body


def test_the_dashboard_is_named_per_stack_and_region(template: dict[str, Any]) -> None:
    (resource,) = resources_of(template, "AWS::CloudWatch::Dashboard").values()
    # dashboards are global to an account: a stack of one name in two regions needs two
    sub = resource["Properties"]["DashboardName"]["Fn::Sub"]
    assert sub == "${AWS::StackName}-${AWS::Region}"
    # CloudWatch's rule for a dashboard's name, for the longest stack name
    name, _ = resolve_sub(template, sub.replace("${AWS::StackName}", "s" * 128))
    assert re.fullmatch(r"[A-Za-z0-9_-]{1,255}", name), name


def test_two_stacks_publish_and_show_two_services(template: dict[str, Any]) -> None:
    """Staging and prod in one account and region: each stack's functions publish under its
    own `service`, and its dashboard shows only that service's series."""
    services = {}
    for stack in ("a", "b"):
        env = metrics_env(template, stack)
        services[stack] = env["POWERTOOLS_SERVICE_NAME"]
        custom = [
            row
            for row in read_dashboard(template, stack).metrics()
            if row.namespace == env["POWERTOOLS_METRICS_NAMESPACE"]
        ]
        assert custom
        for row in custom:
            assert row.dimensions == {"service": services[stack]}, (row.title, row.name)
    assert services == {"a": "a", "b": "b"}
    # the alarms on the functions' own metrics, if any, watch this stack's series too
    for logical_id, alarm in resources_of(template, "AWS::CloudWatch::Alarm").items():
        props = alarm["Properties"]
        stats = [props] + [
            q["MetricStat"]["Metric"] for q in props.get("Metrics", []) if "MetricStat" in q
        ]
        for stat in stats:
            if stat.get("Namespace", "AWS/").startswith("AWS/"):
                continue
            assert {"Name": "service", "Value": {"Ref": "AWS::StackName"}} in stat.get(
                "Dimensions", []
            ), logical_id


@pytest.mark.parametrize("package", ["dispatcher", "worker", "sweeper", "dlq", "api"])
def test_the_functions_log_through_the_package_logger_whatever_the_stack(
    template: dict[str, Any], package: str
) -> None:
    """POWERTOOLS_SERVICE_NAME is the stack's name, and Powertools names its logger after it
    unless told otherwise: what the use-cases log (`iotsched.*` loggers) must still come out."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in metrics_env(template).items():
            patch.setenv(name, value)
        module = importlib.reload(importlib.import_module(f"functions.{package}.app"))
    # the parent of every `iotsched.*` logger, with Powertools' JSON handler on it
    assert module.logger.name == "iotsched"
    assert logging.getLogger("iotsched").handlers
    if hasattr(module, "metrics"):
        assert module.metrics.service == STACK  # the metrics' `service`: the stack's


def test_every_name_in_the_body_is_a_resource_of_the_template(
    template: dict[str, Any], dashboard: Dashboard
) -> None:
    resources = template["Resources"]
    # what the body may name: a function's or table's name (Ref), a queue's name, an alarm
    allowed: dict[str | None, set[str]] = {
        None: {*DIMENSION_TYPES.values()},
        "QueueName": {"AWS::SQS::Queue"},
        "Arn": {"AWS::CloudWatch::Alarm"},
    }
    assert dashboard.named
    for placeholder, named in dashboard.named.items():
        kind = resources[named.logical_id]["Type"]
        assert kind in allowed.get(named.attribute, set()), (placeholder, kind)


def test_widgets_fit_the_grid_without_overlapping(dashboard: Dashboard) -> None:
    cells: dict[tuple[int, int], str] = {}
    for widget in dashboard.widgets:
        x, y, width, height = (widget[k] for k in ("x", "y", "width", "height"))
        assert x >= 0 and width >= 1 and x + width <= 24 and 1 <= height <= 1000, widget
        for cell in ((i, j) for i in range(x, x + width) for j in range(y, y + height)):
            title = widget["properties"]["title"]
            assert cell not in cells, f"{title} overlaps {cells[cell]}"
            cells[cell] = title


def test_every_metric_widget_shows_this_region(dashboard: Dashboard) -> None:
    for widget in dashboard.metric_widgets():
        properties = widget["properties"]
        assert properties["region"] == REGION, properties["title"]
        assert properties["metrics"], properties["title"]
        assert STATISTICS.fullmatch(properties["stat"]), properties["title"]
        assert properties["period"] % 60 == 0, properties["title"]


def test_widgets_use_only_the_keys_cloudwatch_defines(dashboard: Dashboard) -> None:
    """PutDashboard rejects a body whose keys its schema does not know; a graph's option that
    is misspelt would otherwise surface only at deploy."""
    for widget in dashboard.widgets:
        assert set(widget) == {"type", "x", "y", "width", "height", "properties"}, widget
        properties = widget["properties"]
        assert set(properties) <= WIDGET_PROPERTIES[widget["type"]], properties["title"]
        for side, axis in properties.get("yAxis", {}).items():
            assert side in {"left", "right"} and set(axis) <= AXIS_KEYS, properties["title"]
        for row in properties.get("metrics", []):
            options = row[-1] if isinstance(row[-1], dict) else {}
            assert set(options) <= RENDERING_OPTIONS, (properties["title"], options)
            assert options.get("yAxis", "left") in {"left", "right"}, properties["title"]
            fields = row[:-1] if options else row
            assert all(isinstance(field, str) for field in fields), row


def test_every_custom_metric_is_one_the_functions_emit(
    template: dict[str, Any],
    dashboard: Dashboard,
    emitted: set[tuple[str, tuple[tuple[str, str], ...], str]],
) -> None:
    namespace = metrics_env(template)["POWERTOOLS_METRICS_NAMESPACE"]
    assert not namespace.startswith("AWS/")
    # the check below is only as good as what was emitted: every function's figures
    assert {name for _, _, name in emitted} >= {
        "BucketTicksSent",
        "InstancesFired",
        "ShardsSucceeded",
        "ShardDuration",
        "InstancesTimedOut",
        "DeadLetters",
        "InstancesSucceeded",
        "InstancesFailed",
        "InstancesAborted",
    }
    custom = [row for row in dashboard.metrics() if not row.namespace.startswith("AWS/")]
    assert custom
    for row in custom:
        key = (row.namespace, tuple(sorted(row.dimensions.items())), row.name)
        assert key in emitted, f"{row.title}: {key} is not emitted"
        assert STATISTICS.fullmatch(row.stat), (row.title, row.stat)


def test_every_aws_metric_is_reported_for_a_resource_of_the_template(
    template: dict[str, Any], dashboard: Dashboard
) -> None:
    resources = template["Resources"]
    aws = [row for row in dashboard.metrics() if row.namespace.startswith("AWS/")]
    assert aws
    for row in aws:
        title, dimensions = row.title, row.dimensions
        assert row.name in AWS_METRICS[row.namespace], f"{title}: {row.namespace} {row.name}"
        assert frozenset(dimensions) in AWS_METRICS[row.namespace][row.name], (title, dimensions)
        assert STATISTICS.fullmatch(row.stat), (title, row.stat)
        for key, value in dimensions.items():
            if key in DIMENSION_TYPES:
                named = dashboard.named[value]  # a placeholder: the stack's own resource
                assert resources[named.logical_id]["Type"] == DIMENSION_TYPES[key], title
                expected_attribute = "QueueName" if key == "QueueName" else None
                assert named.attribute == expected_attribute, (title, value)
            elif key == "GlobalSecondaryIndexName":
                table = resources[dashboard.named[dimensions["TableName"]].logical_id]
                indexes = table["Properties"].get("GlobalSecondaryIndexes", [])
                assert value in {i["IndexName"] for i in indexes}, (title, value)
            else:
                assert key == "Operation" and value in DYNAMODB_OPERATIONS, (title, value)


def _shown(dashboard: Dashboard) -> set[tuple[str, str, str, str]]:
    """(namespace, metric, the logical id its first dimension names, statistic) of each row."""
    shown = set()
    for row in dashboard.metrics():
        subject = next(iter(row.dimensions.values()), "")
        if subject in dashboard.named:
            subject = dashboard.named[subject].logical_id
        shown.add((row.namespace, row.name, subject, row.stat))
    return shown


def test_the_dashboard_shows_what_an_operator_asks_first(
    template: dict[str, Any], dashboard: Dashboard
) -> None:
    env = metrics_env(template)
    shown = _shown(dashboard)
    custom = {
        (name, stat) for ns, name, _, stat in shown if ns == env["POWERTOOLS_METRICS_NAMESPACE"]
    }
    # fired, skipped, failed (to start, and shards that failed), shard duration p50/p95
    assert {("InstancesFired", "Sum"), ("InstancesSkipped", "Sum")} <= custom
    assert {("InstancesFailedToStart", "Sum"), ("ShardsFailed", "Sum")} <= custom
    assert {("ShardDuration", "p50"), ("ShardDuration", "p95")} <= custom
    # how instances ended
    assert {(f"Instances{end}", "Sum") for end in ("Succeeded", "Failed", "Aborted")} <= custom
    sqs = {(name, queue) for ns, name, queue, _ in shown if ns == "AWS/SQS"}
    assert {
        ("ApproximateNumberOfMessagesVisible", "ShardQueue"),
        ("ApproximateAgeOfOldestMessage", "ShardQueue"),
    } <= sqs
    # the depth of every queue that receives dead letters (a new one must be added here)
    dlqs = {queue for name, queue in sqs if name == "ApproximateNumberOfMessagesVisible"}
    assert dead_letter_queue_ids(template) <= dlqs
    lambda_ = {(name, fn) for ns, name, fn, _ in shown if ns == "AWS/Lambda"}
    for function in functions_of(template):
        assert {("Throttles", function), ("Errors", function)} <= lambda_, function
    dynamodb = {(name, table) for ns, name, table, _ in shown if ns == "AWS/DynamoDB"}
    assert {("ThrottledRequests", "Table"), ("WriteThrottleEvents", "Table")} <= dynamodb


def test_the_alarm_widget_shows_every_alarm_of_the_template(
    template: dict[str, Any], dashboard: Dashboard
) -> None:
    (widget,) = [w for w in dashboard.widgets if w["type"] == "alarm"]
    arns = widget["properties"]["alarms"]
    assert len(arns) == len(set(arns)) <= 100  # CloudWatch's limit per alarm widget
    shown = {dashboard.named[arn].logical_id for arn in arns}
    assert shown == set(resources_of(template, "AWS::CloudWatch::Alarm"))


def test_the_dashboard_url_output_names_the_dashboard(template: dict[str, Any]) -> None:
    (logical_id,) = resources_of(template, "AWS::CloudWatch::Dashboard")
    url = template["Outputs"]["DashboardUrl"]["Value"]["Fn::Sub"]
    resolved, named = resolve_sub(template, url)
    assert resolved.startswith(f"https://{REGION}.console.aws.amazon.com/cloudwatch/home?")
    assert f"region={REGION}#dashboards:name=" in resolved
    assert list(named.values()) == [Named(logical_id, None)]  # Ref: the dashboard's name


# --------------------------------------------------------------------------- the alarms


def test_the_tick_stopped_alarm_watches_the_tick_functions_invocations(
    template: dict[str, Any],
) -> None:
    props = template["Resources"]["TickStoppedAlarm"]["Properties"]
    # the function the every-minute schedule invokes with the tick handler
    (tick,) = {
        name
        for name, _, event in events_of(template, "Schedule")
        if template["Resources"][name]["Properties"]["Handler"] == "app.tick_handler"
    }
    assert event_schedule(template, tick) == "rate(1 minute)"
    assert (props["Namespace"], props["MetricName"]) == ("AWS/Lambda", "Invocations")
    assert props["Dimensions"] == [{"Name": "FunctionName", "Value": {"Ref": tick}}]
    assert props["Statistic"] == "Sum"
    # fewer than one invocation in every minute of a few minutes: a single late tick (its
    # delivery anywhere in its minute, the metric's lag) does not raise it
    assert (props["Threshold"], props["ComparisonOperator"]) == (1, "LessThanThreshold")
    assert props["Period"] == 60
    assert 3 <= props["EvaluationPeriods"] == props["DatapointsToAlarm"] <= 10
    # Lambda reports no datapoint for a minute without invocations: missing is the signal
    assert props["TreatMissingData"] == "breaching"
    assert props["AlarmActions"] == props["OKActions"] == [{"Ref": "AlertTopic"}]
    assert "ENABLED" in props["AlarmDescription"]  # says what to check


def event_schedule(template: dict[str, Any], function: str) -> str:
    (schedule,) = {
        props["Schedule"] for name, _, props in events_of(template, "Schedule") if name == function
    }
    return str(schedule)


def test_the_growing_dlq_alarm_watches_the_shard_dlq_depth_rising(
    template: dict[str, Any],
) -> None:
    props = template["Resources"]["ShardDLQGrowingAlarm"]["Properties"]
    assert "MetricName" not in props and "Statistic" not in props  # metric math only
    queries = {q["Id"]: q for q in props["Metrics"]}
    (watched,) = [q for q in queries.values() if q.get("ReturnData", True)]
    stat = queries["visible"]["MetricStat"]
    assert queries["visible"]["ReturnData"] is False
    assert stat["Metric"] == {
        "Namespace": "AWS/SQS",
        "MetricName": "ApproximateNumberOfMessagesVisible",
        "Dimensions": [{"Name": "QueueName", "Value": {"Fn::GetAtt": ["ShardDLQ", "QueueName"]}}],
    }
    assert stat["Stat"] == "Maximum" and stat["Period"] == 300
    # the rise since the previous period, in messages (RATE is per second)
    assert watched["Expression"] == "RATE(visible) * PERIOD(visible)"
    assert (props["Threshold"], props["ComparisonOperator"]) == (0, "GreaterThanThreshold")
    # rising twice in a row: one burst of dead letters is not a growing queue
    assert props["EvaluationPeriods"] == props["DatapointsToAlarm"] == 2
    # a queue idle for hours reports nothing: not a rise
    assert props["TreatMissingData"] == "notBreaching"
    assert props["AlarmActions"] == props["OKActions"] == [{"Ref": "AlertTopic"}]
    assert "DeadLetterFunction" in props["AlarmDescription"]
