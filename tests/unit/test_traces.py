"""Traces on the in-memory services: one firing is one trace, from the tick's span to its
shards' effects and its end, with the task, instance, shard and attempt as annotations; no
tracer, no trace in any message."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import timedelta
from typing import Any, cast

from iotsched import bootstrap
from iotsched.adapters.memory.queues import (
    MemoryDispatchQueue,
    MemoryShardQueue,
)
from iotsched.adapters.spans import LocalTracer, SpanRecord, SpanStore, parse_carrier
from iotsched.clock import ManualClock
from iotsched.context import ShardContext
from iotsched.core.instance_record import InstanceStatus
from iotsched.services.definitions.apply import apply_tasks
from iotsched.services.execution.batch import run_shard
from iotsched.services.execution.outcomes import Delivery
from iotsched.services.scheduling.tick import (
    dispatch_bucket,
    fan_out_tick,
)
from iotsched.services.wiring import Wiring
from iotsched.tasklib import registry
from tests.support import T0, task

M = timedelta(minutes=1)
INSTANCE = "fx@2026-11-29T12:00Z"


def effects(ctx: ShardContext) -> Mapping[str, Any] | None:
    """Claims one effect per shard (the second claim of a key is refused)."""
    return {"applied": ctx.once(f"fx#{ctx.business_date}#{ctx.shard}")}


def _services(clock: ManualClock, store: SpanStore | None) -> Wiring:
    tracer = LocalTracer(store, clock) if store is not None else None
    services = bootstrap.build_memory(
        clock=clock, handlers={**registry(), "effects": effects}, buckets=4, tracer=tracer
    )
    definition = task(
        "fx",
        handler="effects",
        trigger={"rate": "1h"},
        sharding={"strategy": "id_range", "shards": 3, "id_max": 30},
    )
    apply_tasks([definition], services.tasks, now=T0 - M)
    return services


def _fire(services: Wiring, store: SpanStore | None) -> None:
    """The tick, every bucket's dispatch, every shard message run by a worker."""
    ticks = MemoryDispatchQueue(tracer=services.tracer)
    fan_out_tick(T0, ticks, buckets=4, tracer=services.tracer)
    for tick in ticks.sent:
        dispatch_bucket(tick, services, owner=f"d{tick.bucket}", until=T0 + M)
    for n, message in enumerate(cast("MemoryShardQueue", services.queue).sent):
        run_shard(
            Delivery(body=message.model_dump_json(), receipt_handle=f"r{n}"), services, worker="w"
        )


def _one(spans: list[SpanRecord], name: str, **annotations: Any) -> SpanRecord:
    found = [
        s
        for s in spans
        if s.name == name and all(s.annotations.get(k) == v for k, v in annotations.items())
    ]
    assert len(found) == 1, (name, annotations, [(s.name, s.annotations) for s in spans])
    return found[0]


def test_one_firing_is_one_trace_from_the_tick_to_its_effects_and_end() -> None:
    # given a task of 3 shards whose handler claims one effect per shard, traced in memory
    clock = ManualClock(T0)
    store = SpanStore()
    services = _services(clock, store)
    # when its tick fires it and a worker runs every shard message
    _fire(services, store)
    instance = services.instances.get_instance(INSTANCE)
    assert instance is not None and instance.status is InstanceStatus.SUCCEEDED
    # then the tick's span is the root of the one trace that holds it all
    spans = store.spans()
    tick = _one(spans, "tick")
    assert tick.parent_id is None and tick.annotations["buckets"] == 4
    trace = store.trace(tick.trace_id)
    assert {s.trace_id for s in spans} == {tick.trace_id}  # one tick: one trace
    by_id = {s.span_id: s for s in trace}
    # every bucket's dispatch is the tick's child; the claim the child of one of them
    dispatches = [s for s in trace if s.name == "dispatch"]
    assert sorted(s.annotations["bucket"] for s in dispatches) == [0, 1, 2, 3]
    assert all(s.parent_id == tick.span_id for s in dispatches)
    claim = _one(trace, "claim", task_id="fx", instance_id=INSTANCE, shards=3)
    assert by_id[claim.parent_id or ""].name == "dispatch"
    # each shard's attempt is the claim's child, annotated with task, instance, shard, attempt
    for shard in range(3):
        attempt = _one(trace, "attempt", instance_id=INSTANCE, shard=shard)
        assert attempt.parent_id == claim.span_id
        assert attempt.annotations["task_id"] == "fx" and attempt.annotations["attempt"] == 1
        assert attempt.annotations["outcome"] == "pending"  # finished, committed after it
        # its effect's span is the attempt's child, and says the key was claimed
        once = _one(trace, "once", instance_id=INSTANCE, shard=shard)
        assert once.parent_id == attempt.span_id
        assert once.annotations["effect_key"] == f"fx#2026-11-28#{shard}"
        assert once.annotations["claimed"] is True and once.annotations["attempt"] == 1
    completes = [s for s in trace if s.name == "complete"]
    assert len(completes) == 3
    assert all(by_id[s.parent_id or ""].name == "attempt" for s in completes)
    # the last completion finalized the instance: its finalize span ended it
    ended = [s for s in trace if s.name == "finalize" and s.annotations["ended"] == "succeeded"]
    assert len(ended) == 1 and ended[0].annotations["task_id"] == "fx"
    last = by_id[ended[0].parent_id or ""]
    assert last.name == "complete" and last.annotations["remaining"] == 0
    assert by_id[last.parent_id or ""].annotations["shard"] == 2
    assert all(s.end is not None and s.error is None for s in trace)


