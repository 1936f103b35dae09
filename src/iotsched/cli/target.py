"""Which deployment a command talks to: flags, then the environment, then the stack."""

from __future__ import annotations

from dataclasses import dataclass

from botocore.exceptions import BotoCoreError, ClientError

from iotsched.adapters.aws import AwsClients
from iotsched.settings import Settings, SettingsError

LOCAL_ACCOUNT = "123456789012"


class TargetError(Exception):
    """The deployment cannot be found."""


@dataclass(frozen=True)
class Target:
    """Where to send requests: an endpoint (moto, LocalStack) or AWS, a region, a stack."""

    endpoint_url: str | None
    region: str
    stack: str

    def settings(self) -> Settings:
        """Settings for this target.

        Order: IOTSCHED_* environment variables; the CloudFormation stack's outputs; for an
        emulator endpoint, the names `iotsched local up` gives (`<stack>-Table`, ...).
        """
        try:
            return Settings.from_env().with_endpoint(self.endpoint_url)
        except SettingsError:
            pass
        clients = AwsClients(region=self.region, endpoint_url=self.endpoint_url)
        try:
            stacks = clients.cloudformation().describe_stacks(StackName=self.stack)["Stacks"]
            outputs = {o["OutputKey"]: o["OutputValue"] for o in stacks[0].get("Outputs", [])}
            return Settings(
                table=outputs["TableName"],
                shard_queue_url=outputs["ShardQueueUrl"],
                alert_topic_arn=outputs["AlertTopicArn"],
                region=self.region,
                endpoint_url=self.endpoint_url,
                worker_id="cli",
            )
        except (ClientError, BotoCoreError, KeyError, IndexError) as exc:
            if self.endpoint_url is None:
                raise TargetError(
                    f"stack {self.stack!r} not found in {self.region} ({exc}); "
                    "pass --endpoint-url for a local runtime or --stack for a deployment"
                ) from exc
        try:
            queue_url = clients.sqs().get_queue_url(QueueName=f"{self.stack}-ShardQueue")[
                "QueueUrl"
            ]
        except (ClientError, BotoCoreError) as exc:
            raise TargetError(
                f"no iotsched deployment at {self.endpoint_url} (is `iotsched local up` running?)"
            ) from exc
        return Settings(
            table=f"{self.stack}-Table",
            shard_queue_url=queue_url,
            alert_topic_arn=f"arn:aws:sns:{self.region}:{LOCAL_ACCOUNT}:{self.stack}-AlertTopic",
            region=self.region,
            endpoint_url=self.endpoint_url,
            worker_id="cli",
        )
