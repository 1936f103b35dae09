"""Management API Lambda: API Gateway (REST, IAM-authorized) proxy events to the routes of
`iotsched.api` (shared with the local runtime), the caller being the IAM principal
(`iotsched.lambdas.api`); the request id is the logs' correlation id.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Tracer
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext

from iotsched.api.app import create_app
from iotsched.lambdas.api import ApiContainer

logger = Logger(service="iotsched")  # the package's logger: `iotsched.*` modules log through it
tracer = Tracer()  # X-Ray: each request's subsegment
container = ApiContainer()
app = create_app(container.wiring, identify=container.identify)


@logger.inject_lambda_context(
    correlation_id_path=correlation_paths.API_GATEWAY_REST, clear_state=True
)
@tracer.capture_lambda_handler(capture_response=False)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Entry point (Handler: app.lambda_handler)."""
    response: dict[str, Any] = app.resolve(event, context)
    return response
