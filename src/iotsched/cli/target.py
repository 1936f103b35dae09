"""Which deployment a command talks to: flags, then the environment, then the stack.

Every way of not finding it has its own message, naming what is missing: no region, no
credentials, an endpoint that does not answer, no stack, a stack without iotsched's outputs, an
emulator without iotsched's resources.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit

import boto3
from botocore.config import Config
from botocore.credentials import EnvProvider
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    HTTPClientError,
    NoCredentialsError,
)
from botocore.exceptions import (
    ConnectionError as BotoConnectionError,
)

from iotsched.adapters.aws import AwsClients
from iotsched.settings import (
    Settings,
    SettingsError,
    TableSettings,
    check_index_buckets,
    index_buckets_from_env,
    region_from_env,
)

LOCAL_ACCOUNT = "123456789012"
#: What an emulator is signed with when the environment names no keys (it checks none).
EMULATOR_CREDENTIALS = ("testing", "testing")
#: Hosts of AWS's own endpoints: anything else given as --endpoint-url is an emulator.
AWS_HOST_SUFFIXES = (".amazonaws.com", ".amazonaws.com.cn", ".api.aws")
_OUTPUTS = ("TableName", "ShardQueueUrl", "AlertTopicArn")
# Finding the deployment retries little: an endpoint that does not answer is reported in a
# second or two, not after the ten attempts the scheduler's own calls make.
_DISCOVERY_CONFIG = Config(
    retries={"mode": "standard", "total_max_attempts": 2}, connect_timeout=3, read_timeout=15
)
_NO_CREDENTIALS = (
    "no AWS credentials found: set AWS_PROFILE (a profile from `aws configure`), or "
    "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY; for the local runtime, set "
    "AWS_ENDPOINT_URL=http://127.0.0.1:5000 (or pass --endpoint-url)"
)
_NO_REGION = (
    "no AWS region: pass --region or set AWS_REGION (or give your AWS profile a region); "
    "for the local runtime, set AWS_ENDPOINT_URL=http://127.0.0.1:5000 (or pass --endpoint-url)"
)


class TargetError(Exception):
    """The deployment cannot be found."""


def is_emulator(endpoint_url: str | None) -> bool:
    """True for an endpoint that is not AWS's own (moto, LocalStack, ... on any host)."""
    if not endpoint_url:
        return False
    host = (urlsplit(endpoint_url).hostname or "").lower()
    return not host.endswith(AWS_HOST_SUFFIXES)


