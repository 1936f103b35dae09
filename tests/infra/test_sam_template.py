"""Structural checks of template.yaml and samconfig.toml that cfn-lint and checkov do not make.

cfn-lint, `sam validate --lint` and checkov run in `make template-check` (infra/sam.mk). These
tests hold the contract between the template and the Python code (logical ids, parameter and
environment names) and the rules that no linter knows: a queue's visibility timeout covers 6x
its consumer's timeout, every work queue has a dead-letter queue, every skip has a reason.
"""

from __future__ import annotations

import re
import shlex
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from iotsched.adapters.dynamodb.codec import _TASK_RECORD_FIELDS
from iotsched.local.template import load

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "template.yaml"
SAMCONFIG = ROOT / "samconfig.toml"
SAM_MK = ROOT / "infra" / "sam.mk"

# The Lambda maximum, and AWS's guidance for SQS event sources: queue visibility timeout at
# least 6x the function timeout, so throttled batches can be retried before they reappear.
LAMBDA_MAX_TIMEOUT_S = 900
VISIBILITY_FACTOR = 6
# SQS defaults when a queue leaves the attribute out.
SQS_DEFAULT_VISIBILITY_S = 30
SQS_DEFAULT_RETENTION_S = 345600
SQS_MAX_RETENTION_S = 1209600


# --------------------------------------------------------------------------- loading


def load_template(path: Path = TEMPLATE) -> dict[str, Any]:
    # The local runtime's loader: the same reading of the template the runtime deploys.
    return load(path)


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return load_template()


@pytest.fixture(scope="module")
def samconfig() -> dict[str, Any]:
    return tomllib.loads(SAMCONFIG.read_text(encoding="utf-8"))


# --------------------------------------------------------------------------- helpers


def resources_of(template: dict[str, Any], *types: str) -> dict[str, dict[str, Any]]:
    return {name: body for name, body in template["Resources"].items() if body["Type"] in types}


