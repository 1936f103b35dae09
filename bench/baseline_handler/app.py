"""The cold-start baseline: a bare Powertools handler that imports boto3 (bench/coldstart.py)."""

from __future__ import annotations

from typing import Any

import boto3  # noqa: F401  (imported, as every AWS handler's module does)
from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.utilities.typing import LambdaContext

logger = Logger()
metrics = Metrics()


@metrics.log_metrics
@logger.inject_lambda_context
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Entry point (Handler: app.lambda_handler)."""
    return {}
