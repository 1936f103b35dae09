"""Each function's role grants what its code really calls, traced on moto.

moto does not enforce IAM, so a code path that calls an action its role lacks passes every
other test and fails only when deployed (AccessDenied). Here each function runs its scenarios
on the template's own resources (provisioned into the session's moto server) with a botocore
hook on every client its services build; each call is mapped to the IAM actions and resource
ARNs AWS authorizes it by (a transaction per action, an index query on the index's ARN, a
batch send as `sqs:SendMessage`, a publish to a CMK-encrypted topic needs the key too), and
each must be allowed by the function's role as template.yaml declares it: its inline
statements, SAM's policy templates and the policy of its SQS event source.

`IOTSCHED_GRANTS_TEMPLATE` names another template to check the grants of (e.g. an older
revision: `git show REV:template.yaml > /tmp/old.yaml`); the resources are always the current
template's, whose logical ids the grants name.
"""

from __future__ import annotations

import copy
import fnmatch
import importlib
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import boto3
import pytest
from aws_lambda_powertools.utilities.data_classes import EventBridgeEvent, SQSEvent

from iotsched import bootstrap
from iotsched.adapters.aws import AwsClients
from iotsched.adapters.dynamodb.alerts import DynamoDBAlertLog
from iotsched.adapters.dynamodb.devices import DynamoDBDeviceDirectory
from iotsched.adapters.iam import IamTags
from iotsched.api.app import create_app
from iotsched.api.identity import IamIdentity
from iotsched.api.proxy import rest_event
from iotsched.clock import ManualClock
from iotsched.context import ShardContext
from iotsched.core.alert_message import Alert
from iotsched.core.attempt_record import AttemptOutcome
from iotsched.core.buckets import bucket_of
from iotsched.core.decisions import decide_follow_ups
from iotsched.core.instance_record import InstanceStatus
from iotsched.core.quotas import TenantQuotas
from iotsched.core.shard_record import ShardStatus
from iotsched.core.timeutil import parse_iso
from iotsched.local.host import FakeLambdaContext
from iotsched.local.provision import Deployment, provision
from iotsched.local.template import ACCOUNT, Template
from iotsched.ports.devices import (
    DeviceGroup,
    Tenant,
)
from iotsched.registry import HandlerRegistry
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.execution.batch import (
    ShardBatch,
    run_shard,
)
from iotsched.services.execution.outcomes import Delivery
from iotsched.services.operations.actions import cancel_instance
from iotsched.services.operations.on_demand import (
    run_now,
    submit,
)
from iotsched.services.scheduling.dispatcher_invocation import (
    DispatchMessage,
    dispatch_messages,
    send_tick,
)
from iotsched.services.scheduling.tick import dispatch_tick
from iotsched.services.wiring import Wiring
from iotsched.settings import Settings
from tests.support import REGION, T0, TEST_BUCKETS, reset_moto, task
from tests.support import instance as support_instance

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "template.yaml"
GRANTS_TEMPLATE = Path(os.environ.get("IOTSCHED_GRANTS_TEMPLATE") or TEMPLATE)
STACK = "grants"
PATIENCE_S = 60


# --------------------------------------------------------------------------- calls -> needs


@dataclass(frozen=True)
class Need:
    """One authorization a call needs: an IAM action on a resource ARN."""

    action: str
    resource: str
    call: str  # the call that needs it, for the failure message
    # The condition keys the request carries (`s3:if-none-match` for a create-only put): a
    # Deny conditioned on one's absence (`Null`) applies to the calls without it.
    keys: frozenset[str] = frozenset()


#: TransactWriteItems / TransactGetItems are authorized per action, by the action's own name.
TRANSACT_ACTIONS = {
    "Put": "dynamodb:PutItem",
    "Update": "dynamodb:UpdateItem",
    "Delete": "dynamodb:DeleteItem",
    "ConditionCheck": "dynamodb:ConditionCheckItem",
    "Get": "dynamodb:GetItem",
}
#: Single-item and read operations, authorized by their own name.
DYNAMODB_PLAIN = {"GetItem", "PutItem", "UpdateItem", "DeleteItem", "Query", "Scan"}
#: SQS operations and the action each needs (a batch needs the single action).
SQS_ACTIONS = {
    "SendMessage": "sqs:SendMessage",
    "SendMessageBatch": "sqs:SendMessage",
    "ChangeMessageVisibility": "sqs:ChangeMessageVisibility",
    "ChangeMessageVisibilityBatch": "sqs:ChangeMessageVisibility",
    "DeleteMessage": "sqs:DeleteMessage",
    "DeleteMessageBatch": "sqs:DeleteMessage",
    "ReceiveMessage": "sqs:ReceiveMessage",
    "GetQueueAttributes": "sqs:GetQueueAttributes",
}
#: S3 object operations and the action each needs (multipart parts are PutObject).
S3_OBJECT_ACTIONS = {
    "PutObject": "s3:PutObject",
    "CreateMultipartUpload": "s3:PutObject",
    "UploadPart": "s3:PutObject",
    "CompleteMultipartUpload": "s3:PutObject",
    "AbortMultipartUpload": "s3:AbortMultipartUpload",
    "GetObject": "s3:GetObject",
    "HeadObject": "s3:GetObject",
    "DeleteObject": "s3:DeleteObject",
}
S3_BUCKET_ACTIONS = {
    "ListObjectsV2": "s3:ListBucket",
    "ListObjects": "s3:ListBucket",
    "ListObjectVersions": "s3:ListBucketVersions",
}


def table_arn(name: str, index: str | None = None) -> str:
    arn = f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{name}"
    return f"{arn}/index/{index}" if index else arn


def queue_arn(url: str) -> str:
    return f"arn:aws:sqs:{REGION}:{ACCOUNT}:{url.rstrip('/').rsplit('/', 1)[-1]}"