def functions_of(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return resources_of(template, "AWS::Serverless::Function", "AWS::Lambda::Function")


def function_property(template: dict[str, Any], function: dict[str, Any], key: str) -> Any:
    """A function property, falling back to Globals.Function as SAM does for scalars."""
    if key in function["Properties"]:
        return function["Properties"][key]
    return template.get("Globals", {}).get("Function", {}).get(key)


def ref_name(value: Any) -> str | None:
    """The logical id or parameter behind {"Ref": x} or {"Fn::GetAtt": [x, ...]}."""
    if isinstance(value, dict):
        if "Ref" in value:
            return str(value["Ref"])
        if "Fn::GetAtt" in value:
            return str(value["Fn::GetAtt"][0])
    return None


def resolve_number(template: dict[str, Any], value: Any, overrides: dict[str, str]) -> int:
    """A literal or a Ref to a Number parameter (its override, else its default)."""
    name = ref_name(value)
    if name is None:
        return int(value)
    assert name in template["Parameters"], f"{value} is not a parameter"
    return int(overrides.get(name, template["Parameters"][name]["Default"]))


def events_of(
    template: dict[str, Any], event_type: str
) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for fname, function in functions_of(template).items():
        for ename, event in (function["Properties"].get("Events") or {}).items():
            if event["Type"] == event_type:
                yield fname, ename, event.get("Properties") or {}


def sqs_events(template: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    return events_of(template, "SQS")


def event_source_queue_ids(template: dict[str, Any]) -> set[str]:
    """Queues some function consumes through an SQS event."""
    return {str(ref_name(props["Queue"])) for _, _, props in sqs_events(template)}


def dead_letter_queue_ids(template: dict[str, Any]) -> set[str]:
    """Queues that receive dead letters: redrive targets, function and rule DLQs."""
    dlqs: set[str] = set()
    for queue in resources_of(template, "AWS::SQS::Queue").values():
        redrive = queue.get("Properties", {}).get("RedrivePolicy")
        if redrive:
            dlqs.add(str(ref_name(redrive["deadLetterTargetArn"])))
    for function in functions_of(template).values():
        dlq = function["Properties"].get("DeadLetterQueue")
        if dlq:
            dlqs.add(str(ref_name(dlq["TargetArn"])))
        for event in (function["Properties"].get("Events") or {}).values():
            config = event.get("Properties", {}).get("DeadLetterConfig")
            if config and "Arn" in config:
                dlqs.add(str(ref_name(config["Arn"])))
    return dlqs


def parameter_overrides(samconfig: dict[str, Any]) -> dict[str, dict[str, str]]:
    """Each config env's deploy parameter_overrides, parsed."""
    result: dict[str, dict[str, str]] = {}
    for env, commands in samconfig.items():
        if not isinstance(commands, dict):
            continue
        raw = commands.get("deploy", {}).get("parameters", {}).get("parameter_overrides", "")
        pairs = raw if isinstance(raw, list) else shlex.split(raw)
        result[env] = dict(pair.split("=", 1) for pair in pairs)
    return result


# --------------------------------------------------------------------------- contract


def test_is_a_sam_template_on_python_3_12(template: dict[str, Any]) -> None:
    assert template["Transform"] == "AWS::Serverless-2016-10-31"
    for name, function in functions_of(template).items():
        assert function_property(template, function, "Runtime") == "python3.12", name


def test_parameters_are_the_documented_ones(template: dict[str, Any]) -> None:
    params = template["Parameters"]
    expected = {
        "Stage": ("String", "dev"),
        "WorkerTimeoutSeconds": ("Number", 300),
        "ShardVisibilityTimeoutSeconds": ("Number", 1800),
        "ShardLeaseSeconds": ("Number", 20),
        "MaxReceiveCount": ("Number", 5),
        "DispatcherTimeoutSeconds": ("Number", 60),
        "SweeperTimeoutSeconds": ("Number", 60),
        "DeadLetterTimeoutSeconds": ("Number", 60),
        "LogRetentionDays": ("Number", 365),
    }
    for name, (kind, default) in expected.items():
        assert params[name]["Type"] == kind, name
        assert params[name]["Default"] == default, name


def test_logical_ids_the_code_depends_on_exist(template: dict[str, Any]) -> None:
    expected_types = {
        "Table": "AWS::DynamoDB::Table",
        "ShardQueue": "AWS::SQS::Queue",
        "ShardDLQ": "AWS::SQS::Queue",
        "TickDLQ": "AWS::SQS::Queue",
        "DeadLetterArchive": "AWS::SQS::Queue",
        "AlertTopic": "AWS::SNS::Topic",
        "DispatcherFunction": "AWS::Serverless::Function",
        "WorkerFunction": "AWS::Serverless::Function",
        "SweeperFunction": "AWS::Serverless::Function",
        "DeadLetterFunction": "AWS::Serverless::Function",
        "CoreLayer": "AWS::Serverless::LayerVersion",
    }
    for name, kind in expected_types.items():
        assert template["Resources"][name]["Type"] == kind, name


def test_function_environment_is_the_contract(template: dict[str, Any]) -> None:
    env = template["Globals"]["Function"]["Environment"]["Variables"]
    assert env == {
        "IOTSCHED_TABLE": {"Ref": "Table"},
        "IOTSCHED_SHARD_QUEUE_URL": {"Ref": "ShardQueue"},
        "IOTSCHED_SHARD_QUEUE_HIGH_URL": {"Ref": "ShardHighQueue"},
        "IOTSCHED_SHARD_QUEUE_LOW_URL": {"Ref": "ShardLowQueue"},
        "IOTSCHED_ALERT_TOPIC_ARN": {"Ref": "AlertTopic"},
        "IOTSCHED_DEVICE_TABLE": {"Ref": "DeviceTable"},
        "IOTSCHED_DATA_BUCKET": {"Ref": "DataBucket"},
        "IOTSCHED_REMINDER_TOPIC_ARN": {"Ref": "ReminderTopic"},
        "IOTSCHED_DMS_URL": {"Ref": "DeviceManagementUrl"},
        "IOTSCHED_STAGE": {"Ref": "Stage"},
        "IOTSCHED_SHARD_LEASE_S": {"Ref": "ShardLeaseSeconds"},
        "IOTSCHED_INDEX_BUCKETS": {"Ref": "IndexBuckets"},
        "IOTSCHED_TRACING": "xray",
        "POWERTOOLS_SERVICE_NAME": {"Ref": "AWS::StackName"},
        "POWERTOOLS_METRICS_NAMESPACE": "iotsched",
        "POWERTOOLS_LOG_LEVEL": "INFO",
    }


def test_function_environment_values_stay_simple(template: dict[str, Any]) -> None:
    """The local runtime resolves only literals, Ref, GetAtt and a plain-string Sub."""
    envs = [template["Globals"]["Function"]["Environment"]["Variables"]]
    envs += [
        f["Properties"].get("Environment", {}).get("Variables", {})
        for f in functions_of(template).values()
    ]
    for variables in envs:
        for name, value in variables.items():
            if isinstance(value, dict):
                ((key, arg),) = value.items()
                assert key in {"Ref", "Fn::GetAtt", "Fn::Sub"}, name
                if key == "Fn::Sub":
                    assert isinstance(arg, str), name
            else:
                assert isinstance(value, str), name


def test_table_keys_and_indexes(template: dict[str, Any]) -> None:
    props = template["Resources"]["Table"]["Properties"]
    assert props["BillingMode"] == "PAY_PER_REQUEST"
    assert props["KeySchema"] == [
        {"AttributeName": "pk", "KeyType": "HASH"},
        {"AttributeName": "sk", "KeyType": "RANGE"},
    ]
    indexes = {i["IndexName"]: i for i in props["GlobalSecondaryIndexes"]}
    expected = {
        "by_due": ("due_pk", "due_sk"),
        "by_status": ("status_pk", "status_sk"),
        "by_deadline": ("open_pk", "open_sk"),
        "by_date": ("date_pk", "sk"),
    }
    assert set(indexes) == set(expected)
    projections = {
        "by_due": {
            "ProjectionType": "INCLUDE",
            "NonKeyAttributes": [
                "definition",
                "version",
                "incarnation",
                "enabled",
                "next_fire",
                "last_slot",
                "paused",
                "updated_at",
                "active",
                "queue",
                "runs",
                "calendars",
                "quotas",
            ],
        },
        "by_status": {"ProjectionType": "KEYS_ONLY"},
        "by_deadline": {"ProjectionType": "INCLUDE", "NonKeyAttributes": ["kind"]},
        "by_date": {"ProjectionType": "KEYS_ONLY"},
    }
    for name, (hash_key, range_key) in expected.items():
        assert indexes[name]["KeySchema"] == [
            {"AttributeName": hash_key, "KeyType": "HASH"},
            {"AttributeName": range_key, "KeyType": "RANGE"},
        ], name
        # Each index projects what its readers read, no more (the adapters' module
        # docstrings): an update writes an index entry only when it changes what it projects.
        assert indexes[name]["Projection"] == projections[name], name
    # the due query's projection and filter read only what by_due projects
    due = set(indexes["by_due"]["Projection"]["NonKeyAttributes"])
    # (the table's keys are in every index without being named: the reader names its record)
    assert due == {*_TASK_RECORD_FIELDS, "enabled", "paused"} - {"pk", "sk"}
    types = {a["AttributeName"]: a["AttributeType"] for a in props["AttributeDefinitions"]}
    assert types == dict.fromkeys(
        ("pk", "sk", *[k for pair in expected.values() for k in pair]), "S"
    )
    assert props["TimeToLiveSpecification"] == {"AttributeName": "expires_at", "Enabled": True}
    assert props["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"] is True


def test_outputs(template: dict[str, Any]) -> None:
    assert set(template["Outputs"]) >= {
        "TableName",
        "ShardQueueUrl",
        "ShardDLQUrl",
        "AlertTopicArn",
        "DeadLetterArchiveUrl",
        "DispatcherFunctionName",
        "WorkerFunctionName",
        "SweeperFunctionName",
        "DeadLetterFunctionName",
    }


# --------------------------------------------------------------------------- timeouts


def test_worker_timeout_bounds(template: dict[str, Any]) -> None:
    param = template["Parameters"]["WorkerTimeoutSeconds"]
    assert param["MaxValue"] <= LAMBDA_MAX_TIMEOUT_S
    assert param["Default"] <= param["MaxValue"]
    worker = template["Resources"]["WorkerFunction"]["Properties"]
    assert worker["Timeout"] == {"Ref": "WorkerTimeoutSeconds"}
    shard_queue = template["Resources"]["ShardQueue"]["Properties"]
    assert shard_queue["VisibilityTimeout"] == {"Ref": "ShardVisibilityTimeoutSeconds"}


def test_shard_visibility_default_covers_six_worker_timeouts(template: dict[str, Any]) -> None:
    params = template["Parameters"]
    assert (
        params["ShardVisibilityTimeoutSeconds"]["Default"]
        >= VISIBILITY_FACTOR * params["WorkerTimeoutSeconds"]["Default"]
    )


def test_every_function_timeout_is_at_most_the_lambda_maximum(template: dict[str, Any]) -> None:
    for name, function in functions_of(template).items():
        timeout = function_property(template, function, "Timeout")
        ref = ref_name(timeout)
        if ref is None:
            assert int(timeout) <= LAMBDA_MAX_TIMEOUT_S, name
        else:
            assert template["Parameters"][ref]["MaxValue"] <= LAMBDA_MAX_TIMEOUT_S, name


def _visibility_and_timeout(
    template: dict[str, Any], fname: str, props: dict[str, Any]
) -> tuple[str, Any, Any]:
    """(queue id, its VisibilityTimeout as written, the consumer's Timeout as written)."""
    queue_id = str(ref_name(props["Queue"]))
    queue = template["Resources"][queue_id].get("Properties", {})
    visibility = queue.get("VisibilityTimeout", SQS_DEFAULT_VISIBILITY_S)
    timeout = function_property(template, template["Resources"][fname], "Timeout")
    assert timeout is not None, f"{fname}: set a Timeout (the 3 s default is never meant)"
    return queue_id, visibility, timeout


def test_sqs_event_sources_name_a_queue_of_this_template(template: dict[str, Any]) -> None:
    """`Queue: !GetAtt X.Arn`: the shape the local runtime and these tests resolve."""
    events = list(sqs_events(template))
    assert {(f, e) for f, e, _ in events} >= {
        ("WorkerFunction", "Shards"),
        ("DeadLetterFunction", "DeadLetters"),
    }
    queues = resources_of(template, "AWS::SQS::Queue")
    for fname, ename, props in events:
        queue = props.get("Queue")
        assert isinstance(queue, dict) and queue.get("Fn::GetAtt", [None, None])[1] == "Arn", (
            f"{fname}.{ename}: Queue must be !GetAtt <Queue>.Arn"
        )
        assert ref_name(queue) in queues, f"{fname}.{ename}"


@pytest.mark.parametrize("env", ["default", "prod"])
def test_every_sqs_consumer_fits_6x_in_its_queue_visibility(
    template: dict[str, Any], samconfig: dict[str, Any], env: str
) -> None:
    """For every SQS event source, VT >= 6 x its consumer's timeout.

    Literals and parameters are resolved under the defaults and each samconfig env's
    overrides; CloudFormation cannot multiply, so a pair of parameters is only checked here.
    """
    overrides = parameter_overrides(samconfig)[env]
    for fname, ename, props in sqs_events(template):
        queue_id, visibility, timeout = _visibility_and_timeout(template, fname, props)
        vt = resolve_number(template, visibility, overrides)
        fn_timeout = resolve_number(template, timeout, overrides)
        assert vt >= VISIBILITY_FACTOR * fn_timeout, (
            f"{env}: {fname}.{ename}: {queue_id} VisibilityTimeout {vt} < "
            f"{VISIBILITY_FACTOR} x {fn_timeout}"
        )


def test_a_literal_visibility_covers_every_allowed_consumer_timeout(
    template: dict[str, Any],
) -> None:
    """A fixed VisibilityTimeout must hold for any value the timeout parameter admits."""
    params = template["Parameters"]
    for fname, ename, props in sqs_events(template):
        queue_id, visibility, timeout = _visibility_and_timeout(template, fname, props)
        param = ref_name(timeout)
        if ref_name(visibility) is None and param is not None:
            assert "MaxValue" in params[param], f"{param} needs a MaxValue"
            assert int(visibility) >= VISIBILITY_FACTOR * int(params[param]["MaxValue"]), (
                f"{fname}.{ename}: {queue_id} VisibilityTimeout {visibility} < "
                f"{VISIBILITY_FACTOR} x {param}.MaxValue"
            )


# --------------------------------------------------------------------------- queues and events


def test_every_sqs_event_reports_batch_item_failures(template: dict[str, Any]) -> None:
    for fname, ename, props in sqs_events(template):
        assert "ReportBatchItemFailures" in props.get("FunctionResponseTypes", []), (
            f"{fname}.{ename}"
        )
        batch = props.get("BatchSize", 10)
        if isinstance(batch, dict):  # a parameter: its largest value
            batch = template["Parameters"][batch["Ref"]]["MaxValue"]
        assert batch <= 10 or props.get("MaximumBatchingWindowInSeconds", 0) >= 1, (
            f"{fname}.{ename}"
        )


def test_every_work_queue_has_a_redrive_policy(template: dict[str, Any]) -> None:
    queues = resources_of(template, "AWS::SQS::Queue")
    dlqs = dead_letter_queue_ids(template)
    assert {"ShardDLQ", "TickDLQ", "DeadLetterArchive"} <= dlqs
    work_queues = set(queues) - dlqs
    assert "ShardQueue" in work_queues
    for name in work_queues:
        props = queues[name].get("Properties", {})
        redrive = props.get("RedrivePolicy")
        assert redrive, f"{name} receives work but has no RedrivePolicy"
        target = ref_name(redrive["deadLetterTargetArn"])
        assert target in queues, f"{name}: DLQ must be a queue of this template"
        assert "maxReceiveCount" in redrive, name


def test_every_event_source_queue_has_a_redrive_policy(template: dict[str, Any]) -> None:
    """A consumer can fail on a message for good, a DLQ consumer too: nothing loops forever."""
    queues = resources_of(template, "AWS::SQS::Queue")
    consumed = event_source_queue_ids(template)
    assert {"ShardQueue", "ShardDLQ"} <= consumed
    for name in consumed:
        redrive = queues[name].get("Properties", {}).get("RedrivePolicy")
        assert redrive, f"{name} is an SQS event source but has no RedrivePolicy"
        assert ref_name(redrive["deadLetterTargetArn"]) in queues, name
        assert "maxReceiveCount" in redrive, name


def test_every_redrive_target_outlives_its_source(template: dict[str, Any]) -> None:
    """Standard queues keep a message's original enqueue time in the DLQ: the DLQ's retention
    must outlast the source's, or dead letters expire early (at the 14-day maximum, equal)."""
    queues = resources_of(template, "AWS::SQS::Queue")
    for name, queue in queues.items():
        props = queue.get("Properties", {})
        redrive = props.get("RedrivePolicy")
        if not redrive:
            continue
        target = str(ref_name(redrive["deadLetterTargetArn"]))
        source = props.get("MessageRetentionPeriod", SQS_DEFAULT_RETENTION_S)
        dlq = queues[target]["Properties"].get("MessageRetentionPeriod", SQS_DEFAULT_RETENTION_S)
        assert dlq > source or dlq == source == SQS_MAX_RETENTION_S, f"{name} -> {target}"


@pytest.mark.parametrize("env", ["default", "prod"])
def test_a_consumed_dlq_gives_its_consumer_receives_of_its_own(
    template: dict[str, Any], samconfig: dict[str, Any], env: str
) -> None:
    """A DLQ with its own redrive must allow more receives than its sources do: a message may
    keep its receive count when SQS moves it to the DLQ (moto does), and would otherwise skip
    the DLQ consumer and go straight on to the next queue."""
    overrides = parameter_overrides(samconfig)[env]
    queues = resources_of(template, "AWS::SQS::Queue")
    redrives = {
        name: q["Properties"]["RedrivePolicy"]
        for name, q in queues.items()
        if q.get("Properties", {}).get("RedrivePolicy")
    }
    for source, redrive in redrives.items():
        target = str(ref_name(redrive["deadLetterTargetArn"]))
        if target in redrives:
            own = resolve_number(template, redrives[target]["maxReceiveCount"], overrides)
            inherited = resolve_number(template, redrive["maxReceiveCount"], overrides)
            assert own > inherited, f"{env}: {target} maxReceiveCount {own} <= {source}'s"


def test_shard_dlq_redrives_to_the_archive(template: dict[str, Any]) -> None:
    queues = template["Resources"]
    redrive = queues["ShardDLQ"]["Properties"]["RedrivePolicy"]
    assert redrive["deadLetterTargetArn"] == {"Fn::GetAtt": ["DeadLetterArchive", "Arn"]}
    assert 3 <= int(redrive["maxReceiveCount"]) <= 100
    archive = queues["DeadLetterArchive"]["Properties"]
    assert archive["MessageRetentionPeriod"] == SQS_MAX_RETENTION_S
    assert "RedrivePolicy" not in archive  # the end of the line: an operator empties it


def test_shard_queue_redrive_uses_max_receive_count(template: dict[str, Any]) -> None:
    redrive = template["Resources"]["ShardQueue"]["Properties"]["RedrivePolicy"]
    assert redrive == {
        "deadLetterTargetArn": {"Fn::GetAtt": ["ShardDLQ", "Arn"]},
        "maxReceiveCount": {"Ref": "MaxReceiveCount"},
    }


def test_the_tick_keeps_the_whole_event(template: dict[str, Any]) -> None:
    tick_fn = template["Resources"]["TickFunction"]["Properties"]
    assert tick_fn["Handler"] == "app.tick_handler"
    tick = tick_fn["Events"]["Tick"]
    assert tick["Type"] == "Schedule"
    props = tick["Properties"]
    assert props["Schedule"] == "rate(1 minute)"
    # The tick reads the event's `time`: any input shaping would drop the envelope.
    assert not {"Input", "InputPath", "InputTransformer"} & set(props)
    assert 60 <= props["RetryPolicy"]["MaximumEventAgeInSeconds"] <= 86400
    assert 0 <= props["RetryPolicy"]["MaximumRetryAttempts"] <= 185
    assert props["DeadLetterConfig"] == {"Arn": {"Fn::GetAtt": ["TickDLQ", "Arn"]}}


def test_the_tick_fans_out_to_bucket_dispatchers(template: dict[str, Any]) -> None:
    """The rule's function only sends to the dispatch queue; the bucket dispatcher takes one
    message an invocation from it, reports batch item failures and moves visibilities (its
    waits); the queue is encrypted and dead-letters to an alarmed DLQ."""
    resources = template["Resources"]
    tick_fn = resources["TickFunction"]["Properties"]
    assert tick_fn["Policies"] == [
        {"SQSSendMessagePolicy": {"QueueName": {"Fn::GetAtt": ["DispatchQueue", "QueueName"]}}}
    ]
    assert tick_fn["Environment"]["Variables"]["IOTSCHED_DISPATCH_QUEUE_URL"] == {
        "Ref": "DispatchQueue"
    }
    dispatcher = resources["DispatcherFunction"]["Properties"]
    assert dispatcher["Handler"] == "app.lambda_handler"
    assert dispatcher["Timeout"] == {"Ref": "DispatcherTimeoutSeconds"}
    assert "Tick" not in dispatcher["Events"]
    source = dispatcher["Events"]["Buckets"]
    assert source["Type"] == "SQS"
    assert source["Properties"]["Queue"] == {"Fn::GetAtt": ["DispatchQueue", "Arn"]}
    assert source["Properties"]["BatchSize"] == 1
    assert source["Properties"]["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    statements = [
        st
        for policy in dispatcher["Policies"]
        if "Statement" in policy
        for st in policy["Statement"]
    ]
    assert {
        "Sid": "DispatchVisibility",
        "Effect": "Allow",
        "Action": "sqs:ChangeMessageVisibility",
        "Resource": {"Fn::GetAtt": ["DispatchQueue", "Arn"]},
    } in statements
    queue = resources["DispatchQueue"]["Properties"]
    assert queue["SqsManagedSseEnabled"] is True
    assert queue["RedrivePolicy"]["deadLetterTargetArn"] == {"Fn::GetAtt": ["DispatchDLQ", "Arn"]}
    assert resources["DispatchDLQ"]["Properties"]["SqsManagedSseEnabled"] is True
    alarmed = {
        a["Properties"]["Dimensions"][0]["Value"]["Fn::GetAtt"][0]
        for a in resources.values()
        if a["Type"] == "AWS::CloudWatch::Alarm" and a["Properties"].get("Namespace") == "AWS/SQS"
    }
    assert {"DispatchDLQ", "DispatchQueue"} <= alarmed


def test_worker_concurrency_is_a_parameter_sized_for_the_targets(
    template: dict[str, Any],
) -> None:
    worker = template["Resources"]["WorkerFunction"]["Properties"]
    scaling = worker["Events"]["Shards"]["Properties"]["ScalingConfig"]
    assert scaling == {"MaximumConcurrency": {"Ref": "WorkerMaxConcurrency"}}
    param = template["Parameters"]["WorkerMaxConcurrency"]
    assert (param["MinValue"], param["MaxValue"]) == (2, 1000)  # the event source's limits
    # 110,000 three-second shards (the issue's 10,000-tenant minute) drain within 15 minutes
    assert 110_000 * 3 / param["Default"] <= 15 * 60


def test_worker_consumes_the_shard_queue(template: dict[str, Any]) -> None:
    worker = template["Resources"]["WorkerFunction"]["Properties"]
    assert worker["Handler"] == "app.lambda_handler"
    shards = worker["Events"]["Shards"]
    assert shards["Type"] == "SQS"
    props = shards["Properties"]
    assert props["Queue"] == {"Fn::GetAtt": ["ShardQueue", "Arn"]}


def test_worker_batch_size_is_a_parameter_with_the_trade_off_stated(
    template: dict[str, Any],
) -> None:
    """Shards per invocation: 10 by default (cost), 1 allowed (the chaos run's).

    With a batch, the worker holds its records' visibility at one lease (renewal requests), so
    a worker death leaves those not yet started invisible for a lease; the parameter states it.
    """
    props = template["Resources"]["WorkerFunction"]["Properties"]["Events"]["Shards"]["Properties"]
    assert props["BatchSize"] == {"Ref": "WorkerBatchSize"}
    assert props.get("MaximumBatchingWindowInSeconds", 0) == 0
    param = template["Parameters"]["WorkerBatchSize"]
    assert (param["Default"], param["MinValue"], param["MaxValue"]) == (10, 1, 10)
    assert "failover" in param["Description"]


def test_sweeper_runs_every_minute_on_its_own_rule(template: dict[str, Any]) -> None:
    sweeper = template["Resources"]["SweeperFunction"]["Properties"]
    assert sweeper["CodeUri"] == "functions/sweeper/"
    assert sweeper["Handler"] == "app.lambda_handler"
    assert sweeper["Timeout"] == {"Ref": "SweeperTimeoutSeconds"}
    assert set(sweeper["Events"]) == {"Sweep"}
    sweep = sweeper["Events"]["Sweep"]
    assert sweep["Type"] == "Schedule"
    props = sweep["Properties"]
    assert props["Schedule"] == "rate(1 minute)"
    # A missed sweep is redone a minute later: retry briefly, never for long.
    assert 60 <= props["RetryPolicy"]["MaximumEventAgeInSeconds"] <= 300
    assert 0 <= props["RetryPolicy"]["MaximumRetryAttempts"] <= 3
    assert props["DeadLetterConfig"] == {"Arn": {"Fn::GetAtt": ["TickDLQ", "Arn"]}}
    assert sweeper["EventInvokeConfig"]["MaximumEventAgeInSeconds"] <= 300
    assert sweeper["EventInvokeConfig"]["MaximumRetryAttempts"] == 0


def test_dead_letter_function_consumes_the_shard_dlq(template: dict[str, Any]) -> None:
    function = template["Resources"]["DeadLetterFunction"]["Properties"]
    assert function["CodeUri"] == "functions/dlq/"
    assert function["Handler"] == "app.lambda_handler"
    assert function["Timeout"] == {"Ref": "DeadLetterTimeoutSeconds"}
    assert set(function["Events"]) == {"DeadLetters"}
    event = function["Events"]["DeadLetters"]
    assert event["Type"] == "SQS"
    props = event["Properties"]
    assert props["Queue"] == {"Fn::GetAtt": ["ShardDLQ", "Arn"]}
    assert props["BatchSize"] == 10
    assert props["FunctionResponseTypes"] == ["ReportBatchItemFailures"]


def _allowed_sources(template: dict[str, Any], queue_id: str) -> list[Any]:
    """aws:SourceArn values of the queue policies that let EventBridge send to `queue_id`."""
    sources: list[Any] = []
    for policy in resources_of(template, "AWS::SQS::QueuePolicy").values():
        props = policy["Properties"]
        if {"Ref": queue_id} not in props["Queues"]:
            continue
        for statement in props["PolicyDocument"]["Statement"]:
            if statement.get("Principal") == {"Service": "events.amazonaws.com"} and (
                "sqs:SendMessage" in _as_list(statement["Action"])
            ):
                for operator in statement.get("Condition", {}).values():
                    sources += _as_list(operator.get("aws:SourceArn", []))
    return sources


def test_every_schedule_dead_letter_queue_admits_its_rule(template: dict[str, Any]) -> None:
    """EventBridge writes a rule's dead letters as events.amazonaws.com: the queue policy
    must name the rule SAM generates (<Function><Event>), or the dead letters are lost."""
    schedules = list(events_of(template, "Schedule"))
    assert {(f, e) for f, e, _ in schedules} >= {
        ("TickFunction", "Tick"),
        ("SweeperFunction", "Sweep"),
    }
    for fname, ename, props in schedules:
        config = props.get("DeadLetterConfig")
        assert config and "Arn" in config, f"{fname}.{ename}: no DeadLetterConfig"
        queue_id = str(ref_name(config["Arn"]))
        rule = {"Fn::GetAtt": [f"{fname}{ename}", "Arn"]}
        assert rule in _allowed_sources(template, queue_id), f"{queue_id} does not admit {rule}"
        # Simple shapes: the local runtime fires Schedule events from the expression alone.
        assert re.fullmatch(r"(rate|cron)\(.+\)", str(props["Schedule"])), f"{fname}.{ename}"


# --------------------------------------------------------------------------- code


def test_every_function_code_folder_has_its_handler(template: dict[str, Any]) -> None:
    for name, function in functions_of(template).items():
        props = function["Properties"]
        code_dir = ROOT / str(function_property(template, function, "CodeUri"))
        module, _, handler = str(props["Handler"]).rpartition(".")
        source = code_dir / f"{module.replace('.', '/')}.py"
        assert source.is_file(), f"{name}: {source.relative_to(ROOT)} is missing"
        text = source.read_text(encoding="utf-8")
        assert re.search(rf"^(async )?def {re.escape(handler)}\(", text, re.M) or re.search(
            rf"^{re.escape(handler)}\s*=", text, re.M
        ), f"{name}: no {handler} in {source.relative_to(ROOT)}"


def test_every_function_is_traced_at_its_entry(template: dict[str, Any]) -> None:
    """X-Ray active on every function, and each handler the template names wrapped by
    Powertools Tracer's `capture_lambda_handler` (docs/design.md, section 16)."""
    for name, function in functions_of(template).items():
        assert function_property(template, function, "Tracing") == "Active", name
        props = function["Properties"]
        code_dir = ROOT / str(function_property(template, function, "CodeUri"))
        module, _, handler = str(props["Handler"]).rpartition(".")
        text = (code_dir / f"{module.replace('.', '/')}.py").read_text(encoding="utf-8")
        decorators = re.search(rf"((?:^@.*\n(?:^ .*\n)*)+)^def {re.escape(handler)}\(", text, re.M)
        assert decorators is not None, f"{name}: {handler} has no decorators"
        assert "@tracer.capture_lambda_handler" in decorators.group(1), f"{name}: {handler}"
        assert re.search(r"^tracer = Tracer\(\)", text, re.M), name


def layer_choices(layers: Any) -> list[list[Any]]:
    """The layer lists a function may get: both branches of an `Fn::If`, else the list."""
    if isinstance(layers, dict) and "Fn::If" in layers:
        _, chosen, other = layers["Fn::If"]
        return [*layer_choices(chosen), *layer_choices(other)]
    return [layers]


def test_every_function_uses_the_core_layer(template: dict[str, Any]) -> None:
    for name, function in functions_of(template).items():
        for layers in layer_choices(function_property(template, function, "Layers")):
            if isinstance(layers, dict):  # CoreLayer's Ref joined with the handler layers
                joined = layers["Fn::Split"][1]["Fn::Join"][1]
                assert joined[0] == {"Ref": "CoreLayer"}, name
            else:
                assert layers[0] == {"Ref": "CoreLayer"}, name


def test_handler_layers_follow_the_core_layer_only_when_given(template: dict[str, Any]) -> None:
    """HandlerLayerArns (docs/deploy-your-jobs.md): empty by default, and then CoreLayer alone;
    else CoreLayer first (the handler packages import iotsched), the handler layers after."""
    param = template["Parameters"]["HandlerLayerArns"]
    assert param["Type"] == "CommaDelimitedList" and param["Default"] == ""
    condition = template["Conditions"]["HasHandlerLayers"]
    assert condition == {
        "Fn::Not": [{"Fn::Equals": [{"Fn::Join": [",", {"Ref": "HandlerLayerArns"}]}, ""]}]
    }
    layers = template["Globals"]["Function"]["Layers"]
    assert layers == {
        "Fn::If": [
            "HasHandlerLayers",
            {
                "Fn::Split": [
                    ",",
                    {
                        "Fn::Join": [
                            ",",
                            [
                                {"Ref": "CoreLayer"},
                                {"Fn::Join": [",", {"Ref": "HandlerLayerArns"}]},
                            ],
                        ]
                    },
                ]
            },
            [{"Ref": "CoreLayer"}],
        ]
    }
    for name, function in functions_of(template).items():
        assert "Layers" not in function["Properties"], f"{name}: layers belong in Globals"


def handler_policy_slot(policy: Any) -> int | None:
    """The index of HandlerPolicyArns a worker policy entry attaches, or None for another kind.

    A slot is `!If [HasHandlerPolicyN, !Select [N-1, <the list padded with "">], NoValue]`.
    """
    if not (isinstance(policy, dict) and "Fn::If" in policy):
        return None
    condition, chosen, otherwise = policy["Fn::If"]
    assert otherwise == {"Ref": "AWS::NoValue"}, policy
    index, padded = chosen["Fn::Select"]
    assert condition == f"HasHandlerPolicy{index + 1}", policy
    assert padded == PADDED_HANDLER_POLICIES, policy
    return int(index)


#: HandlerPolicyArns padded with empty slots: a slot past the list's end selects "".
PADDED_HANDLER_POLICIES = {
    "Fn::Split": [
        ",",
        {"Fn::Join": ["", [{"Fn::Join": [",", {"Ref": "HandlerPolicyArns"}]}, ",,,,"]]},
    ]
}


def test_handler_policies_reach_the_worker_role_only(template: dict[str, Any]) -> None:
    """HandlerPolicyArns: up to four managed policies, each attached to the worker's role when
    its slot is filled; no other function runs a handler, so no other role gets them."""
    param = template["Parameters"]["HandlerPolicyArns"]
    assert param["Type"] == "CommaDelimitedList" and param["Default"] == ""
    for n in range(1, 5):
        assert template["Conditions"][f"HasHandlerPolicy{n}"] == {
            "Fn::Not": [{"Fn::Equals": ["", {"Fn::Select": [n - 1, PADDED_HANDLER_POLICIES]}]}]
        }
    for name, function in functions_of(template).items():
        slots = [
            handler_policy_slot(policy)
            for policy in _as_list(function["Properties"].get("Policies", []))
            if handler_policy_slot(policy) is not None
        ]
        assert slots == ([0, 1, 2, 3] if name == "WorkerFunction" else []), name
    text = TEMPLATE.read_text(encoding="utf-8")
    # Four slots in the worker, four conditions, the parameter: nothing else names it.
    assert text.count("!Ref HandlerPolicyArns") == 8


def test_handler_environment_reaches_the_worker_only(template: dict[str, Any]) -> None:
    param = template["Parameters"]["HandlerEnvironment"]
    assert param["Type"] == "String" and param["Default"] == "{}"
    assert re.fullmatch(param["AllowedPattern"], '{"ACME_URL": "https://devices.example"}')
    assert re.fullmatch(param["AllowedPattern"], '{\n  "A": "1"\n}\n')
    assert not re.fullmatch(param["AllowedPattern"], '["ACME_URL"]')
    for name, function in functions_of(template).items():
        variables = function["Properties"].get("Environment", {}).get("Variables", {})
        expected = {"Ref": "HandlerEnvironment"} if name == "WorkerFunction" else None
        assert variables.get("IOTSCHED_HANDLER_ENVIRONMENT") == expected, name


def test_core_layer_is_built_by_the_makefile_in_its_context_path(template: dict[str, Any]) -> None:
    layer = template["Resources"]["CoreLayer"]
    metadata = layer["Metadata"]
    assert metadata["BuildMethod"] == "makefile"
    # No ContextPath: SAM resolves it from the root template's folder, which breaks a nested
    # build (a project of `iotsched init`); the Makefile is ContentUri's.
    assert "ContextPath" not in metadata
    makefile = ROOT / layer["Properties"]["ContentUri"] / "Makefile"
    assert makefile.is_file()
    assert "sam.mk" in makefile.read_text(encoding="utf-8")
    assert re.search(r"^build-CoreLayer:", SAM_MK.read_text(encoding="utf-8"), re.M)


def _make_variable(name: str) -> str:
    match = re.search(rf"^{name}\s*:?=\s*(\S+)\s*$", SAM_MK.read_text(encoding="utf-8"), re.M)
    assert match, f"{name} not set in {SAM_MK.relative_to(ROOT)}"
    return match.group(1)


def test_layer_platform_matches_the_functions(template: dict[str, Any]) -> None:
    """The layer's wheels (pydantic-core is compiled) must match the functions' CPU and Python."""
    arch = _make_variable("LAYER_ARCH")
    python = _make_variable("LAYER_PYTHON_VERSION")
    layer = template["Resources"]["CoreLayer"]
    assert layer["Metadata"]["BuildArchitecture"] == arch
    assert layer["Properties"]["CompatibleArchitectures"] == [arch]
    assert layer["Properties"]["CompatibleRuntimes"] == [f"python{python}"]
    for name, function in functions_of(template).items():
        assert function_property(template, function, "Architectures") == [arch], name
        assert function_property(template, function, "Runtime") == f"python{python}", name


def test_every_function_logs_to_a_retained_log_group(template: dict[str, Any]) -> None:
    groups = resources_of(template, "AWS::Logs::LogGroup")
    for name, function in functions_of(template).items():
        group = ref_name(function_property(template, function, "LoggingConfig")["LogGroup"])
        assert group in groups, name
        assert groups[group]["Properties"]["RetentionInDays"] == {"Ref": "LogRetentionDays"}


# --------------------------------------------------------------------------- encryption


def test_state_is_encrypted_at_rest(template: dict[str, Any]) -> None:
    sse = template["Resources"]["Table"]["Properties"]["SSESpecification"]
    assert sse["SSEEnabled"] is True
    for name, queue in resources_of(template, "AWS::SQS::Queue").items():
        props = queue.get("Properties", {})
        assert props.get("SqsManagedSseEnabled") is True or "KmsMasterKeyId" in props, name
    for name, topic in resources_of(template, "AWS::SNS::Topic").items():
        assert topic["Properties"].get("KmsMasterKeyId"), name


def test_alert_topic_key_lets_cloudwatch_alarms_publish(template: dict[str, Any]) -> None:
    """Alarms cannot use a topic encrypted with aws/sns: the key must be ours and allow them."""
    key_id = ref_name(template["Resources"]["AlertTopic"]["Properties"]["KmsMasterKeyId"])
    assert key_id is not None, "AlertTopic needs a customer managed key for alarm actions"
    key = template["Resources"][key_id]
    assert key["Type"] == "AWS::KMS::Key"
    assert key["Properties"]["EnableKeyRotation"] is True
    statements = key["Properties"]["KeyPolicy"]["Statement"]
    assert any(
        s["Effect"] == "Allow"
        and s["Principal"] == {"Service": "cloudwatch.amazonaws.com"}
        and {"kms:Decrypt", "kms:GenerateDataKey*"} <= set(s["Action"])
        for s in statements
    )


# --------------------------------------------------------------------------- IAM

# Policy templates SAM expands, and what they grant (samtranslator policy_templates.json).
ALLOWED_POLICY_TEMPLATES = {
    "SQSSendMessagePolicy": "sqs:SendMessage* on the named queue",
    "SNSPublishMessagePolicy": "sns:Publish on the named topic",
}

# Written-down exceptions to "no wildcard resource": (resource, Sid) -> why.
WILDCARD_EXCEPTIONS = {
    ("AlertTopicKey", "AccountAdministers"): "a key policy's Resource '*' means this key only",
    ("AlertTopicKey", "CloudWatchAlarmsPublish"): "a key policy's Resource '*' means this key only",
    ("DataKey", "AccountAdministers"): "a key policy's Resource '*' means this key only",
    ("DataBucketPolicy", "DenyInsecureTransport"): "a Deny of every action without TLS",
}


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def policy_statements(template: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every inline policy statement: function Policies, IAM, queue, topic and key policies."""
    for name, body in template["Resources"].items():
        props = body.get("Properties", {})
        if body["Type"] in {"AWS::Serverless::Function", "AWS::Serverless::StateMachine"}:
            for policy in _as_list(props.get("Policies", [])):
                if isinstance(policy, dict) and "Statement" in policy:
                    for statement in policy["Statement"]:
                        yield name, statement
        documents = [
            props.get(k) for k in ("PolicyDocument", "KeyPolicy", "AssumeRolePolicyDocument")
        ]
        documents += [
            p.get("PolicyDocument") for p in props.get("Policies", []) if isinstance(p, dict)
        ]
        for document in documents:
            if isinstance(document, dict):
                for statement in document.get("Statement", []):
                    yield name, statement


def test_function_policies_are_statements_or_known_templates(template: dict[str, Any]) -> None:
    for name, function in functions_of(template).items():
        for policy in _as_list(function["Properties"].get("Policies", [])):
            assert isinstance(policy, dict), f"{name}: managed policy {policy!r} is not allowed"
            if "Statement" in policy or handler_policy_slot(policy) is not None:
                continue  # a handler policy slot: test_handler_policies_reach_the_worker_role_only
            (template_name,) = policy
            assert template_name in ALLOWED_POLICY_TEMPLATES, f"{name}: {template_name}"


def test_no_wildcard_actions_or_resources(template: dict[str, Any]) -> None:
    statements = list(policy_statements(template))
    assert statements
    for name, statement in statements:
        where = f"{name}/{statement.get('Sid', '?')}"
        excepted = (name, statement.get("Sid")) in WILDCARD_EXCEPTIONS
        for action in _as_list(statement.get("Action", [])):
            wildcard = action == "*" or str(action).endswith(":*")
            assert excepted or not wildcard, f"{where}: wildcard action {action}"
        for resource in _as_list(statement.get("Resource", [])):
            assert excepted or resource != "*", f"{where}: Resource *"
        assert "NotAction" not in statement and "NotResource" not in statement, where
        if statement.get("Effect") == "Allow" and "Principal" in statement:
            assert statement["Principal"] != "*", f"{where}: public principal"
            assert statement["Principal"] != {"AWS": "*"}, f"{where}: public principal"


def _function_grants(
    template: dict[str, Any], fname: str
) -> tuple[dict[str, set[str]], dict[str, Any]]:
    """(actions by resource as written, policy templates by name) of a function's Policies."""
    grants: dict[str, set[str]] = {}
    templates: dict[str, Any] = {}
    for policy in _as_list(template["Resources"][fname]["Properties"].get("Policies", [])):
        if handler_policy_slot(policy) is not None:
            continue  # the operator's own policies, not this template's grants
        if "Statement" not in policy:
            for name, value in policy.items():  # a template given twice: every one, in order
                held = templates.get(name)
                templates[name] = value if held is None else [*_as_list(held), value]
            continue
        for statement in policy["Statement"]:
            if statement["Effect"] == "Deny":
                continue  # a Deny grants nothing (test_the_worker_keeps_the_attempt_logs_..)
            assert statement["Effect"] == "Allow", f"{fname}/{statement.get('Sid')}"
            for resource in _as_list(statement["Resource"]):
                # A grant under a condition is its own: it never widens the unconditioned one.
                key = repr(resource)
                if "Condition" in statement:
                    key += f" if {statement['Condition']!r}"
                grants.setdefault(key, set()).update(_as_list(statement["Action"]))
    return grants, templates


TABLE = repr({"Fn::GetAtt": ["Table", "Arn"]})
#: The table's items of tenants' partitions (`TENANT#<tenant>`): a capped tenant's line.
TENANT_ITEMS = (
    TABLE + " if " + repr({"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["TENANT#*"]}})
)
DEVICE_TABLE = repr({"Fn::GetAtt": ["DeviceTable", "Arn"]})
ALERT_KEY = repr({"Fn::GetAtt": ["AlertTopicKey", "Arn"]})
#: The index dependencies read (every function that may end an instance).
BY_DATE = repr({"Fn::Sub": "${Table.Arn}/index/by_date"})
ALERT_TOPIC_TEMPLATE = {"TopicName": {"Fn::GetAtt": ["AlertTopic", "TopicName"]}}
#: Every shard queue, one per priority: whoever sends a shard message may send to each.
SHARD_QUEUE_TEMPLATE = [
    {"QueueName": {"Fn::GetAtt": [queue, "QueueName"]}}
    for queue in ("ShardQueue", "ShardHighQueue", "ShardLowQueue")
]


def test_sweeper_policy_is_least_privilege(template: dict[str, Any]) -> None:
    grants, templates = _function_grants(template, "SweeperFunction")
    assert grants == {
        TABLE: {
            "dynamodb:GetItem",
            "dynamodb:BatchGetItem",  # an instance and its counter; keys-only index readers
            "dynamodb:PutItem",
            "dynamodb:UpdateItem",
            "dynamodb:Query",
            "dynamodb:ConditionCheckItem",
        },
        # Only its own index, only Query (partitions OPEN and LEASE of by_deadline).
        repr({"Fn::Sub": "${Table.Arn}/index/by_deadline"}): {"dynamodb:Query"},
        BY_DATE: {"dynamodb:Query"},
        # Missed runs: the due tasks no dispatcher advanced.
        repr({"Fn::Sub": "${Table.Arn}/index/by_due"}): {"dynamodb:Query"},
        DEVICE_TABLE: {"dynamodb:Query"},  # a groups dependent it starts
        TENANT_ITEMS: {"dynamodb:DeleteItem"},  # leaves a capped tenant's line
        ALERT_KEY: {"kms:GenerateDataKey", "kms:Decrypt"},
    }
    assert templates == {
        "SQSSendMessagePolicy": SHARD_QUEUE_TEMPLATE,
        "SNSPublishMessagePolicy": ALERT_TOPIC_TEMPLATE,
    }


def test_dead_letter_function_policy_is_least_privilege(template: dict[str, Any]) -> None:
    grants, templates = _function_grants(template, "DeadLetterFunction")
    assert grants == {
        # PutItem: the alert's record and a dependent's claim; by_date only.
        TABLE: {
            "dynamodb:GetItem",
            "dynamodb:BatchGetItem",  # an instance and its counter; keys-only index readers
            "dynamodb:PutItem",
            "dynamodb:UpdateItem",
            "dynamodb:Query",
            "dynamodb:ConditionCheckItem",
        },
        BY_DATE: {"dynamodb:Query"},
        DEVICE_TABLE: {"dynamodb:Query"},  # a groups dependent it starts
        TENANT_ITEMS: {"dynamodb:DeleteItem"},  # leaves a capped tenant's line
        ALERT_KEY: {"kms:GenerateDataKey", "kms:Decrypt"},
    }
    # Sends the shard messages of what an ending instance starts (a dependent, a queued
    # instance, the reduce); SAM's AWSLambdaSQSQueueExecutionRole covers ShardDLQ itself.
    assert templates == {
        "SQSSendMessagePolicy": SHARD_QUEUE_TEMPLATE,
        "SNSPublishMessagePolicy": ALERT_TOPIC_TEMPLATE,
    }


def test_every_alert_publisher_may_use_the_topic_key(template: dict[str, Any]) -> None:
    """The topic is encrypted with a CMK: sns:Publish alone fails with KMS access denied."""
    for name in functions_of(template):
        grants, templates = _function_grants(template, name)
        if templates.get("SNSPublishMessagePolicy") == ALERT_TOPIC_TEMPLATE:
            assert {"kms:GenerateDataKey", "kms:Decrypt"} <= grants.get(ALERT_KEY, set()), name


def test_no_function_may_query_every_index(template: dict[str, Any]) -> None:
    # Each index a function queries is named: a new query on another index is a grant of its
    # own (the traced grants test fails without it), never a wildcard that already covers it.
    for name in functions_of(template):
        grants, _ = _function_grants(template, name)
        for resource in grants:
            assert "/index/*" not in resource, f"{name}: {resource}"


def test_the_worker_keeps_the_attempt_logs_from_its_handlers(template: dict[str, Any]) -> None:
    # A handler runs with the worker's role, which writes the attempts' logs: it may create a
    # log (the runtime's create-only put) but neither overwrite nor read one, of any tenant.
    statements = {
        s.get("Sid"): s
        for policy in _as_list(template["Resources"]["WorkerFunction"]["Properties"]["Policies"])
        if isinstance(policy, dict) and "Statement" in policy
        for s in policy["Statement"]
    }
    logs = {"Fn::Sub": "${DataBucket.Arn}/logs/*"}
    overwrite, read = statements["AttemptLogsCreateOnly"], statements["AttemptLogsUnread"]
    assert (overwrite["Effect"], overwrite["Action"], overwrite["Resource"]) == (
        "Deny",
        "s3:PutObject",
        logs,
    )
    assert overwrite["Condition"] == {"Null": {"s3:if-none-match": "true"}}
    assert (read["Effect"], read["Action"], read["Resource"]) == ("Deny", "s3:GetObject", logs)
    assert "Condition" not in read


def test_service_principals_are_scoped_to_this_account_or_resource(
    template: dict[str, Any],
) -> None:
    for name, statement in policy_statements(template):
        principal = statement.get("Principal")
        if "sts:AssumeRole" in _as_list(statement.get("Action", [])):
            continue  # trust policies name the service that assumes the role
        if isinstance(principal, dict) and "Service" in principal:
            condition = statement.get("Condition", {})
            keys = {k for op in condition.values() for k in op}
            assert keys & {"aws:SourceArn", "aws:SourceAccount"}, f"{name}/{statement.get('Sid')}"


# --------------------------------------------------------------------------- management API


def test_management_api_is_iam_authorized_and_access_logged(template: dict[str, Any]) -> None:
    api = template["Resources"]["ManagementApi"]
    assert api["Type"] == "AWS::Serverless::Api"
    props = api["Properties"]
    assert props["StageName"] == {"Ref": "Stage"}
    # Every method needs a SigV4 signature; the gateway invokes the function through its
    # resource policy, so callers need execute-api:Invoke only.
    assert props["Auth"]["DefaultAuthorizer"] == "AWS_IAM"
    assert props["Auth"]["InvokeRole"] == "NONE"
    logging = props["AccessLogSetting"]
    assert logging["DestinationArn"] == {"Fn::GetAtt": ["ApiAccessLogGroup", "Arn"]}
    access_format = " ".join(str(logging["Format"]).split())
    for variable in ("$context.requestId", "$context.identity.userArn", "$context.status"):
        assert variable in access_format, variable
    group = template["Resources"]["ApiAccessLogGroup"]["Properties"]
    assert group["RetentionInDays"] == {"Ref": "LogRetentionDays"}
    settings = props["MethodSettings"]
    assert all(s["ThrottlingRateLimit"] > 0 and s["ThrottlingBurstLimit"] > 0 for s in settings)


def test_access_logging_waits_for_the_account_cloudwatch_role(template: dict[str, Any]) -> None:
    """API Gateway refuses a stage with access logs until the region's account setting names a
    CloudWatch role: the stage depends on it whenever this stack sets it."""
    resources = template["Resources"]
    assert template["Parameters"]["ManageApiGatewayAccount"]["Default"] == "true"
    assert template["Conditions"]["ManagesApiGatewayAccount"] == {
        "Fn::Equals": [{"Ref": "ManageApiGatewayAccount"}, "true"]
    }
    account, role = resources["ApiGatewayAccount"], resources["ApiGatewayCloudWatchRole"]
    assert account["Condition"] == role["Condition"] == "ManagesApiGatewayAccount"
    assert account["Properties"]["CloudWatchRoleArn"] == {
        "Fn::GetAtt": ["ApiGatewayCloudWatchRole", "Arn"]
    }
    # Other APIs in the account log through this role: it outlives the stack.
    assert role["DeletionPolicy"] == role["UpdateReplacePolicy"] == "Retain"
    (trust,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "apigateway.amazonaws.com"}
    ready = resources["ManagementApi"]["DependsOn"]
    handle = resources[ready]
    assert handle["Type"] == "AWS::CloudFormation::WaitConditionHandle"
    condition, when_set, _ = handle["Metadata"]["AccountSetting"]["Fn::If"]
    assert (condition, when_set) == ("ManagesApiGatewayAccount", {"Ref": "ApiGatewayAccount"})


def test_api_function_serves_every_path_of_the_api(template: dict[str, Any]) -> None:
    function = template["Resources"]["ApiFunction"]["Properties"]
    assert function["CodeUri"] == "functions/api/"
    assert function["Handler"] == "app.lambda_handler"
    # API Gateway ends a REST integration after 29 s.
    assert function["Timeout"] <= 29
    assert function["Events"] == {
        "Proxy": {
            "Type": "Api",
            "Properties": {
                "RestApiId": {"Ref": "ManagementApi"},
                "Path": "/{proxy+}",
                "Method": "ANY",
            },
        }
    }
    # No event of any function opens a route without the API's IAM authorization.
    for name, event_name, props in events_of(template, "Api"):
        assert props.get("RestApiId") == {"Ref": "ManagementApi"}, f"{name}.{event_name}"
        assert "Auth" not in props, f"{name}.{event_name}: per-route Auth overrides AWS_IAM"


def test_api_function_policy_is_least_privilege(template: dict[str, Any]) -> None:
    grants, templates = _function_grants(template, "ApiFunction")
    assert grants == {
        # No batch write and no scan (tasks are listed from by_date, then read by key);
        # DeleteItem deletes a task's definition, the transactions need ConditionCheck.
        TABLE: {
            "dynamodb:GetItem",
            "dynamodb:BatchGetItem",  # an instance and its counter; keys-only index readers
            "dynamodb:PutItem",
            "dynamodb:UpdateItem",
            "dynamodb:DeleteItem",
            "dynamodb:Query",
            "dynamodb:ConditionCheckItem",
        },
        # Only the index GET /instances?status= reads.
        repr({"Fn::Sub": "${Table.Arn}/index/by_status"}): {"dynamodb:Query"},
        BY_DATE: {"dynamodb:Query"},
        ALERT_KEY: {"kms:GenerateDataKey", "kms:Decrypt"},
        # A manual run of a `sharding: groups` task reads the groups.
        DEVICE_TABLE: {"dynamodb:Query"},
        # The overview's queue depths: counts of each shard queue and the DLQ, no message.
        **{
            repr({"Fn::GetAtt": [queue, "Arn"]}): {"sqs:GetQueueAttributes"}
            for queue in ("ShardQueue", "ShardHighQueue", "ShardLowQueue", "ShardDLQ")
        },
        # The caller's tenants: its role's or user's tags, in this account only.
        repr({"Fn::Sub": "arn:${AWS::Partition}:iam::${AWS::AccountId}:role/*"}): {
            "iam:ListRoleTags"
        },
        repr({"Fn::Sub": "arn:${AWS::Partition}:iam::${AWS::AccountId}:user/*"}): {
            "iam:ListUserTags"
        },
        # The attempts' whole logs (GET .../logs), and the bucket's key to decrypt them.
        repr({"Fn::Sub": "${DataBucket.Arn}/logs/*"}): {"s3:GetObject"},
        repr({"Fn::GetAtt": ["DataKey", "Arn"]}): {"kms:Decrypt"},
    }
    assert templates == {
        "SQSSendMessagePolicy": SHARD_QUEUE_TEMPLATE,
        "SNSPublishMessagePolicy": ALERT_TOPIC_TEMPLATE,
    }


def test_management_api_outputs(template: dict[str, Any]) -> None:
    assert {"ApiFunctionName", "ManagementApiUrl"} <= set(template["Outputs"])
    url = template["Outputs"]["ManagementApiUrl"]["Value"]["Fn::Sub"]
    assert "${ManagementApi}" in url and url.endswith("/${Stage}")


# --------------------------------------------------------------------------- alarms


def test_every_dead_letter_queue_has_an_alarm(template: dict[str, Any]) -> None:
    """Any message in an unconsumed DLQ alarms. A DLQ that a function consumes (ShardDLQ)
    holds messages for a moment by design: it alarms when a message outstays one visibility
    timeout (its handling failed, or nothing consumes). For a DLQ, SQS counts that age from
    the move into the DLQ, not from the original send."""
    alarms = resources_of(template, "AWS::CloudWatch::Alarm").values()
    queues = resources_of(template, "AWS::SQS::Queue")
    consumed = event_source_queue_ids(template)
    for dlq in dead_letter_queue_ids(template):
        metric = (
            "ApproximateAgeOfOldestMessage"
            if dlq in consumed
            else "ApproximateNumberOfMessagesVisible"
        )
        matching = [
            a["Properties"]
            for a in alarms
            if a["Properties"].get("Namespace") == "AWS/SQS"
            and a["Properties"].get("MetricName") == metric
            and any(ref_name(d["Value"]) == dlq for d in a["Properties"].get("Dimensions", []))
        ]
        assert matching, f"no {metric} alarm on {dlq}"
        for props in matching:
            assert props["ComparisonOperator"] == "GreaterThanThreshold", dlq
            assert {"Ref": "AlertTopic"} in props["AlarmActions"], dlq
            if dlq in consumed:
                visibility = queues[dlq]["Properties"].get(
                    "VisibilityTimeout", SQS_DEFAULT_VISIBILITY_S
                )
                assert props["Threshold"] >= resolve_number(template, visibility, {}), dlq
            else:
                assert props["Threshold"] == 0, dlq


def test_every_function_has_an_errors_alarm(template: dict[str, Any]) -> None:
    alarms = resources_of(template, "AWS::CloudWatch::Alarm").values()
    for name in functions_of(template):
        matching = [
            a["Properties"]
            for a in alarms
            if a["Properties"].get("Namespace") == "AWS/Lambda"
            and a["Properties"].get("MetricName") == "Errors"
            and any(ref_name(d["Value"]) == name for d in a["Properties"].get("Dimensions", []))
        ]
        assert matching, f"no Errors alarm on {name}"
        assert all({"Ref": "AlertTopic"} in p["AlarmActions"] for p in matching), name


def test_cloudwatch_may_publish_to_the_alert_topic(template: dict[str, Any]) -> None:
    policies = resources_of(template, "AWS::SNS::TopicPolicy").values()
    assert any(
        {"Ref": "AlertTopic"} in p["Properties"]["Topics"]
        and any(
            s["Principal"] == {"Service": "cloudwatch.amazonaws.com"}
            and s["Action"] == "sns:Publish"
            for s in p["Properties"]["PolicyDocument"]["Statement"]
        )
        for p in policies
    )


# --------------------------------------------------------------------------- checkov


def test_every_checkov_skip_has_a_reason(template: dict[str, Any]) -> None:
    skips = 0
    for name, body in template["Resources"].items():
        for skip in body.get("Metadata", {}).get("checkov", {}).get("skip", []):
            skips += 1
            assert re.fullmatch(r"CKV2?_[A-Z]+_\d+", skip["id"]), f"{name}: {skip}"
            assert len(str(skip.get("comment", "")).strip()) >= 20, (
                f"{name}/{skip['id']}: no reason"
            )
    assert skips, "the skips are expected in resource Metadata"
    # Inline `# checkov:skip=` comments carry no structured reason; skips live in Metadata.
    assert "checkov:skip" not in TEMPLATE.read_text(encoding="utf-8")


def test_checkov_runs_without_blanket_skips() -> None:
    text = SAM_MK.read_text(encoding="utf-8")
    checkov_lines = [line for line in text.splitlines() if "/checkov " in line]
    assert checkov_lines
    for line in checkov_lines:
        assert "--skip-check" not in line and "--soft-fail" not in line, line


# --------------------------------------------------------------------------- samconfig


def test_samconfig(samconfig: dict[str, Any]) -> None:
    assert str(samconfig["version"]) == "0.1"
    default = samconfig["default"]
    assert default["global"]["parameters"]["stack_name"] == "iotsched"
    assert default["build"]["parameters"] == {"cached": True, "parallel": True}
    assert default["validate"]["parameters"]["lint"] is True
    deploy = default["deploy"]["parameters"]
    assert deploy["capabilities"] == "CAPABILITY_IAM"
    assert deploy["confirm_changeset"] is True
    assert deploy["resolve_s3"] is True
    assert deploy["region"] == "us-east-1"
    prod = samconfig["prod"]["deploy"]["parameters"]
    assert prod["stack_name"] != "iotsched"
    assert {"capabilities", "region", "resolve_s3"} <= set(prod)


def test_samconfig_overrides_name_real_parameters(
    template: dict[str, Any], samconfig: dict[str, Any]
) -> None:
    for env, overrides in parameter_overrides(samconfig).items():
        unknown = set(overrides) - set(template["Parameters"])
        assert not unknown, f"{env}: unknown parameters {unknown}"
    assert parameter_overrides(samconfig)["default"]["Stage"] == "dev"
    assert parameter_overrides(samconfig)["prod"]["Stage"] == "prod"


# --------------------------------------------------------------------------- IoT task library


def test_worker_iot_grants_are_least_privilege(template: dict[str, Any]) -> None:
    grants, _ = _function_grants(template, "WorkerFunction")
    assert grants[DEVICE_TABLE] == {
        "dynamodb:GetItem",
        "dynamodb:BatchGetItem",
        "dynamodb:Query",
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
        "dynamodb:BatchWriteItem",
        "dynamodb:ConditionCheckItem",
    }  # no Scan, no DeleteItem, nothing on indexes
    assert grants[repr({"Fn::Sub": "${DataBucket.Arn}/*"})] == {
        "s3:PutObject",
        "s3:GetObject",
        "s3:AbortMultipartUpload",
    }
    assert grants[repr({"Fn::GetAtt": ["DataBucket", "Arn"]})] == {"s3:ListBucket"}
    assert grants[repr({"Fn::GetAtt": ["DataKey", "Arn"]})] == {
        "kms:GenerateDataKey",
        "kms:Decrypt",
    }
    assert grants[repr({"Ref": "ReminderTopic"})] == {"sns:Publish"}
    dispatcher, _ = _function_grants(template, "DispatcherFunction")
    assert dispatcher[DEVICE_TABLE] == {"dynamodb:Query"}
    for fname in ("SweeperFunction", "DeadLetterFunction"):
        # They may start a dependent with `sharding: groups` (its groups are read at its
        # claim), never run the IoT handlers: a Query on the devices, no write, no bucket.
        grants, _ = _function_grants(template, fname)
        assert grants.get(DEVICE_TABLE) == {"dynamodb:Query"}, fname
        assert repr({"Fn::Sub": "${DataBucket.Arn}/*"}) not in grants, fname


def test_data_bucket_is_private_versioned_and_kms_encrypted(template: dict[str, Any]) -> None:
    props = template["Resources"]["DataBucket"]["Properties"]
    assert set(props["PublicAccessBlockConfiguration"].values()) == {True}
    assert props["VersioningConfiguration"] == {"Status": "Enabled"}
    (rule,) = props["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    assert rule["ServerSideEncryptionByDefault"] == {
        "SSEAlgorithm": "aws:kms",
        "KMSMasterKeyID": {"Fn::GetAtt": ["DataKey", "Arn"]},
    }
    rules = props["LifecycleConfiguration"]["Rules"]
    assert any("AbortIncompleteMultipartUpload" in r for r in rules)
    policy = template["Resources"]["DataBucketPolicy"]["Properties"]["PolicyDocument"]
    (deny,) = policy["Statement"]
    assert deny["Effect"] == "Deny" and deny["Condition"] == {
        "Bool": {"aws:SecureTransport": "false"}
    }
    topic = template["Resources"]["ReminderTopic"]["Properties"]
    assert topic["KmsMasterKeyId"] == {"Ref": "DataKey"}
    table = template["Resources"]["DeviceTable"]["Properties"]
    assert table["SSESpecification"] == {"SSEEnabled": True, "SSEType": "KMS"}
    assert table["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}


@pytest.mark.parametrize(("overrides", "expected"), [({}, 10), ({"WorkerBatchSize": "1"}, 1)])
def test_the_local_runtime_polls_with_the_deployed_batch_size(
    overrides: dict[str, str], expected: int
) -> None:
    """The local event source mapping reads BatchSize through the parameter, as CloudFormation."""
    from iotsched.local.template import Template

    bound = Template.read(ROOT / "template.yaml", overrides)
    worker = bound.functions(lambda logical_id, _attr=None: f"local-{logical_id}")["WorkerFunction"]
    # one event source per shard queue (normal, high, low), each with the deployed batch size
    assert [source["batch_size"] for source in worker.sqs_sources] == [expected] * 3


def test_attempt_logs_expire_by_the_retention_tier_their_key_names(
    template: dict[str, Any],
) -> None:
    """One lifecycle rule per tier of `iotsched.core.logs`: an object under `logs/<n>d/`
    expires after n days, at least its record's retention (the key's tier is the first one
    as long)."""
    from iotsched.core import logs as attempt_logs

    rules = template["Resources"]["DataBucket"]["Properties"]["LifecycleConfiguration"]["Rules"]
    expiring = {
        rule["Prefix"]: rule["ExpirationInDays"]
        for rule in rules
        if str(rule.get("Prefix", "")).startswith(attempt_logs.LOG_PREFIX)
        and "ExpirationInDays" in rule
    }
    assert expiring == {f"logs/{t}d/": t for t in attempt_logs.RETENTION_TIERS}
    for days in (1, 30, 31, 400, 3650):
        key = attempt_logs.object_key("t", "t@x", 0, 1, retention_days=days)
        prefix = next(p for p in expiring if key.startswith(p))
        assert expiring[prefix] >= days
