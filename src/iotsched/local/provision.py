"""Create the template's tables, queues and topics in the emulator, from the template itself.

The runtime reads the template (`iotsched.local.template`) and makes the calls itself; its
pollers read the event sources from the same template. docs/design.md, section 18, says why not
through CloudFormation.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from iotsched.adapters.aws import AwsClients
from iotsched.local.template import ACCOUNT, Function, Template

REGION = "us-east-1"
ALERT_INBOX = "local-alert-inbox"
ALERT_TOPIC = "AlertTopic"  # the alert topic's logical id in template.yaml


@dataclass
class Deployment:
    """Physical names of what was provisioned, by logical id."""

    stack: str
    tables: dict[str, str] = field(default_factory=dict)
    queues: dict[str, str] = field(default_factory=dict)  # logical id -> URL
    topics: dict[str, str] = field(default_factory=dict)  # logical id -> ARN
    buckets: dict[str, str] = field(default_factory=dict)  # logical id -> bucket name
    topic_inboxes: dict[str, str] = field(default_factory=dict)  # topic logical id -> queue URL
    functions: dict[str, Function] = field(default_factory=dict)
    alert_inbox_url: str | None = None

    def physical(self, logical_id: str, attribute: str | None) -> str:
        """Resolve `!Ref X` / `!GetAtt X.Attr` to this deployment's names."""
        if logical_id in self.tables:
            name = self.tables[logical_id]
            return f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{name}" if attribute else name
        if logical_id in self.queues:
            url = self.queues[logical_id]
            name = url.rstrip("/").rsplit("/", 1)[-1]
            return {
                None: url,
                "QueueUrl": url,
                "QueueName": name,
                "Arn": f"arn:aws:sqs:{REGION}:{ACCOUNT}:{name}",
            }[attribute]
        if logical_id in self.topics:
            arn = self.topics[logical_id]
            return arn.rsplit(":", 1)[-1] if attribute == "TopicName" else arn
        if logical_id in self.buckets:
            name = self.buckets[logical_id]
            return f"arn:aws:s3:::{name}" if attribute == "Arn" else name
        name = f"{self.stack}-{logical_id}"
        return f"arn:aws:local:{REGION}:{ACCOUNT}:{name}" if attribute == "Arn" else name

    def queue_url(self, arn_or_url: str) -> str:
        """The URL of a provisioned queue named by its ARN (event sources name ARNs)."""
        for lid, url in self.queues.items():
            if arn_or_url in (url, self.physical(lid, "Arn")):
                return url
        raise KeyError(f"no provisioned queue {arn_or_url!r}")


def provision(template: Template, clients: AwsClients, *, stack: str) -> Deployment:
    """Create every table, queue and topic of `template`; idempotent for an empty emulator."""
    deployment = Deployment(stack=stack)
    ddb = clients.dynamodb()
    for lid, res in template.resources("AWS::DynamoDB::Table").items():
        props = res.get("Properties") or {}
        name = str(props.get("TableName") or f"{stack}-{lid}")
        kwargs: dict[str, Any] = {
            "TableName": name,
            "AttributeDefinitions": props["AttributeDefinitions"],
            "KeySchema": props["KeySchema"],
            "BillingMode": props.get("BillingMode", "PAY_PER_REQUEST"),
        }
        if props.get("GlobalSecondaryIndexes"):
            kwargs["GlobalSecondaryIndexes"] = props["GlobalSecondaryIndexes"]
        ddb.create_table(**kwargs)
        ttl = props.get("TimeToLiveSpecification")
        if ttl:
            ddb.update_time_to_live(TableName=name, TimeToLiveSpecification=ttl)
        deployment.tables[lid] = name

    sqs = clients.sqs()
    queues = template.resources("AWS::SQS::Queue")
    for lid, res in queues.items():  # create all first: redrive policies reference each other
        name = str((res.get("Properties") or {}).get("QueueName") or f"{stack}-{lid}")
        deployment.queues[lid] = sqs.create_queue(QueueName=name)["QueueUrl"]
    for lid, res in queues.items():
        props = template.resolve(res.get("Properties") or {}, deployment.physical)
        attributes: dict[str, str] = {}
        for key in ("VisibilityTimeout", "MessageRetentionPeriod", "DelaySeconds"):
            if props.get(key) is not None:
                attributes[key] = str(props[key])
        if props.get("RedrivePolicy"):
            policy = props["RedrivePolicy"]
            attributes["RedrivePolicy"] = json.dumps(
                {
                    "deadLetterTargetArn": policy["deadLetterTargetArn"],
                    "maxReceiveCount": int(policy["maxReceiveCount"]),
                }
            )
        if attributes:
            sqs.set_queue_attributes(QueueUrl=deployment.queues[lid], Attributes=attributes)  # type: ignore[arg-type]

    sns = clients.sns()
    for lid, res in template.resources("AWS::SNS::Topic").items():
        name = str((res.get("Properties") or {}).get("TopicName") or f"{stack}-{lid}")
        deployment.topics[lid] = sns.create_topic(Name=name)["TopicArn"]

    # The Alert Microservice stands outside the stack; locally an inbox queue subscribes to the
    # alert topic so `iotsched alerts` and the demo can read what was published. Every other
    # topic (plan expiry notices) gets an inbox of its own, for the demo and the tests.
    for lid, arn in deployment.topics.items():
        name = f"{stack}-{ALERT_INBOX}" if lid == ALERT_TOPIC else f"{stack}-{lid}-inbox"
        inbox = sqs.create_queue(QueueName=name)["QueueUrl"]
        sns.subscribe(
            TopicArn=arn, Protocol="sqs", Endpoint=f"arn:aws:sqs:{REGION}:{ACCOUNT}:{name}"
        )
        if lid == ALERT_TOPIC:
            deployment.alert_inbox_url = inbox
        else:
            deployment.topic_inboxes[lid] = inbox

    # Buckets: lower-case names; versioning, public access block and default encryption as the
    # template declares them (the emulator accepts the key id without enforcing it).
    s3 = clients.s3()
    for lid, res in template.resources("AWS::S3::Bucket").items():
        props = res.get("Properties") or {}
        name = str(props.get("BucketName") or f"{stack}-{lid}").lower()
        s3.create_bucket(Bucket=name)
        deployment.buckets[lid] = name
        if props.get("PublicAccessBlockConfiguration"):
            s3.put_public_access_block(
                Bucket=name,
                PublicAccessBlockConfiguration=props["PublicAccessBlockConfiguration"],
            )
        if (props.get("VersioningConfiguration") or {}).get("Status") == "Enabled":
            s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
        if props.get("BucketEncryption"):
            s3.put_bucket_encryption(
                Bucket=name,
                ServerSideEncryptionConfiguration={
                    "Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "aws:kms"}}]
                },
            )

    deployment.functions = template.functions(deployment.physical)
    events = clients.events()
    for fn in deployment.functions.values():
        for event_name, schedule in fn.schedules.items():
            events.put_rule(
                Name=f"{stack}-{fn.logical_id}-{event_name}", ScheduleExpression=schedule
            )
    return deployment