def test_a_repeated_message_stays_in_its_firing_s_trace() -> None:
    # given a firing's shard message, delivered again after its instance ended
    clock = ManualClock(T0)
    store = SpanStore()
    services = _services(clock, store)
    _fire(services, store)
    first = cast("MemoryShardQueue", services.queue).sent[0]
    run_shard(Delivery(body=first.model_dump_json(), receipt_handle="again"), services, worker="w")
    # then its attempt span joins the same trace, under the same claim, and starts nothing
    claim = _one(store.spans(), "claim")
    attempts = [s for s in store.spans() if s.name == "attempt" and s.annotations["shard"] == 0]
    assert len(attempts) == 2
    assert {s.parent_id for s in attempts} == {claim.span_id}
    assert attempts[-1].annotations["outcome"] == "not_started"
    assert "attempt" not in attempts[-1].annotations  # no attempt ran


def test_without_a_tracer_no_message_carries_a_trace() -> None:
    clock = ManualClock(T0)
    services = _services(clock, None)
    ticks = MemoryDispatchQueue()
    fan_out_tick(T0, ticks, buckets=4)
    for tick in ticks.sent:
        assert tick.trace is None
        dispatch_bucket(tick, services, owner="d", until=T0 + M)
    sent = cast("MemoryShardQueue", services.queue).sent
    assert len(sent) == 3
    for message in sent:
        assert message.trace is None
        assert "trace" not in json.loads(message.model_dump_json())  # the body is as before


def test_a_carrier_names_its_trace_and_span_and_a_bad_one_starts_a_new_trace() -> None:
    clock = ManualClock(T0)
    store = SpanStore()
    tracer = LocalTracer(store, clock)
    with tracer.span("outer") as outer:
        assert tracer.carrier() == outer.carrier
        assert parse_carrier(outer.carrier) == (outer.trace_id, outer.span_id)
    with tracer.span("joined", parent=outer.carrier) as joined:
        tracer.annotate(k="v")
    with tracer.span("fresh", parent="not-a-carrier") as fresh:
        pass
    assert tracer.carrier() is None
    assert (joined.trace_id, joined.parent_id) == (outer.trace_id, outer.span_id)
    assert joined.annotations == {"k": "v"}
    assert fresh.parent_id is None and fresh.trace_id != outer.trace_id
    assert [s.name for s in store.spans()] == ["outer", "joined", "fresh"]


def test_a_span_file_per_process_reads_back(tmp_path: Any) -> None:
    from iotsched.adapters.spans import read_spans

    clock = ManualClock(T0)
    one = LocalTracer(SpanStore(tmp_path / "1.jsonl"), clock)
    two = LocalTracer(SpanStore(tmp_path / "2.jsonl"), clock)
    with one.span("send", task_id="t") as sent:
        carrier = sent.carrier
    with two.span("receive", parent=carrier, shard=3), two.span("inner"):
        pass
    (tmp_path / "2.jsonl").open("a").write('{"cut short')  # a process killed mid-line
    spans = {s.name: s for s in read_spans(tmp_path)}
    assert set(spans) == {"send", "receive", "inner"}
    assert spans["receive"].parent_id == spans["send"].span_id
    assert spans["inner"].parent_id == spans["receive"].span_id
    assert spans["receive"].annotations == {"shard": 3}
    assert {s.trace_id for s in spans.values()} == {sent.trace_id}
