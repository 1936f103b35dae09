"""Management API Lambda: API Gateway (REST, IAM-authorized) proxy events to the resolver.

The routes live in `iotsched.api` (shared with the local runtime); this shell builds the
services once per container, on the first request, and logs with the request id as the
correlation id.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping
from typing import Any

import boto3
from aws_lambda_powertools import Logger, Tracer
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext

from iotsched.adapters.iam import IamTags
from iotsched.api.app import create_app
from iotsched.api.identity import Caller, IamIdentity
from iotsched.bootstrap import build
from iotsched.services.wiring import Wiring
from iotsched.settings import Settings

# Service `iotsched` (not POWERTOOLS_SERVICE_NAME, the stack's name): this is the `iotsched`
# logger, so what the app and the use-cases log through `logging.getLogger(__name__)` comes out
# here, with the request id.
logger = Logger(service="iotsched")
tracer = Tracer()  # X-Ray (Tracing: Active): each request's subsegment


@functools.cache
def services() -> Wiring:
    """Built on the first request, reused while the container is warm."""
    return build(Settings.from_env())


# Who calls: the IAM principal API Gateway vouches for, mapped to tenants by its tags (cached
# per container; docs/design.md, section 13).
@functools.cache
def _iam_identity() -> IamIdentity:
    return IamIdentity(IamTags(boto3.client("iam")), monotonic=time.monotonic)


def identify(event: Mapping[str, Any]) -> Caller:
    """The caller of `event` (the IAM client is built on the first request)."""
    return _iam_identity()(event)


app = create_app(services, identify=identify)


@logger.inject_lambda_context(
    correlation_id_path=correlation_paths.API_GATEWAY_REST, clear_state=True
)
@tracer.capture_lambda_handler(capture_response=False)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Entry point (Handler: app.lambda_handler)."""
    response: dict[str, Any] = app.resolve(event, context)
    return response
