"""One sweeper invocation (`run_sweeper`): a sweep under its span, and the counts it adds to
the function's metrics (each of its lists' lengths, zeros too, then the instances it ended)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from iotsched.services.execution.sweep import SweepPorts, SweepReport, sweep

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SweeperRun:
    """What one sweeper invocation did, and its metrics."""

    report: SweepReport
    counts: dict[str, int]


def sweep_counts(report: SweepReport) -> dict[str, int]:
    """The sweep's metrics: how many of each thing it did."""
    return {
        "InstancesTimedOut": len(report.timed_out_instances),
        "ShardsTimedOut": len(report.timed_out_shards),
        "ShardsRequeued": len(report.requeued_shards),
        "DispatchesResumed": len(report.resumed),
        "InstancesFinalized": len(report.finalized),
        "ShardsCancelled": len(report.cancelled_shards),
        "InstancesFollowedUp": len(report.followed_up),
        "AlertsRepublished": len(report.republished_alerts),
        "TasksMissed": len(report.missed_runs),
    }


def run_sweeper(services: SweepPorts) -> SweeperRun:
    """One sweep at the clock's now (an expired lease gets a fresh shard message at once)."""
    with services.tracer.span("sweep"):  # what it resends, finalizes or alerts is in its trace
        report = sweep(services)
    counts = sweep_counts(report)
    counts.update(services.ends.drain())  # the instances this sweep ended, by status
    log.info("sweep done", extra=report.as_dict())
    return SweeperRun(report, counts)
