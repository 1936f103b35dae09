"""What the use-cases count, added to the invocation's EMF document (Powertools Metrics)."""

from __future__ import annotations

from collections.abc import Mapping

from aws_lambda_powertools import Metrics
from aws_lambda_powertools.metrics import MetricUnit


def add_counts(metrics: Metrics, counts: Mapping[str, int]) -> None:
    """Add each count (zeros too) to the invocation's document."""
    for name, value in counts.items():
        metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)
