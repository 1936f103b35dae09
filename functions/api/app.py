"""Management API Lambda: API Gateway (REST, IAM-authorized) proxy events to the resolver.

The routes live in `iotsched.api` (shared with the local runtime); this shell builds the
services once per container, on the first request, and logs with the request id as the
correlation id.
"""

from __future__ import annotations

import functools
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext

from iotsched.api import create_app
from iotsched.bootstrap import build
from iotsched.services import Services
from iotsched.settings import Settings

# Service `iotsched` (POWERTOOLS_SERVICE_NAME): this is the `iotsched` logger, so what the app
# and the use-cases log through `logging.getLogger(__name__)` comes out here, with the request id.
logger = Logger()


@functools.cache
def services() -> Services:
    """Built on the first request, reused while the container is warm."""
    return build(Settings.from_env())


app = create_app(services)


@logger.inject_lambda_context(
    correlation_id_path=correlation_paths.API_GATEWAY_REST, clear_state=True
)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Entry point (Handler: app.lambda_handler)."""
    response: dict[str, Any] = app.resolve(event, context)
    return response