def needs_of(service: str, operation: str, params: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(IAM action, resource ARN) pairs AWS checks for one call; an operation this does not
    know raises, so a new kind of call cannot pass unchecked."""
    if service == "dynamodb":
        if operation in DYNAMODB_PLAIN:
            return [
                (f"dynamodb:{operation}", table_arn(params["TableName"], params.get("IndexName")))
            ]
        if operation in ("TransactWriteItems", "TransactGetItems"):
            out = []
            for item in params["TransactItems"]:
                ((kind, body),) = item.items()
                out.append((TRANSACT_ACTIONS[kind], table_arn(body["TableName"])))
            return out
        if operation in ("BatchWriteItem", "BatchGetItem"):
            return [(f"dynamodb:{operation}", table_arn(name)) for name in params["RequestItems"]]
    if service == "sqs" and operation in SQS_ACTIONS:
        return [(SQS_ACTIONS[operation], queue_arn(params["QueueUrl"]))]
    if service == "sns" and operation in ("Publish", "PublishBatch"):
        return [("sns:Publish", params["TopicArn"])]
    if service == "s3":
        if operation in S3_OBJECT_ACTIONS:
            action = S3_OBJECT_ACTIONS[operation]
            if params.get("VersionId") and action in ("s3:GetObject", "s3:DeleteObject"):
                action += "Version"
            return [(action, f"arn:aws:s3:::{params['Bucket']}/{params['Key']}")]
        if operation in S3_BUCKET_ACTIONS:
            return [(S3_BUCKET_ACTIONS[operation], f"arn:aws:s3:::{params['Bucket']}")]
    if service == "iam" and operation == "ListRoleTags":
        return [("iam:ListRoleTags", f"arn:aws:iam::{ACCOUNT}:role/{params['RoleName']}")]
    if service == "iam" and operation == "ListUserTags":
        return [("iam:ListUserTags", f"arn:aws:iam::{ACCOUNT}:user/{params['UserName']}")]
    raise AssertionError(f"no IAM mapping for {service} {operation}: add it to needs_of")


#: Request parameters that set an IAM condition key a statement may test.
CONDITION_KEYS = {"IfNoneMatch": "s3:if-none-match", "IfMatch": "s3:if-match"}


@dataclass
class Recorder:
    """A botocore hook that records what each call needs (thread-safe: workers renew leases
    and the dispatcher sends from threads of their own)."""

    calls: list[tuple[str, str]] = field(default_factory=list)  # (service, operation)
    needs: set[Need] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def hook(self, params: Mapping[str, Any], model: Any, **_: Any) -> None:
        service = model.service_model.endpoint_prefix
        pairs = needs_of(service, model.name, params)
        keys = frozenset(key for param, key in CONDITION_KEYS.items() if params.get(param))
        with self.lock:
            self.calls.append((service, model.name))
            for action, resource in pairs:
                self.needs.add(Need(action, resource, f"{service} {model.name}", keys))

    def clients(self, endpoint_url: str) -> AwsClients:
        """A client factory whose every client (built later, from this session) is hooked."""
        session = boto3.session.Session(region_name=REGION)
        session.events.register("before-parameter-build", self.hook)
        return AwsClients(region=REGION, endpoint_url=endpoint_url, session=session)

    def operations(self) -> set[str]:
        with self.lock:
            return {f"{s}:{o}" for s, o in self.calls}


# --------------------------------------------------------------------------- role -> grants


@dataclass(frozen=True)
class Grant:
    actions: tuple[str, ...]
    resources: tuple[str, ...]
    source: str

    # A Deny's condition keys that must be absent for it to apply (`Null: {key: "true"}`).
    unless: frozenset[str] = frozenset()

    def allows(self, action: str, resource: str) -> bool:
        # IAM actions match case-insensitively, resources case-sensitively; both take * and ?.
        return any(fnmatch.fnmatchcase(action.lower(), a.lower()) for a in self.actions) and any(
            fnmatch.fnmatchcase(resource, r) for r in self.resources
        )

    def denies(self, need: Need) -> bool:
        """For a Deny: True if it applies to the need (none of its `unless` keys is carried)."""
        return self.allows(need.action, need.resource) and not (self.unless & need.keys)


def _deny_unless(statement: Mapping[str, Any], function: str) -> frozenset[str]:
    """The keys whose presence lifts a Deny: only `Null: {key: "true"}` conditions are
    modelled (denied while the request lacks the key)."""
    condition = statement.get("Condition") or {}
    assert set(condition) <= {"Null"}, f"{function}: a Deny's {set(condition)} is not modelled"
    nulls = condition.get("Null", {})
    assert all(v == "true" for v in nulls.values()), f"{function}: Null false is not modelled"
    return frozenset(nulls)


def _sam_arn(service: str, name: str) -> str:
    return f"arn:aws:{service}:{REGION}:{ACCOUNT}:{name}"


#: SAM's policy templates (aws-sam-translator's policy_templates.json): name -> (parameter,
#: grants of the resolved parameter). Only these may appear in a function's Policies.
POLICY_TEMPLATES: dict[str, tuple[str, Callable[[str], list[tuple[list[str], list[str]]]]]] = {
    "SQSSendMessagePolicy": (
        "QueueName",
        lambda q: [(["sqs:SendMessage*"], [_sam_arn("sqs", q)])],
    ),
    "SQSPollerPolicy": (
        "QueueName",
        lambda q: [
            (
                [
                    "sqs:ChangeMessageVisibility",
                    "sqs:ChangeMessageVisibilityBatch",
                    "sqs:DeleteMessage",
                    "sqs:DeleteMessageBatch",
                    "sqs:GetQueueAttributes",
                    "sqs:ReceiveMessage",
                ],
                [_sam_arn("sqs", q)],
            )
        ],
    ),
    "SNSPublishMessagePolicy": ("TopicName", lambda t: [(["sns:Publish"], [_sam_arn("sns", t)])]),
    "DynamoDBCrudPolicy": (
        "TableName",
        lambda t: [
            (
                [
                    "dynamodb:GetItem",
                    "dynamodb:DeleteItem",
                    "dynamodb:PutItem",
                    "dynamodb:Scan",
                    "dynamodb:Query",
                    "dynamodb:UpdateItem",
                    "dynamodb:BatchWriteItem",
                    "dynamodb:BatchGetItem",
                    "dynamodb:DescribeTable",
                    "dynamodb:ConditionCheckItem",
                ],
                [_sam_arn("dynamodb", f"table/{t}"), _sam_arn("dynamodb", f"table/{t}/index/*")],
            )
        ],
    ),
}
#: What SAM's AWSLambdaSQSQueueExecutionRole gives a function for an SQS event. The managed
#: policy says Resource "*"; the function may rely on it for its own event-source queue only,
#: so it is counted on that queue alone.
SQS_EVENT_SOURCE_ACTIONS = ["sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes"]


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def role_denies(template: Template, function: str, deployment: Deployment) -> list[Grant]:
    """The Deny statements of `function`'s inline policies, resolved to this deployment's ARNs."""
    props = template.data["Resources"][function]["Properties"]
    denies: list[Grant] = []
    for policy in _listed(props.get("Policies") or []):
        if isinstance(policy, dict) and "Statement" in policy:
            for statement in template.resolve(policy["Statement"], deployment.physical):
                if statement["Effect"] == "Deny":
                    denies.append(
                        Grant(
                            tuple(_listed(statement["Action"])),
                            tuple(_listed(statement["Resource"])),
                            f"{function}/{statement.get('Sid', '?')}",
                            _deny_unless(statement, function),
                        )
                    )
    return denies


def role_grants(template: Template, function: str, deployment: Deployment) -> list[Grant]:
    """The Allow statements of `function`'s role, resolved to this deployment's ARNs."""
    props = template.data["Resources"][function]["Properties"]
    grants: list[Grant] = []
    for policy in _listed(props.get("Policies") or []):
        assert isinstance(policy, dict), f"{function}: managed policy {policy!r} is not modelled"
        if "Fn::If" in policy and str(policy["Fn::If"][0]).startswith("HasHandlerPolicy"):
            # The operator's own policies for their handlers (HandlerPolicyArns, empty by
            # default): never what iotsched's code relies on, so not counted as a grant.
            continue
        if "Statement" in policy:
            for statement in template.resolve(policy["Statement"], deployment.physical):
                if statement["Effect"] == "Deny":
                    continue  # role_denies
                assert "Condition" not in statement or "LeadingKeys" in str(statement), (
                    f"{function}: an Allow's condition is not modelled"
                )
                grants.append(
                    Grant(
                        tuple(_listed(statement["Action"])),
                        tuple(_listed(statement["Resource"])),
                        f"{function}/{statement.get('Sid', '?')}",
                    )
                )
            continue
        ((name, parameters),) = policy.items()
        assert name in POLICY_TEMPLATES, f"{function}: policy template {name} is not modelled"
        key, expand = POLICY_TEMPLATES[name]
        value = template.resolve(parameters[key], deployment.physical)
        grants += [Grant(tuple(a), tuple(r), f"{function}/{name}") for a, r in expand(value)]
    for event in (props.get("Events") or {}).values():
        if event["Type"] == "SQS":
            queue = template.resolve(event["Properties"]["Queue"], deployment.physical)
            grants.append(
                Grant(tuple(SQS_EVENT_SOURCE_ACTIONS), (queue,), f"{function}/event source")
            )
    return grants


def implied_needs(template: Template, deployment: Deployment, needs: set[Need]) -> set[Need]:
    """What AWS also checks for a call on an encrypted resource: the key of a CMK-encrypted
    topic (GenerateDataKey and Decrypt for a publish), of an SSE-KMS bucket (GenerateDataKey
    to write, Decrypt to read or to complete a multipart upload)."""
    resources = template.data["Resources"]
    topic_keys: dict[str, str] = {}
    for lid, arn in deployment.topics.items():
        key = (resources[lid].get("Properties") or {}).get("KmsMasterKeyId")
        key_id = _logical(key)
        if key_id is not None and key_id in resources:
            topic_keys[arn] = deployment.physical(key_id, "Arn")
    bucket_keys: dict[str, str] = {}
    for lid, name in deployment.buckets.items():
        encryption = (resources[lid].get("Properties") or {}).get("BucketEncryption") or {}
        for rule in encryption.get("ServerSideEncryptionConfiguration", []):
            default = rule.get("ServerSideEncryptionByDefault") or {}
            key_id = _logical(default.get("KMSMasterKeyID"))
            if default.get("SSEAlgorithm") == "aws:kms" and key_id is not None:
                bucket_keys[f"arn:aws:s3:::{name}/"] = deployment.physical(key_id, "Arn")
    out: set[Need] = set()
    for need in needs:
        if need.action == "sns:Publish" and need.resource in topic_keys:
            for action in ("kms:GenerateDataKey", "kms:Decrypt"):
                out.add(Need(action, topic_keys[need.resource], need.call + " (topic key)"))
        for prefix, key_arn in bucket_keys.items():
            if need.resource.startswith(prefix):
                actions = {
                    "s3:PutObject": ("kms:GenerateDataKey", "kms:Decrypt"),
                    "s3:GetObject": ("kms:Decrypt",),
                    "s3:GetObjectVersion": ("kms:Decrypt",),
                }.get(need.action, ())
                for action in actions:
                    out.add(Need(action, key_arn, need.call + " (bucket key)"))
    return out


def _logical(value: Any) -> str | None:
    if isinstance(value, dict):
        if "Ref" in value:
            return str(value["Ref"])
        if "Fn::GetAtt" in value:
            return str(value["Fn::GetAtt"][0])
    return None


def missing_grants(
    template: Template, function: str, deployment: Deployment, needs: set[Need]
) -> list[str]:
    """Each need the role does not allow (or denies), as `action on resource (by call)`,
    sorted."""
    grants = role_grants(template, function, deployment)
    denies = role_denies(template, function, deployment)
    every = needs | implied_needs(template, deployment, needs)
    return sorted(
        f"{n.action} on {n.resource} (by {n.call})"
        + "".join(f" denied by {d.source}" for d in denies if d.denies(n))
        for n in every
        if not any(g.allows(n.action, n.resource) for g in grants)
        or any(d.denies(n) for d in denies)
    )


# --------------------------------------------------------------------------- the deployment


@dataclass
class Stack:
    """The current template provisioned into the session's moto server."""

    endpoint_url: str
    deployment: Deployment
    template: Template
    clock: ManualClock
    admin: Wiring  # unhooked: sets the scene
    admin_clients: AwsClients

    def settings(self, function: str) -> Settings:
        env = self.deployment.functions[function].environment
        return Settings.from_env(env).with_endpoint(self.endpoint_url)

    def traced(
        self, function: str, recorder: Recorder, handlers: Mapping[str, Any] | None = None
    ) -> Wiring:
        """`function`'s services as its Lambda builds them, on hooked clients."""
        settings = self.settings(function)
        clients = recorder.clients(self.endpoint_url)
        # The installed handlers, those given in place of any of the same name; the IoT
        # handlers' resources are the function's own (its settings, the hooked clients).
        return bootstrap.build(
            settings,
            clock=self.clock,
            clients=clients,
            handlers=HandlerRegistry(handlers),
        )

    def grants_template(self) -> Template:
        return Template.read(GRANTS_TEMPLATE)

    def check(self, function: str, recorder: Recorder) -> None:
        missing = missing_grants(self.grants_template(), function, self.deployment, recorder.needs)
        assert not missing, f"{function}'s role lacks what its code calls:\n" + "\n".join(missing)

    def seed_groups(self, tenant: str = "acme", groups: int = 2) -> None:
        directory = DynamoDBDeviceDirectory(
            self.admin_clients.dynamodb(), self.deployment.tables["DeviceTable"]
        )
        directory.put_tenants([Tenant(tenant_id=tenant)])
        directory.put_groups(
            [
                DeviceGroup(tenant, f"g{n}", f"dev-{n * 100:06d}", f"dev-{(n + 1) * 100:06d}")
                for n in range(groups)
            ]
        )

    def receive(self, logical_id: str = "ShardQueue") -> list[dict[str, Any]]:
        """Every message on the queue (received, left in flight: the function acks them)."""
        sqs = self.admin_clients.sqs()
        url = self.deployment.queues[logical_id]
        got: list[dict[str, Any]] = []
        while True:
            batch = sqs.receive_message(
                QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["All"], VisibilityTimeout=600
            ).get("Messages", [])
            if not batch:
                return got
            got.extend(batch)


@pytest.fixture
def stack(moto_server: str, moto_clients: AwsClients) -> Stack:
    reset_moto(moto_server)
    # The test deployments' bucket count: every tick and sweep queries each bucket, and the
    # grants do not depend on how many there are.
    template = Template.read(TEMPLATE, {"IndexBuckets": TEST_BUCKETS})
    deployment = provision(template, moto_clients, stack=STACK)
    clock = ManualClock(T0)
    settings = Settings.from_env(deployment.functions["ApiFunction"].environment)
    admin = bootstrap.build(settings.with_endpoint(moto_server), clock=clock, clients=moto_clients)
    return Stack(moto_server, deployment, template, clock, admin, moto_clients)


def load_app(monkeypatch: pytest.MonkeyPatch, name: str, services: Wiring) -> ModuleType:
    """The function's module with its services replaced by `services` (built as it builds
    them, on hooked clients)."""
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "iotsched")  # as the template sets them
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", "iotsched")
    module = importlib.reload(importlib.import_module(f"functions.{name}.app"))
    monkeypatch.setattr(module.container, "wiring", lambda: services)
    monkeypatch.setattr(module.container, "settings", lambda: SimpleNamespace(worker_id="w-traced"))
    return module


