"""The fanned-out tick on the local runtime, with real processes: the rule's function sends one
message per bucket, the bucket dispatcher's processes (the dispatch queue's event source) claim
each bucket's due tasks, and a duplicated tick claims nothing twice."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from iotsched.core.buckets import bucket_of
from iotsched.core.instance_record import InstanceStatus
from iotsched.local.runtime import LocalRuntime
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.definitions.task_file import parse_task_file
from iotsched.services.wiring import Wiring
from iotsched.tasklib import registry
from tests.support import PATIENCE_S

pytestmark = [pytest.mark.slow, pytest.mark.moto]

IDS = [f"fan-{n:02d}" for n in range(12)]


def test_a_duplicated_tick_fans_out_per_bucket_and_claims_each_slot_once(
    runtime: LocalRuntime, services: Wiring
) -> None:
    start = datetime(2026, 1, 12, 9, 58, tzinfo=UTC)
    at = datetime(2026, 1, 12, 10, 0, tzinfo=UTC)
    definitions = parse_task_file(
        {"tasks": [{"id": i, "handler": "noop", "trigger": {"rate": "1h"}} for i in IDS]},
        handlers=registry(),
    )
    apply_tasks(definitions, services.tasks, now=start)
    buckets = runtime.settings().index_buckets
    batches_before = sum(p.batches for p in runtime.dispatchers)

    results = runtime.tick(at + timedelta(seconds=20), repeat=2)

    # Each delivery was the tick function's, and sent one message per bucket; every message
    # was dispatched or absorbed by a bucket dispatcher process.
    assert {r.invocation.function for r in results if r.invocation} == {"TickFunction"}
    for result in results:
        report = result.report
        assert report["buckets"] == buckets
        assert report["buckets_dispatched"] + report["buckets_absorbed"] == buckets
    assert sum(p.batches for p in runtime.dispatchers) - batches_before >= buckets
    assert all(p.alive for p in runtime.dispatchers) and len(runtime.dispatchers) == 2
    # Each slot claimed once over both deliveries, by its own bucket's dispatch.
    claimed = sorted(c for r in results for c in r.report["claimed"])
    assert claimed == sorted(f"{i}@2026-01-12T10:00Z" for i in IDS)
    assert len({bucket_of(i, buckets) for i in IDS}) > 1
    for instance_id in claimed:
        assert runtime.wait_for(lambda i=instance_id: _final(services, i), PATIENCE_S)
        inst = services.instances.get_instance(instance_id)
        assert inst is not None and inst.status is InstanceStatus.SUCCEEDED
    # Every bucket with due tasks recorded the minute done: a late copy would be absorbed.
    for k in {bucket_of(i, buckets) for i in IDS}:
        late = services.tasks.take_tick(
            k, at, owner="late", now=datetime.now(UTC), until=datetime.now(UTC)
        )
        assert not late.taken and late.done == at


def _final(services: Wiring, instance_id: str) -> bool:
    inst = services.instances.get_instance(instance_id)
    return inst is not None and inst.status.final
