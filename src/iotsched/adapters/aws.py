"""boto3 client factory: one place that sets endpoints, region and retry behaviour.

Retries use botocore's `standard` mode (exponential backoff with jitter on throttling and
transient errors, 10 attempts in all): a throttled conditional write is retried by botocore,
and because every write the scheduler makes is conditional or idempotent, a retry that follows
a write which did land is harmless.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import boto3
from botocore.config import Config

if TYPE_CHECKING:
    from mypy_boto3_cloudformation import CloudFormationClient
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_events import EventBridgeClient
    from mypy_boto3_sns import SNSClient
    from mypy_boto3_sqs import SQSClient

RETRY_CONFIG = Config(
    retries={"mode": "standard", "total_max_attempts": 10},
    connect_timeout=5,
    read_timeout=30,
    max_pool_connections=32,
)


#: Attempt log objects: a write that fails is recorded, never waited for long (the attempt's
#: lease and the invocation's time run meanwhile).
LOG_OBJECT_CONFIG = Config(
    retries={"mode": "standard", "total_max_attempts": 3},
    connect_timeout=2,
    read_timeout=5,
)


class AwsClients:
    """Lazily built, cached clients for one endpoint and region."""

    def __init__(
        self,
        *,
        region: str,
        endpoint_url: str | None = None,
        session: boto3.session.Session | None = None,
    ) -> None:
        """`session` carries credentials chosen by the caller (the CLI's for an emulator);
        without one, botocore's own chain finds them (Lambda's role, a profile)."""
        self.region = region
        self.endpoint_url = endpoint_url
        self._session = session or boto3.session.Session(region_name=region)
        self._cache: dict[str, Any] = {}

    def _client(self, service: str) -> Any:
        if service not in self._cache:
            self._cache[service] = self._session.client(
                service,  # type: ignore[call-overload]
                endpoint_url=self.endpoint_url,
                config=RETRY_CONFIG,
            )
        return self._cache[service]

    def dynamodb(self) -> DynamoDBClient:
        """The DynamoDB client."""
        client: DynamoDBClient = self._client("dynamodb")
        return client

    def sqs(self) -> SQSClient:
        """The SQS client."""
        client: SQSClient = self._client("sqs")
        return client

    def events(self) -> EventBridgeClient:
        """The EventBridge client (rules only; the local runtime does the firing)."""
        client: EventBridgeClient = self._client("events")
        return client

    def cloudformation(self) -> CloudFormationClient:
        """The CloudFormation client (stack outputs name the resources)."""
        client: CloudFormationClient = self._client("cloudformation")
        return client

    def sns(self) -> SNSClient:
        """The SNS client."""
        client: SNSClient = self._client("sns")
        return client

    def s3_logs(self) -> Any:
        """The S3 client of attempt log objects: few retries, short timeouts."""
        if "s3-logs" not in self._cache:
            self._cache["s3-logs"] = self._session.client(
                "s3", endpoint_url=self.endpoint_url, config=LOG_OBJECT_CONFIG
            )
        return self._cache["s3-logs"]

    def s3(self) -> Any:
        """The S3 client (reports and archives; typed loosely: no S3 stubs are installed)."""
        return self._client("s3")