def sqs_event(messages: list[dict[str, Any]], queue: str) -> dict[str, Any]:
    """The SQS event the event source mapping would deliver for `messages`."""
    return {
        "Records": [
            {
                "messageId": m["MessageId"],
                "receiptHandle": m["ReceiptHandle"],
                "body": m["Body"],
                "attributes": {
                    "ApproximateReceiveCount": m.get("Attributes", {}).get(
                        "ApproximateReceiveCount", "1"
                    )
                },
                "messageAttributes": {},
                "md5OfBody": m.get("MD5OfBody", ""),
                "eventSource": "aws:sqs",
                "eventSourceARN": queue_arn(queue),
                "awsRegion": REGION,
            }
            for m in messages
        ]
    }


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + PATIENCE_S
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.02)


# --------------------------------------------------------------------------- the dead-letter handler


def test_dead_letter_function_role_allows_what_it_calls(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dead-lettered last shard: the shard ends, its alert is recorded and published, the
    instance finalizes, its exclusive follower starts (SendMessage) and its dependent is
    claimed (by_date query, PutItem)."""
    admin = stack.admin
    stack.seed_groups()
    apply_tasks(
        [
            task(
                "parent",
                blocking={"policy": "serial", "max_queued": 1},
                retry={"max_attempts": 1, "backoff_s": 0},
            ),
            task(
                "child",
                trigger={"after": ["parent"]},
                sharding={"strategy": "groups", "tenant": "acme"},
            ),
        ],
        admin.tasks,
        now=T0,
    )
    first, _ = run_now("parent", admin)
    stack.clock.advance(timedelta(minutes=1))
    # Another business date: the dependent's date then has `first` as its latest parent.
    day_before = first.business_date - timedelta(days=1)
    follower, _ = run_now("parent", admin, business_date=day_before)
    assert follower.status is InstanceStatus.QUEUED
    (message,) = stack.receive()

    recorder = Recorder()
    app = load_app(monkeypatch, "dlq", stack.traced("DeadLetterFunction", recorder))
    dlq_url = stack.deployment.queues["ShardDLQ"]
    answer = app.lambda_handler(sqs_event([message], dlq_url), FakeLambdaContext("dlq", 60))
    assert answer == {"batchItemFailures": []}

    ended = admin.instances.get_instance(first.instance_id)
    assert ended is not None and ended.status is InstanceStatus.FAILED
    started = admin.instances.get_instance(follower.instance_id)
    assert started is not None and started.status is not InstanceStatus.QUEUED
    assert admin.instances.instances_for_date("child", first.business_date)
    assert {"sns:Publish", "dynamodb:PutItem", "sqs:SendMessage"} <= {
        n.action for n in recorder.needs
    }
    stack.check("DeadLetterFunction", recorder)
    # The check itself can fail: a role without its statements lacks every one of these.
    bare = copy.deepcopy(stack.template.data)
    bare["Resources"]["DeadLetterFunction"]["Properties"]["Policies"] = []
    stripped = Template(stack.template.path, bare, stack.template.parameters)
    lacking = missing_grants(stripped, "DeadLetterFunction", stack.deployment, recorder.needs)
    assert len(lacking) >= len(recorder.needs) and any("sqs:SendMessage" in m for m in lacking)


# --------------------------------------------------------------------------- the sweeper


def _lease(admin: Wiring, instance_id: str, *, max_attempts: int = 3) -> Any:
    now = admin.clock.now()
    result = admin.instances.take_lease(
        instance_id,
        0,
        bounds={},
        worker="gone",
        now=now,
        lease_until=now + timedelta(seconds=admin.tuning.shard_lease_s),
        max_attempts=max_attempts,
        indexed=True,  # a worker that renewed once before it died: the sweeper's to find
    )
    assert result.taken
    return result.shard


def _succeed(admin: Wiring, shard: Any) -> None:
    """The shard's final write, as a worker that died before its finalize left it."""
    attempt = shard.attempts[-1].model_copy(
        update={
            "ended_at": admin.clock.now(),
            "duration_ms": 1,
            "outcome": AttemptOutcome.SUCCEEDED,
        }
    )
    admin.instances.complete_shard(
        shard.instance_id, shard.index, status=ShardStatus.SUCCEEDED, attempt=attempt
    )


def _with_follower_and_dependent(stack: Stack, name: str, **fields: Any) -> list[Any]:
    """`name` (exclusive, serial) and `name`-child (after it, `groups`)."""
    return [
        task(name, blocking={"policy": "serial", "max_queued": 1}, **fields),
        task(
            f"{name}-child",
            trigger={"after": [name]},
            sharding={"strategy": "groups", "tenant": "acme"},
        ),
    ]


def _queue_follower(admin: Wiring, name: str, day: Any) -> None:
    follower, _ = run_now(name, admin, business_date=day - timedelta(days=1), request_id="next")
    assert follower.status is InstanceStatus.QUEUED


def test_sweeper_role_allows_what_it_calls(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    """One sweep with every step due: a last attempt's expired lease ends, another's gets a
    fresh message, an instance past its deadline ends (its alert, follower and dependent), a
    stuck dispatch and a lost reduce resume, a drained instance finalizes, an ended instance's
    owed follow-ups are done and a pending alert is published again."""
    admin = stack.admin
    stack.seed_groups()
    apply_tasks(
        [
            task("last", retry={"max_attempts": 1, "backoff_s": 0}),
            task("requeue", retry={"max_attempts": 3, "backoff_s": 0}),
            *_with_follower_and_dependent(stack, "late", instance_timeout_s=60),
            task("reducer", reduce="noop"),
            task("zero"),
            *_with_follower_and_dependent(stack, "owing"),
            # A capped tenant's line: `ahead` ends while first; `behind` sends at the sweep.
            *[
                task(
                    name,
                    sharding={"strategy": "static", "shards": [{"n": n} for n in range(3)]},
                    tenant="globex",
                )
                for name in ("ahead", "behind")
            ],
        ],
        admin.tasks,
        now=T0,
        quotas={"globex": TenantQuotas(max_concurrent_shards=1)},
    )
    runs = {name: run_now(name, admin)[0] for name in ("last", "requeue", "late", "reducer")}
    runs.update({name: run_now(name, admin)[0] for name in ("zero", "owing", "ahead", "behind")})
    cancel_instance(runs["ahead"].instance_id, admin)
    for name in ("late", "owing"):
        _queue_follower(admin, name, runs[name].business_date)
    _lease(admin, runs["last"].instance_id, max_attempts=1)
    _lease(admin, runs["requeue"].instance_id)
    stuck = support_instance("stuck", T0)
    assert admin.instances.claim_instance(stuck) is None
    _succeed(admin, _lease(admin, runs["reducer"].instance_id))
    assert admin.instances.start_reduce(runs["reducer"].instance_id, now=T0, until=T0)
    _succeed(admin, _lease(admin, runs["zero"].instance_id))
    owing = runs["owing"]
    assert admin.instances.end_instance(
        owing.instance_id,
        status=InstanceStatus.TIMED_OUT,
        reason="instance_timeout",
        finished_at=T0,
        owed=decide_follow_ups(owing, alert=True),
    )
    alert_log = DynamoDBAlertLog(
        stack.admin_clients.dynamodb(),
        stack.deployment.tables["Table"],
        buckets=stack.settings("ApiFunction").index_buckets,
    )
    alert_log.record(
        Alert(
            type="shard_dead_lettered",
            severity="high",
            task_id="zero",
            tenant=None,
            instance_id=runs["zero"].instance_id,
            status="failed",
            alert_id="pending-alert",
            raised_at=T0,
        )
    )
    stack.clock.advance(timedelta(minutes=2))

    recorder = Recorder()
    app = load_app(monkeypatch, "sweeper", stack.traced("SweeperFunction", recorder))
    report = app.lambda_handler({"detail": {}}, FakeLambdaContext("sweeper", 60))

    assert report["timed_out_shards"] and report["requeued_shards"], report
    assert runs["late"].instance_id in report["timed_out_instances"], report
    assert {stuck.instance_id, runs["reducer"].instance_id} <= set(report["resumed"]), report
    assert runs["zero"].instance_id in report["finalized"], report
    assert owing.instance_id in report["followed_up"], report
    assert "pending-alert" in report["republished_alerts"], report
    assert runs["behind"].instance_id in report["resumed"], report
    behind = admin.instances.get_instance(runs["behind"].instance_id)
    assert behind is not None and behind.sent == 2
    stack.check("SweeperFunction", recorder)


# --------------------------------------------------------------------------- the dispatcher


def test_dispatcher_role_allows_what_it_calls(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ticks through the function: one with many due tasks (pages of batched claims, catch-up
    with dropped slots alerted, `groups` planned), one with few (one by one: a serial task
    queued behind its open instance, a submission started), and a page with the serial task."""
    admin = stack.admin
    stack.seed_groups()
    every_minute = {"rate": "1m"}
    plain = [task(f"p{n}", trigger=every_minute) for n in range(10)]
    apply_tasks(
        [
            *plain,
            # counted on its tenant's minute before its send (max_instances_per_minute)
            task("rated", trigger=every_minute, tenant="acme"),
            task("groups", trigger=every_minute, sharding={"strategy": "groups"}),
            task("serial", trigger=every_minute, blocking={"policy": "serial", "max_queued": 5}),
            task(
                "catchup",
                trigger=every_minute,
                misfire={"policy": "catch_up", "max_catch_up": 2, "grace_s": 0},
            ),
        ],
        admin.tasks,
        now=T0,
        quotas={"acme": TenantQuotas(max_instances_per_minute=100)},
    )
    submitted = submit("p0", admin, at=T0 + timedelta(minutes=5))

    recorder = Recorder()
    ticker = Recorder()
    app = load_app(monkeypatch, "dispatcher", stack.traced("DispatcherFunction", recorder))
    holds = bootstrap.dispatch_queue(
        stack.settings("DispatcherFunction"), recorder.clients(stack.endpoint_url)
    )
    sends = bootstrap.dispatch_queue(
        stack.settings("TickFunction"), ticker.clients(stack.endpoint_url)
    )
    buckets = stack.settings("TickFunction").index_buckets
    url = stack.deployment.queues["DispatchQueue"]

    def tick(minutes: int) -> dict[str, Any]:
        """The tick function's fan-out, then every message through the bucket dispatcher;
        the buckets' reports added up."""
        stack.clock.set(T0 + timedelta(minutes=minutes))
        event = {"time": f"{stack.clock.now():%Y-%m-%dT%H:%M:%SZ}", "detail": {}}
        send_tick(parse_iso(EventBridgeEvent(event).time), sends, buckets=buckets)
        messages = stack.receive("DispatchQueue")
        assert len(messages) == buckets
        done = dispatch_messages(
            [
                DispatchMessage(r.message_id, r.receipt_handle, r.body)
                for r in SQSEvent(sqs_event(messages, url)).records
            ],
            app.container.wiring(),
            holds,
            remaining_ms=60_000,
            request_id=f"r{minutes}",
        )
        answer = done.answer(reports=True)
        merged: dict[str, Any] = {"due_tasks": 0, "claimed": [], "skipped": [], "queued": []}
        merged["failed"] = [f["itemIdentifier"] for f in answer["batchItemFailures"]]
        merged["verdicts"] = [r["verdict"] for r in answer["reports"].values()]
        for result in answer["reports"].values():
            report = result["report"] or {}
            merged["due_tasks"] += report.get("due_tasks", 0)
            for key in ("claimed", "skipped", "queued"):
                merged[key] += report.get(key, [])
        return merged

    first = tick(4)  # 13 due
    assert first["due_tasks"] >= 10 and not first["failed"], first
    # 12:01-12:03 missed: two caught up, one dropped (alerted); 12:04 on time
    assert sum(i.startswith("catchup@") for i in first["claimed"]) == 3, first
    assert sum(i.startswith("catchup@") for i in first["skipped"]) == 1, first
    assert any(i.startswith("groups@") for i in first["claimed"]), first
    for n in range(2, 10):
        assert admin.tasks.set_paused(f"p{n}", paused=True)
    # A dispatch of an earlier instant than 12:05 (yet after 12:04, done) holds the bucket of
    # a task due at 12:05 (not the serial task's, nor the submission's): its message waits
    # (visibility moved).
    others = {bucket_of("serial", buckets), bucket_of(submitted.instance_id, buckets)}
    held = next(
        bucket_of(t, buckets)
        for t in ("p0", "p1", "catchup", "groups")
        if bucket_of(t, buckets) not in others
    )
    assert admin.tasks.take_tick(
        held,
        T0 + timedelta(minutes=4, seconds=30),
        owner="elsewhere",
        now=stack.clock.now(),
        until=stack.clock.now() + timedelta(minutes=30),
    ).taken
    second = tick(5)
    assert second["verdicts"].count("wait") == 1 and len(second["failed"]) == 1, second
    assert any(i.startswith("serial@") for i in second["queued"]), second
    started = admin.instances.get_instance(submitted.instance_id)
    assert started is not None and started.status is not InstanceStatus.SCHEDULED
    # The serial task queued from a page too (the function takes pages from 10 due tasks).
    third = dispatch_tick(T0 + timedelta(minutes=6), app.container.wiring(), batch_from=1)
    assert any(i.startswith("serial@") for i in third.queued), third
    stack.check("DispatcherFunction", recorder)
    stack.check("TickFunction", ticker)


# --------------------------------------------------------------------------- the worker


def test_worker_role_allows_what_it_calls(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    """Worker invocations through the function: a batch with effects (ctx.once with writes to
    both tables), a retry (ChangeMessageVisibility), a last failure that finalizes with an
    alert, an instance that ends and starts its queued follower and its dependent, then the
    reduce they started, then a batch that runs out of time and gives records back."""
    admin = stack.admin
    stack.seed_groups()
    devices = stack.deployment.tables["DeviceTable"]
    recorder = Recorder()

    def effects(ctx: ShardContext) -> dict[str, Any]:
        counter = {
            "Update": {
                "TableName": devices,
                "Key": {"pk": {"S": "COUNTER"}, "sk": {"S": "effects"}},
                "UpdateExpression": "ADD n :one",
                "ExpressionAttributeValues": {":one": {"N": "1"}},
            }
        }
        assert ctx.once(f"effect#{ctx.shard}", writes=[counter])
        return {"shard": ctx.shard}

    def merge(ctx: ShardContext) -> dict[str, Any]:
        return {"shards": len(ctx.partials())}

    def fails(ctx: ShardContext) -> None:
        for n in range(100):  # more than the record keeps: the log object is written
            ctx.log(f"trying {n}")
        raise RuntimeError("this handler fails")

    mark = [0]

    def slow(ctx: ShardContext) -> None:
        """Runs until the batch has given the records after it back (a send since `mark`)."""
        wait_for(
            lambda: any(
                c[0] == "sqs" and c[1].startswith("Send") for c in recorder.calls[mark[0] :]
            ),
            "the batch gives its unstarted records back",
        )

    handlers = {"effects": effects, "merge": merge, "fails": fails, "slow": slow}
    apply_tasks(
        [
            task(
                "effects",
                handler="effects",
                reduce="merge",
                sharding={"strategy": "static", "shards": [{"n": 0}, {"n": 1}]},
                tenant="acme",  # its shards hold the tenant's in-flight slots
            ),
            *_with_follower_and_dependent(stack, "chain"),
            task("flaky", handler="fails", retry={"max_attempts": 2, "backoff_s": 60}),
            task("doomed", handler="fails", retry={"max_attempts": 1, "backoff_s": 0}),
            task(
                "slow",
                handler="slow",
                sharding={"strategy": "static", "shards": [{"n": n} for n in range(3)]},
            ),
            # Its sends follow the cap: a window (two), the last shard by the worker's refill,
            # which takes the instance out of its tenant's line.
            task(
                "paced",
                sharding={"strategy": "static", "shards": [{"n": n} for n in range(3)]},
                tenant="globex",
            ),
        ],
        admin.tasks,
        now=T0,
        quotas={
            "acme": TenantQuotas(max_concurrent_shards=5),
            "globex": TenantQuotas(max_concurrent_shards=1),
        },
    )
    runs = {name: run_now(name, admin)[0] for name in ("effects", "chain", "flaky", "doomed")}
    assert runs["effects"].tenant_cap == 5
    _queue_follower(admin, "chain", runs["chain"].business_date)

    app = load_app(monkeypatch, "worker", stack.traced("WorkerFunction", recorder, handlers))
    queue_url = stack.deployment.queues["ShardQueue"]

    def invoke(timeout_s: float = 300) -> dict[str, Any]:
        messages = stack.receive()
        assert messages
        event = sqs_event(messages, queue_url)
        answer: dict[str, Any] = app.lambda_handler(event, FakeLambdaContext("worker", timeout_s))  # type: ignore[arg-type]
        return answer

    first = invoke()
    assert len(first["batchItemFailures"]) == 1, first  # flaky, back after its backoff

    def status(name: str) -> InstanceStatus:
        found = admin.instances.get_instance(runs[name].instance_id)
        assert found is not None
        return found.status

    assert status("effects") is InstanceStatus.REDUCING
    assert status("chain") is InstanceStatus.SUCCEEDED
    assert status("doomed") is InstanceStatus.FAILED
    assert admin.instances.instances_for_date("chain-child", runs["chain"].business_date)

    second = invoke()  # the reduce, the follower's shard, the dependent's shards
    assert not second["batchItemFailures"], second
    assert status("effects") is InstanceStatus.SUCCEEDED

    runs["paced"] = run_now("paced", admin)[0]
    assert not invoke()["batchItemFailures"]  # its window; the commit sends the last shard
    assert not invoke()["batchItemFailures"]
    assert status("paced") is InstanceStatus.SUCCEEDED
    assert admin.instances.tenant_line_head("globex") is None

    run_now("slow", admin)
    mark[0] = len(recorder.calls)
    given = invoke(timeout_s=ShardBatch.COMMIT_ALLOWANCE_S + 0.5)
    assert not given["batchItemFailures"], given
    assert len(stack.receive()) == 2  # the copies of the two records not started
    doomed = admin.instances.get_shard(runs["doomed"].instance_id, 0)
    assert doomed is not None
    (attempt,) = doomed.attempts
    assert attempt.log is not None and attempt.log.object_key is not None  # the PutObject
    stack.check("WorkerFunction", recorder)


# --------------------------------------------------------------------------- the management API


def test_api_function_role_allows_what_it_calls(stack: Stack) -> None:
    """Every route of docs/openapi.json, through the resolver the function serves: tasks
    applied, read, paused, resumed, run (a `groups` plan), submitted, backfilled; instances
    listed by task and by status, read, their shards listed, one cancelled (its queued
    follower starts), one rerun; alerts; the overview (with every queue's depth); a task's versions, a rollback, the audit records; a
    task deleted."""
    import json

    stack.seed_groups()
    recorder = Recorder()
    services = stack.traced("ApiFunction", recorder)
    # The caller, as the function maps it: the signing role's or user's tags.
    iam = stack.admin_clients._client("iam")
    trust = '{"Version": "2012-10-17", "Statement": []}'
    iam.create_role(
        RoleName="grants-operator",
        AssumeRolePolicyDocument=trust,
        Tags=[{"Key": "iotsched:operator", "Value": "true"}],
    )
    iam.create_user(UserName="grants-acme", Tags=[{"Key": "iotsched:tenants", "Value": "acme"}])
    tags = IamTags(recorder.clients(stack.endpoint_url)._client("iam"))
    app = create_app(lambda: services, identify=IamIdentity(tags, monotonic=time.monotonic))
    operator = f"arn:aws:sts::{ACCOUNT}:assumed-role/grants-operator/s"
    called: set[tuple[str, str]] = set()

    def call(
        method: str, route: str, path: str, body: Any = None, arn: str = operator, **query: str
    ) -> Any:
        event = rest_event(method, path, body=body, query=query or None)
        event["requestContext"]["identity"]["userArn"] = arn
        response = app.resolve(event, None)
        assert 200 <= int(response["statusCode"]) < 300, (method, path, response.get("body"))
        called.add((method, route))
        return json.loads(response["body"]) if response.get("body") else None

    scan = {"id": "scan", "handler": "noop", "trigger": {"rate": "1h"}}
    serial = {
        "id": "serial",
        "handler": "noop",
        "trigger": {"rate": "1h"},
        "blocking": {"policy": "serial", "max_queued": 1},
    }
    groups = {
        "id": "groups",
        "handler": "noop",
        "trigger": {"rate": "1h"},
        "sharding": {"strategy": "groups", "tenant": "acme"},
        "tenant": "acme",
    }

    # A shard whose log is an object in the data bucket, written by a worker.
    def chatty(ctx: ShardContext) -> None:
        for n in range(100):
            ctx.log(f"line {n}")

    worker = stack.traced("WorkerFunction", Recorder(), {"chatty": chatty})
    apply_tasks([task("chatty", handler="chatty")], stack.admin.tasks, now=T0)
    chatty_run = run_now("chatty", stack.admin)[0].instance_id
    (message,) = stack.receive()
    run_shard(Delivery(message["Body"], message["ReceiptHandle"], 1), worker, worker="w")

    call("PUT", "/tasks/{task_id}", "/tasks/scan", scan)
    holidays = {"name": "holidays", "dates": ["2026-12-25"]}
    # A tenant's quotas: its item, its task count, and its tasks stamped.
    limits = {"max_tasks": 10, "max_concurrent_shards": 2, "max_instances_per_minute": 100}
    quotas = {"name": "acme", "quotas": limits}
    body = {"calendars": [holidays], "tenants": [quotas], "tasks": [serial, groups]}
    call("POST", "/tasks", "/tasks", body)
    call("GET", "/calendars", "/calendars")
    call("GET", "/handlers", "/handlers")  # the installed code: no AWS call
    call("GET", "/handlers/{name}", "/handlers/noop")
    call("GET", "/tenants", "/tenants")
    call("GET", "/tasks", "/tasks")
    call("GET", "/tasks/{task_id}", "/tasks/scan")
    call("POST", "/tasks/{task_id}/pause", "/tasks/scan/pause")
    call("POST", "/tasks/{task_id}/resume", "/tasks/scan/resume")
    run = call("POST", "/tasks/{task_id}/runs", "/tasks/groups/runs", {})
    call("POST", "/tasks/{task_id}/submissions", "/tasks/scan/submissions", {"delay": "2h"})
    call(
        "POST",
        "/tasks/{task_id}/backfills",
        "/tasks/scan/backfills",
        {"from": "2026-11-20", "to": "2026-11-21"},
    )
    first = call("POST", "/tasks/{task_id}/runs", "/tasks/serial/runs", {})
    call(
        "POST",
        "/tasks/{task_id}/runs",
        "/tasks/serial/runs",
        {"business_date": "2026-11-01", "request_id": "next"},
    )
    instance_id = first["instance"]["instance_id"]
    call("GET", "/instances", "/instances", task_id="serial")
    call("GET", "/instances", "/instances", status="queued")
    call("GET", "/instances/{instance_id}", f"/instances/{instance_id}")
    call("GET", "/instances/{instance_id}/shards", f"/instances/{instance_id}/shards")
    call("POST", "/instances/{instance_id}/cancel", f"/instances/{instance_id}/cancel", {})
    call("POST", "/instances/{instance_id}/rerun", f"/instances/{instance_id}/rerun", {})
    call("GET", "/alerts", "/alerts")
    logs = call(
        "GET",
        "/instances/{instance_id}/shards/{shard}/logs",
        f"/instances/{chatty_run}/shards/0/logs",
    )
    assert logs["source"] == "object" and len(logs["lines"]) == 100  # the GetObject
    overview = call("GET", "/overview", "/overview", hours="168")
    assert [q["queue"] for q in overview["queues"]] == ["high", "normal", "low", "dead_letter"]
    # A tenant's reads and actions check the task or instance first (reads it already has).
    acme = f"arn:aws:iam::{ACCOUNT}:user/grants-acme"
    call("GET", "/tasks", "/tasks", arn=acme)
    call("GET", "/instances", "/instances", arn=acme, status="queued")
    call("POST", "/tasks/{task_id}/pause", "/tasks/groups/pause", arn=acme)
    acme_run = run["instance"]["instance_id"]
    call("POST", "/instances/{instance_id}/cancel", f"/instances/{acme_run}/cancel", {}, arn=acme)
    call("PUT", "/tasks/{task_id}", "/tasks/scan", {**scan, "description": "v2"})
    call("GET", "/tasks/{task_id}/versions", "/tasks/scan/versions")
    call("POST", "/tasks/{task_id}/rollback", "/tasks/scan/rollback", {"to": 1})
    call("GET", "/audit", "/audit", task="scan")
    call("GET", "/audit", "/audit")
    call("DELETE", "/tasks/{task_id}", "/tasks/scan", force="true")

    document = json.loads((ROOT / "docs" / "openapi.json").read_text(encoding="utf-8"))
    routes = {(m.upper(), p) for p, ops in document["paths"].items() for m in ops}
    assert called == routes, routes - called
    assert run["instance"]["instance_id"]
    queued = services.instances.list_instances(task_id="serial")
    assert all(i.status is not InstanceStatus.QUEUED for i in queued)
    stack.check("ApiFunction", recorder)