@dataclass(frozen=True)
class Target:
    """Where to send requests: an endpoint (moto, LocalStack) or AWS, a region, a stack.

    `region` None means the AWS configuration's (AWS_DEFAULT_REGION, the profile's), and for an
    emulator AWS_DEFAULT_REGION or us-east-1 (where `iotsched local up` provisions).
    """

    endpoint_url: str | None
    region: str | None
    stack: str
    #: The management API the verbs that can go through it use (`--api-url`): see `cli.api`.
    api_url: str | None = None

    @property
    def emulated(self) -> bool:
        """Whether the endpoint is an emulator (which needs no real credentials)."""
        return is_emulator(self.endpoint_url)

    def session(self) -> boto3.session.Session:
        """A session with a region and credentials, or a TargetError naming the missing one.

        An emulator accepts any signature: it gets the environment's keys if set (LocalStack
        reads an account from them), else dummy ones, and never a profile's (which may be an
        expired SSO login). AWS gets botocore's chain (environment, profile, role).
        """
        if self.emulated:
            found = EnvProvider().load()
            key, secret = (
                (found.access_key, found.secret_key) if found is not None else EMULATOR_CREDENTIALS
            )
            return boto3.session.Session(
                aws_access_key_id=key,
                aws_secret_access_key=secret,
                aws_session_token=found.token if found is not None else None,
                region_name=self.region or region_from_env(),
            )
        try:
            session = boto3.session.Session(region_name=self.region)
            if not session.region_name:
                raise TargetError(_NO_REGION)
            credentials = session.get_credentials()
        except BotoCoreError as exc:  # an unknown profile, an expired SSO login, ...
            raise TargetError(f"AWS credentials could not be loaded: {exc}") from None
        if credentials is None:
            raise TargetError(_NO_CREDENTIALS)
        return session

    def connect(self) -> tuple[Settings, AwsClients]:
        """Settings and clients for this target.

        Order: IOTSCHED_* environment variables; the CloudFormation stack's outputs; for an
        emulator endpoint, the names `iotsched local up` gives (`<stack>-Table`, ...).
        """
        session = self.session()
        region = str(session.region_name)
        clients = AwsClients(region=region, endpoint_url=self.endpoint_url, session=session)
        try:
            settings = replace(Settings.from_env().with_endpoint(self.endpoint_url), region=region)
        except SettingsError:
            settings = self._discover(session, region)
        return settings, clients

    def connect_table(self) -> tuple[TableSettings, AwsClients]:
        """Where the table is, and clients for this target: what the stores alone need.

        Found as `connect` finds it, but without the queues: for an emulator without a stack,
        the table `iotsched local up` names (`<stack>-Table`) is looked up instead of its
        shard queue, so no SQS client is made.
        """
        session = self.session()
        region = str(session.region_name)
        clients = AwsClients(region=region, endpoint_url=self.endpoint_url, session=session)
        try:
            settings = replace(Settings.from_env().with_endpoint(self.endpoint_url), region=region)
        except SettingsError:
            return self._discover_table(session, region), clients
        return settings.table_settings, clients

    def _where(self, region: str) -> str:
        return f"at {self.endpoint_url}" if self.endpoint_url else f"in {region}"

    def _call(self, client: Any, operation: str, region: str, **kwargs: Any) -> Any:
        """One discovery call; a transport or credential failure becomes a TargetError."""
        try:
            return getattr(client, operation)(**kwargs)
        except NoCredentialsError:
            raise TargetError(_NO_CREDENTIALS) from None
        except (BotoConnectionError, HTTPClientError) as exc:
            hint = " (is `iotsched local up` running?)" if self.emulated else ""
            raise TargetError(
                f"cannot reach the AWS endpoint {self._where(region)}: {exc}{hint}"
            ) from None

    def _stack_outputs(self, session: boto3.session.Session, region: str) -> dict[str, str] | None:
        """The iotsched stack's outputs, None when there is no such stack on an emulator (the
        local runtime's names then); a TargetError for any other way of not finding it."""
        cloudformation = session.client(
            "cloudformation", endpoint_url=self.endpoint_url, config=_DISCOVERY_CONFIG
        )
        stacks: list[Any] = []
        try:
            stacks = self._call(cloudformation, "describe_stacks", region, StackName=self.stack)[
                "Stacks"
            ]
        except ClientError as exc:
            error = exc.response.get("Error", {})
            missing = "does not exist" in str(error.get("Message", ""))
            if not missing and not self.emulated:
                # Denied, an invalid or expired token, ...: AWS's own words name it.
                raise TargetError(
                    f"cannot read stack {self.stack!r} in {region}: {error.get('Code')}: "
                    f"{error.get('Message')}"
                ) from None
        if stacks:
            outputs = {o["OutputKey"]: o["OutputValue"] for o in stacks[0].get("Outputs", [])}
            absent = [name for name in _OUTPUTS if name not in outputs]
            if absent:
                raise TargetError(
                    f"stack {self.stack!r} {self._where(region)} has no output "
                    f"{', '.join(absent)}: is it an iotsched stack? (--stack names it)"
                )
            return outputs
        if not self.emulated:
            raise TargetError(
                f"no stack {self.stack!r} in {region}: deploy it (`sam deploy`), or name "
                "yours with --stack and --region; for the local runtime, set "
                "AWS_ENDPOINT_URL=http://127.0.0.1:5000 (or pass --endpoint-url)"
            )
        return None

    def _discover_table(self, session: boto3.session.Session, region: str) -> TableSettings:
        outputs = self._stack_outputs(session, region)
        if outputs is not None:
            return TableSettings(
                table=outputs["TableName"],
                region=region,
                endpoint_url=self.endpoint_url,
                index_buckets=self._stack_buckets(outputs, region),
            )
        table = f"{self.stack}-Table"
        dynamodb = session.client(
            "dynamodb", endpoint_url=self.endpoint_url, config=_DISCOVERY_CONFIG
        )
        try:
            self._call(dynamodb, "describe_table", region, TableName=table)
        except ClientError:
            raise TargetError(
                f"no iotsched deployment at {self.endpoint_url}: it answers, but has no stack "
                f"{self.stack!r} and no table {table!r} in {region}; is `iotsched local up` "
                "running on it, and are --stack and --region its own?"
            ) from None
        return TableSettings(
            table=table,
            region=region,
            endpoint_url=self.endpoint_url,
            index_buckets=self._env_buckets(),
        )

    def _discover(self, session: boto3.session.Session, region: str) -> Settings:
        outputs = self._stack_outputs(session, region)
        if outputs is not None:
            return Settings(
                table=outputs["TableName"],
                shard_queue_url=outputs["ShardQueueUrl"],
                # absent from a stack deployed before them: every priority on ShardQueue
                shard_queue_high_url=outputs.get("ShardHighQueueUrl"),
                shard_queue_low_url=outputs.get("ShardLowQueueUrl"),
                shard_dlq_url=outputs.get("ShardDLQUrl"),  # its depth: `iotsched overview`
                alert_topic_arn=outputs["AlertTopicArn"],
                region=region,
                endpoint_url=self.endpoint_url,
                worker_id="cli",
                index_buckets=self._stack_buckets(outputs, region),
                data_bucket=outputs.get("DataBucketName"),  # attempt logs (`iotsched logs`)
            )
        queue = f"{self.stack}-ShardQueue"
        sqs = session.client("sqs", endpoint_url=self.endpoint_url, config=_DISCOVERY_CONFIG)
        try:
            queue_url = self._call(sqs, "get_queue_url", region, QueueName=queue)["QueueUrl"]
        except ClientError:
            raise TargetError(
                f"no iotsched deployment at {self.endpoint_url}: it answers, but has no stack "
                f"{self.stack!r} and no queue {queue!r} in {region}; is `iotsched local up` "
                "running on it, and are --stack and --region its own?"
            ) from None
        by_priority = {
            suffix: self._optional_queue(sqs, region, f"{self.stack}-Shard{suffix}Queue")
            for suffix in ("High", "Low")
        }
        dlq = self._optional_queue(sqs, region, f"{self.stack}-ShardDLQ")
        # The local runtime's names; its bucket count is the template's IndexBuckets (the
        # default, or what `local up --param IndexBuckets=N` set: IOTSCHED_INDEX_BUCKETS=N then).
        return Settings(
            table=f"{self.stack}-Table",
            shard_queue_url=queue_url,
            shard_queue_high_url=by_priority["High"],
            shard_queue_low_url=by_priority["Low"],
            shard_dlq_url=dlq,
            alert_topic_arn=f"arn:aws:sns:{region}:{LOCAL_ACCOUNT}:{self.stack}-AlertTopic",
            region=region,
            endpoint_url=self.endpoint_url,
            worker_id="cli",
            index_buckets=self._env_buckets(),
            # The local runtime's name of the template's DataBucket (attempt logs).
            data_bucket=f"{self.stack}-DataBucket".lower(),
        )

    def _optional_queue(self, sqs: Any, region: str, name: str) -> str | None:
        """The URL of queue `name`, None where the deployment has none (one shard queue)."""
        try:
            url: str = self._call(sqs, "get_queue_url", region, QueueName=name)["QueueUrl"]
        except ClientError:
            return None
        return url

    def _stack_buckets(self, outputs: dict[str, str], region: str) -> int:
        """The stack's IndexBuckets output: the bucket count its functions write with."""
        value = outputs.get("IndexBuckets")
        if value is None:  # a stack deployed before the output existed: the environment's
            return self._env_buckets()
        try:
            return check_index_buckets(int(value))
        except (ValueError, SettingsError):
            raise TargetError(
                f"stack {self.stack!r} {self._where(region)} has an output IndexBuckets that is "
                f"not a bucket count: {value!r}"
            ) from None

    @staticmethod
    def _env_buckets() -> int:
        try:
            return index_buckets_from_env()
        except SettingsError as exc:
            raise TargetError(str(exc)) from None
