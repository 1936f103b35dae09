"""The sweeper function's glue: its scheduled event into one sweep
(`iotsched.services.execution.sweeper_invocation`), its counts into the EMF document.

It sweeps at its clock's now. An event whose `detail` names `now` (ISO 8601) sweeps at that
instant instead: EventBridge's Scheduled Events have an empty detail, so only a replay sends it
(`iotsched local sweep --at`, on a runtime whose clock is manual).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from aws_lambda_powertools import Metrics

from iotsched.clock import ManualClock
from iotsched.core.timeutil import parse_iso
from iotsched.lambdas.container import Container
from iotsched.lambdas.emf import add_counts
from iotsched.services.execution.sweeper_invocation import run_sweeper


def sweep_on(event: dict[str, Any], container: Container, *, metrics: Metrics) -> dict[str, Any]:
    """Run one sweep (at the replayed `detail.now`, if any); the answer is its report."""
    wiring = container.wiring()
    detail = event.get("detail") if isinstance(event, dict) else None
    if isinstance(detail, dict) and detail.get("now"):
        wiring = dataclasses.replace(wiring, clock=ManualClock(parse_iso(str(detail["now"]))))
    run = run_sweeper(wiring)
    add_counts(metrics, run.counts)
    return run.report.as_dict()
